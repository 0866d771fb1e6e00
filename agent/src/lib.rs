//! The sessionlog agent stack: the consumers that write the log, on top of the engine.
//!
//! - [`agent`]: the loop (turns and steps in the writer order of spec 7.5, one atomic batch per
//!   phase), the built-in tools, and the repair of an interrupted session on reopen;
//! - [`llm`]: the LLM adapters (DeepSeek over HTTP, the keyless replay provider);
//! - [`prompt`]: assembly, the system-prompt projection, the step driver and the prompt
//!   history;
//! - [`context`]: context as sourced user messages (instructions, skills, notices);
//! - [`compaction`]: range selection, the summarisation input that replays the cached prefix,
//!   the event sequence, and the loop's triggers;
//! - [`writes`]: the one append path, writing each batch in the session's own version.
//!
//! It reads and writes sessions only through `LogStore` (`sessionlog_store`, re-exported by
//! the engine), so `run` and `compact` work on every backend; it knows nothing of HTTP
//! serving.

pub mod agent;
pub mod compaction;
pub mod context;
pub mod llm;
pub mod prompt;
pub mod writes;
