//! What an agent is opened with: its context options, its route selection, and the loop's
//! fixed bounds and names.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::context::instructions::INSTRUCTIONS_BUDGET_BYTES;
use crate::prompt::capability::PreparedCall;

/// The base prompt section of the built-in agent.
pub const BASE_PROMPT: &str = "You are the sessionlog demo agent. Answer briefly; use the tools \
when they help.";
/// Most steps one turn runs.
pub const TURN_STEPS_MAX: u64 = 16;
/// The `form` of a model-switch notice message.
pub const MODEL_SWITCH_FORM: &str = "model-switch";
/// The approval policy a session starts with.
pub const DEFAULT_APPROVAL_POLICY: &str = "on-request";

/// Where the loop finds the context it injects as sourced user messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextOptions {
    /// The user-global instructions directory (its `AGENTS.md` or `CLAUDE.md` is the
    /// broadest); `None` skips it.
    pub user_dir: Option<PathBuf>,
    /// The directories whose sub-folders with a `SKILL.md` are skills.
    pub skill_dirs: Vec<PathBuf>,
    /// The byte budget of one instructions message.
    pub budget_bytes: usize,
}

impl Default for ContextOptions {
    fn default() -> ContextOptions {
        ContextOptions {
            user_dir: None,
            skill_dirs: Vec::new(),
            budget_bytes: INSTRUCTIONS_BUDGET_BYTES,
        }
    }
}

/// The model selection, shared with whoever may change it while a step runs (a UI, another
/// thread). Each step binds the selected route once, when it prepares its call; a change
/// during the step applies from the next step on, and the bound route alone decides the
/// step's prompt admission, its request and the source of its reply.
#[derive(Debug, Clone)]
pub struct RouteSelector(Arc<Mutex<PreparedCall>>);

impl RouteSelector {
    pub fn new(route: PreparedCall) -> RouteSelector {
        RouteSelector(Arc::new(Mutex::new(route)))
    }

    /// Selects `route` for the next step that prepares its call.
    pub fn select(&self, route: PreparedCall) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = route;
    }

    /// The route selected now.
    pub fn current(&self) -> PreparedCall {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
