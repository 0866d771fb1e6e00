//! The LLM adapters the loop and compaction call:
//!
//! - [`adapter`]: the [`adapter::LlmAdapter`] trait, the route and the stream builder that
//!   turns provider deltas into an assistant message and its packed stream records;
//! - [`deepseek`]: the DeepSeek chat-completions adapter over HTTP (the only async code);
//! - [`replay`]: the keyless scripted provider used by tests, demos and `sessionlog run`;
//! - [`provider`]: the one opener `run` and `compact` share (`open_provider`);
//! - [`CancelToken`]: the cancel signal a call checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub mod adapter;
pub mod deepseek;
pub mod provider;
pub mod replay;

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
