//! One compaction: select the range, replay the prefix to the summariser, commit the events.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sessionlog_format::tokens::estimate_message;
use sessionlog_format::{ContentBlock, Event, SessionFold};

use super::events::{checkpoint_message, end_event, finish_events, start_event, Summary};
use super::input::build_summarization_input;
use super::range::{
    select_compactable_range, select_region, starts_at_head, surface_nodes, CompactRange,
    RegionError,
};
use crate::llm::adapter::{CallRequest, LlmAdapter, StreamBuilder};
use crate::llm::CancelToken;
use crate::prompt::capability::PreparedCall;
use sessionlog_engine::log_store::{with_fold, LogStore};
use sessionlog_engine::store::StoreError;

/// The tail a manual compaction keeps by default, in estimated tokens.
pub const DEFAULT_RETAIN_TOKENS: u64 = 2_000;

/// How one compaction selects its range and who owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionOptions {
    /// The recent tail to keep, in estimated tokens (0 after a context overflow).
    pub retain_tokens: u64,
    /// The most tokens to shadow at once (0: no limit).
    pub max_input_tokens: u64,
    /// The owner turn of an automatic compaction; `None` for a manual one.
    pub turn: Option<u64>,
}

impl Default for CompactionOptions {
    fn default() -> CompactionOptions {
        CompactionOptions {
            retain_tokens: DEFAULT_RETAIN_TOKENS,
            max_input_tokens: 0,
            turn: None,
        }
    }
}

/// A committed compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    pub compaction_id: String,
    pub start_seq: u64,
    pub checkpoint_seq: u64,
    pub end_seq: u64,
    pub range: CompactRange,
    /// The estimate of the checkpoint message that replaced the range.
    pub checkpoint_tokens: u64,
    /// The summarisation route.
    pub provider: String,
    pub model: String,
    /// Whether the span starts right after the system head, as an automatic compaction's
    /// does; false for a manual mid-range region.
    pub at_head: bool,
    /// Whether the compaction could reuse the warm conversation prefix: false when the
    /// summarisation route differs from the route of the request header in force, or when
    /// the span is not the request head ([`CompactionReport::at_head`]).
    pub reuses_prefix: bool,
}

/// A compaction failed. Once `compaction/start` is committed, a failure is recorded as a
/// `compaction/end` carrying `error`, and no checkpoint is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A chosen region cannot be compacted; nothing is committed.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// The summarisation failed; `compaction/end` with this error is committed.
    #[error("compaction {compaction_id} failed: {code}: {message}")]
    Failed {
        compaction_id: String,
        code: String,
        message: String,
    },
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// What the fold says before the call.
struct Plan {
    next_seq: u64,
    range: CompactRange,
    body: Value,
    conversation: Option<(Option<String>, String)>,
    /// Whether the span starts right after the system head.
    at_head: bool,
}

/// Which span a compaction takes.
#[derive(Debug, Clone, Copy)]
enum Selection {
    /// [`select_compactable_range`] with these options.
    Head(CompactionOptions),
    /// A chosen surface region, by its endpoint seqs.
    Region { start_seq: u64, end_seq: u64 },
}

/// The plan of one compaction over `fold`: `Ok(None)` when an automatic selection finds
/// nothing worth compacting; a chosen region that cannot be compacted is an error.
fn plan(
    fold: &SessionFold,
    selection: Selection,
    route: &PreparedCall,
) -> Result<Option<Plan>, RegionError> {
    let nodes = surface_nodes(fold);
    // The checkpoint's framing alone costs this much: a span no larger cannot shrink.
    let floor = estimate_message(&checkpoint_message("", ""));
    let range = match selection {
        Selection::Head(options) => {
            let range =
                select_compactable_range(&nodes, options.retain_tokens, options.max_input_tokens);
            match range {
                Some(range) if range.shadowed_tokens > floor => range,
                _ => return Ok(None),
            }
        }
        Selection::Region { start_seq, end_seq } => {
            let range = select_region(&nodes, start_seq, end_seq)?;
            if range.shadowed_tokens <= floor {
                return Err(RegionError::TooSmall {
                    tokens: range.shadowed_tokens,
                    floor,
                });
            }
            range
        }
    };
    let input = build_summarization_input(fold, &range);
    let conversation = fold
        .request_header()
        .map(|h| (h.config.provider.clone(), h.config.model.clone()));
    Ok(Some(Plan {
        next_seq: fold.admission().next_seq(),
        body: input.wire_body(Some(&route.model)),
        at_head: starts_at_head(&nodes, &range),
        range,
        conversation,
    }))
}

/// Runs one compaction over the head of `session`: selects the range, sends the replayed
/// prefix plus the instruction to `adapter` on `route`, and commits the summary, the
/// checkpoint and the end. Returns `Ok(None)` when there is nothing to compact, or the span
/// is no larger than an empty checkpoint (and commits nothing). `route` may differ from the
/// conversation's route; the call then forgoes prefix reuse, which the report says.
pub fn compact(
    store: &dyn LogStore,
    session: &str,
    adapter: &mut dyn LlmAdapter,
    route: &PreparedCall,
    options: CompactionOptions,
    cancel: &CancelToken,
) -> Result<Option<CompactionReport>, CompactionError> {
    let planned = with_fold(store, session, |fold| {
        plan(fold, Selection::Head(options), route)
    })?;
    match planned? {
        Some(plan) => execute(store, session, adapter, route, options.turn, plan, cancel).map(Some),
        None => Ok(None),
    }
}

/// A manual compaction of the surface region from `start_seq` to `end_seq` (both inclusive,
/// in surface order), anywhere after node 0. The summariser is sent the true prefix: every
/// derived message before the region, then the region, then the instruction. A region that
/// does not start right after the system head is not the span the request head would
/// compact, so the report says it forgoes reuse. A region that is not on the surface,
/// includes node 0, splits a tool call from its result or is too small to shrink is refused
/// with [`CompactionError::Region`] before anything is committed.
pub fn compact_region(
    store: &dyn LogStore,
    session: &str,
    start_seq: u64,
    end_seq: u64,
    adapter: &mut dyn LlmAdapter,
    route: &PreparedCall,
    cancel: &CancelToken,
) -> Result<CompactionReport, CompactionError> {
    let selection = Selection::Region { start_seq, end_seq };
    let planned = with_fold(store, session, |fold| plan(fold, selection, route))?;
    let plan = planned?.ok_or(CompactionError::Region(RegionError::TooSmall {
        tokens: 0,
        floor: 0,
    }))?;
    execute(store, session, adapter, route, None, plan, cancel)
}

/// Commits `compaction/start`, makes the summarisation call and commits the rest.
fn execute(
    store: &dyn LogStore,
    session: &str,
    adapter: &mut dyn LlmAdapter,
    route: &PreparedCall,
    turn: Option<u64>,
    plan: Plan,
    cancel: &CancelToken,
) -> Result<CompactionReport, CompactionError> {
    let compaction_id = format!("compact-{}", plan.next_seq);
    let start_seq = plan.next_seq;
    let start = start_event(start_seq, now_ms(), &compaction_id, turn);
    let next = crate::writes::append_events(store, session, start_seq, vec![start])?.next_seq;
    let fail = |next: u64, code: &str, message: String| -> CompactionError {
        let error = json!({ "code": code, "message": message });
        let end = end_event(next, now_ms(), &compaction_id, turn, Some(error));
        if let Err(e) = crate::writes::append_events(store, session, next, vec![end]) {
            return CompactionError::Store(e);
        }
        CompactionError::Failed {
            compaction_id: compaction_id.clone(),
            code: code.to_owned(),
            message,
        }
    };
    let mut builder = StreamBuilder::new();
    let request = CallRequest {
        route,
        body: &plan.body,
    };
    let result = adapter.stream(&request, cancel, &mut |delta| builder.push(now_ms(), delta));
    if let Err(failure) = result {
        return Err(fail(next, &failure.code, failure.message));
    }
    let completion = builder.finish();
    let text: String = ContentBlock::reply_text(&completion.content);
    if text.trim().is_empty() {
        return Err(fail(next, "EMPTY_SUMMARY", "the summary is empty".into()));
    }
    let checkpoint_tokens = estimate_message(&checkpoint_message(&compaction_id, &text));
    if checkpoint_tokens >= plan.range.shadowed_tokens {
        let message = format!(
            "summary is not smaller than the span it replaces ({checkpoint_tokens} >= {} tokens)",
            plan.range.shadowed_tokens
        );
        return Err(fail(next, "NOT_SMALLER", message));
    }
    // The call was the only asynchronous part: the span must still be where it was.
    let (stable, now_next) = with_fold(store, session, |fold| {
        let nodes = fold.admission().surface().nodes();
        let span = nodes.get(plan.range.start_idx..=plan.range.end_idx);
        let seqs: Option<Vec<u64>> = span.map(|s| s.iter().map(|n| n.seq).collect());
        (
            seqs.as_deref() == Some(plan.range.shadowed_seqs.as_slice()),
            fold.admission().next_seq(),
        )
    })?;
    if !stable {
        let message = "the surface changed during the summarisation call".to_owned();
        return Err(fail(now_next, "SURFACE_CHANGED", message));
    }
    let summary = Summary {
        text,
        provider: route.provider.clone(),
        model: route.model.clone(),
        usage: completion
            .usage
            .as_ref()
            .and_then(|u| serde_json::to_value(u).ok()),
    };
    let events: Vec<Event> = finish_events(
        now_next,
        now_ms(),
        &compaction_id,
        turn,
        start_seq,
        &plan.range,
        &summary,
    );
    let end_seq = now_next + 2;
    crate::writes::append_events(store, session, now_next, events)?;
    let same_route = plan.conversation.as_ref().is_some_and(|(provider, model)| {
        provider.as_deref() == Some(route.provider.as_str()) && *model == route.model
    });
    Ok(CompactionReport {
        compaction_id,
        start_seq,
        checkpoint_seq: now_next + 1,
        end_seq,
        range: plan.range,
        checkpoint_tokens,
        provider: route.provider.clone(),
        model: route.model.clone(),
        at_head: plan.at_head,
        reuses_prefix: same_route && plan.at_head,
    })
}
