//! The agent loop and its LLM adapters (spec 7.5): a consumer of the log whose every request
//! can be rebuilt from the events it commits.
//!
//! - the LLM adapters live in [`crate::llm`] (re-exported here as `adapter`, `deepseek`,
//!   `replay`);
//! - [`tools`]: the built-in tools (`read`, `write`, `echo`, `plan_mode`) and their prompt
//!   sections;
//! - [`options`]: what an agent is opened with (context options, the route selector, bounds);
//! - [`events`]: the pure event builders the loop and the repair share;
//! - [`turn`]: the loop itself, in the writer order of spec 7.5, with the tool-update and
//!   model-switch notices and plan mode restored from the log on resume;
//! - [`repair`]: the interrupted-turn closers of spec 12.4, appended on reopen.
//!
//! The request body is never kept aside: it is serialized from the session fold after the
//! step's events are committed, which is exactly what `requests` rebuilds from the log.

pub mod events;
pub mod options;
pub mod repair;
pub mod tools;
pub mod turn;

/// The LLM adapters, under the paths the loop's callers have always used.
pub use crate::llm::{adapter, deepseek, replay, CancelToken};

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
