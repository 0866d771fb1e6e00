//! When the loop compacts on its own: context pressure before a step, and recovery after a context overflow.
//!
//! Both run through the agent's own adapter on the conversation's route, so the summarisation
//! call extends the warm prefix of the request just sent. A compaction moves the surface's
//! replace generation, so the next request starts a new series (spec 7.5 rule 5) without
//! anything declared here.

use sessionlog_format::EventType;

use super::meter_total;
use super::run::{compact, CompactionError, CompactionOptions};
use crate::llm::adapter::{CallFailure, LlmAdapter};
use crate::llm::CancelToken;
use crate::prompt::capability::PreparedCall;
use sessionlog_engine::log_store::{with_fold, LogStore};
use sessionlog_engine::store::StoreError;

/// The environment variable that overrides [`CompactionPolicy::threshold_percent`].
pub const THRESHOLD_ENV: &str = "SESSIONLOG_COMPACT_THRESHOLD";

/// When pressure compaction fires and how much it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Compact before a step when the estimated context reaches this share of the route's
    /// context window, in percent (1..=100).
    pub threshold_percent: u64,
    /// The recent tail an automatic compaction keeps, in percent of the window.
    pub retain_percent: u64,
}

impl Default for CompactionPolicy {
    fn default() -> CompactionPolicy {
        CompactionPolicy {
            threshold_percent: 80,
            retain_percent: 30,
        }
    }
}

impl CompactionPolicy {
    /// The default policy, with the threshold from [`THRESHOLD_ENV`] when it holds a percent
    /// in 1..=100 (anything else is ignored).
    pub fn from_env() -> CompactionPolicy {
        let mut policy = CompactionPolicy::default();
        let percent = std::env::var(THRESHOLD_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(percent) = percent.filter(|p| (1..=100).contains(p)) {
            policy.threshold_percent = percent;
        }
        policy
    }
}

/// Whether `failure` says the request exceeded the model's context window.
pub fn is_context_overflow(failure: &CallFailure) -> bool {
    if failure.code == "CONTEXT_OVERFLOW" || failure.code == "context_length_exceeded" {
        return true;
    }
    let message = failure.message.to_ascii_lowercase();
    message.contains("context length") || message.contains("context_length_exceeded")
}

fn owner(turn: u64, step: u64) -> Option<u64> {
    // On a turn's first step the turn is not open yet: the compaction has no owner.
    (step > 1).then_some(turn)
}

fn settle(
    result: Result<Option<super::CompactionReport>, CompactionError>,
) -> Result<bool, StoreError> {
    match result {
        Ok(report) => Ok(report.is_some()),
        // The failure is recorded on `compaction/end`; the loop goes on without it.
        Err(CompactionError::Failed { .. } | CompactionError::Region(_)) => Ok(false),
        Err(CompactionError::Store(e)) => Err(e),
    }
}

/// The pre-step hook: compacts when the estimated context (surface plus tools) reaches the
/// threshold of `route`'s context window under `policy`. Returns whether a compaction was
/// committed. A route without a window never compacts.
#[allow(clippy::too_many_arguments)]
pub fn pre_step_with(
    policy: CompactionPolicy,
    store: &dyn LogStore,
    session: &str,
    adapter: &mut dyn LlmAdapter,
    route: &PreparedCall,
    turn: u64,
    step: u64,
    cancel: &CancelToken,
) -> Result<bool, StoreError> {
    let Some(window) = route.context_window.filter(|w| *w > 0) else {
        return Ok(false);
    };
    let total = with_fold(store, session, meter_total)?;
    if total.saturating_mul(100) < window.saturating_mul(policy.threshold_percent) {
        return Ok(false);
    }
    let options = CompactionOptions {
        retain_tokens: window.saturating_mul(policy.retain_percent) / 100,
        max_input_tokens: 0,
        turn: owner(turn, step),
    };
    settle(compact(store, session, adapter, route, options, cancel))
}

/// The overflow hook, after a failed call's `assistant/attempt` is committed: on a context
/// overflow, compacts everything after the system head (`retain_tokens` 0) and returns
/// `true` so that the loop sends the step again; the open turn owns the compaction. It recovers once per failure: when the
/// attempt right before follows a compaction's end, it returns `false`.
#[allow(clippy::too_many_arguments)]
pub fn recover_overflow(
    store: &dyn LogStore,
    session: &str,
    adapter: &mut dyn LlmAdapter,
    route: &PreparedCall,
    turn: u64,
    failure: &CallFailure,
    cancel: &CancelToken,
) -> Result<bool, StoreError> {
    if !is_context_overflow(failure) {
        return Ok(false);
    }
    let next = store.head(session)?.next_seq;
    let recent = store.read_range(session, next.saturating_sub(2), next)?;
    let retried = recent.len() == 2
        && recent[0].kind == EventType::CompactionEnd
        && recent[1].kind == EventType::AssistantAttempt;
    if retried {
        return Ok(false);
    }
    let options = CompactionOptions {
        retain_tokens: 0,
        max_input_tokens: 0,
        turn: Some(turn),
    };
    settle(compact(store, session, adapter, route, options, cancel))
}
