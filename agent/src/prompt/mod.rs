//! The prompt layer on the log: what a step commits so that the provider's prefix cache
//! survives prompt changes (spec 7.5 and 8; the in-history system-prompt and prompt-assembly
//! design notes).
//!
//! The pieces, in the order a step uses them:
//! - [`registry::PromptRegistry`] holds sections, runtime contexts, variables, tool-schema
//!   providers and runtime-context suppressors in scoped layers, and assembles them into an
//!   [`registry::Assembly`];
//! - [`render`] renders `{{name}}` strictly, [`tools`] orders tool schemas;
//! - [`runtime::RuntimeContextProjection`] turns the assembly's contexts into a user-role
//!   snapshot, committed only when it changed;
//! - [`series::starts_series`] decides whether the step begins a new request series;
//! - [`projection::project`] is the system-prompt decision table: the ordered per-node commits
//!   for a rendering, a route capability ([`capability`]) and the series state;
//! - [`header_log`] decides `request/header` (initial, resume, change, series) and
//!   `request/context`;
//! - [`step::PromptLoop`] drives each step against the store, in the writer order of spec 7.5;
//! - [`history`] reads back the prompt versions of a session for `sessionlog prompt`.
//!
//! Everything here but [`step`] and [`history`]'s store reader is synchronous and pure: values in,
//! events out. **Invariant:** after any sequence of projections applied to a log, the derived
//! messages hold exactly the current rendered prompt as the effective system text, and an
//! in-history route whose series continues never rewrites node 0.

pub mod capability;
pub mod header_log;
pub mod history;
pub mod projection;
pub mod registry;
pub mod render;
pub mod runtime;
pub mod series;
pub mod step;
pub mod tools;

/// The plugin that owns the system prompt and the runtime-context snapshots (`source.plugin`).
pub const PROMPT_PLUGIN: &str = "@deepseek-ai/dsh-system-prompt";

/// A prompt-layer operation on a session failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] sessionlog_engine::store::StoreError),
    /// A log file could not be read.
    #[error(transparent)]
    File(#[from] sessionlog_engine::Error),
}
