//! The agent loop and its LLM adapters (spec 7.5): a consumer of the log whose every request
//! can be rebuilt from the events it commits.
//!
//! - [`adapter`]: the [`adapter::LlmAdapter`] trait, the route and the stream builder that
//!   turns provider deltas into an assistant message and its packed stream records;
//! - [`deepseek`]: the DeepSeek chat-completions adapter over HTTP (the only async code);
//! - [`replay`]: the keyless scripted provider used by tests, demos and `sessionlog run`;
//! - [`tools`]: the built-in tools (`read`, `write`, `echo`, `plan_mode`) and their prompt
//!   sections;
//! - [`turn`]: the loop itself, in the writer order of spec 7.5, with the tool-update and
//!   model-switch notices and plan mode restored from the log on resume;
//! - [`repair`]: the interrupted-turn closers of spec 12.4, appended on reopen.
//!
//! The request body is never kept aside: it is serialized from the session fold after the
//! step's events are committed, which is exactly what `requests` rebuilds from the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub mod adapter;
pub mod deepseek;
pub mod repair;
pub mod replay;
pub mod tools;
pub mod turn;

/// A cancel signal shared between the caller and a running turn.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A turn of the agent loop failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    #[error(transparent)]
    Store(#[from] sessionlog_engine::store::StoreError),
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    #[error("prompt assembly failed: {0}")]
    Assembly(String),
    /// The first input was empty or refused: no step was opened.
    #[error("the input is empty")]
    EmptyInput,
    /// The turn was cancelled; what was committed is closed.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The model call failed for good.
    #[error("model call failed: {code}: {message}")]
    Call { code: String, message: String },
    /// The session refused an event.
    #[error("{0}")]
    Refused(String),
}
