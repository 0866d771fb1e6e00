//! The paged, summarised views the console reads: the sessions page (`/v1/audit`), a
//! session's compact request rows (`requests?compact=true`), its token breakdown per request
//! (`tokens`) and its transcript (`show`). Each answer is one page, so no page costs bytes
//! that grow with the square of the session.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};
use sessionlog_engine::documents::{entry, request_row_compact, summary, tokens_row};
use sessionlog_engine::show::ShowOptions;
use sessionlog_engine::stored::{transcript_page, TranscriptQuery};

use super::audit_cache::AuditQuery;
use super::json::respond;
use super::limits::{
    AUDIT_FILTER_BYTES_MAX, AUDIT_PAGE_ROWS_DEFAULT, AUDIT_PAGE_ROWS_MAX, SHOW_BODY_BYTES_MAX,
    SHOW_PAGE_ENTRIES_DEFAULT, SHOW_PAGE_ENTRIES_MAX, TOKENS_PAGE_ROWS_DEFAULT,
    TOKENS_PAGE_ROWS_MAX,
};
use super::routes::{bad_request, fold_permit, internal, store_failure};
use super::AppState;

/// The marker names of `show --json`, and `message`: what `?kinds=` may list.
const ENTRY_KINDS: [&str; 12] = [
    "message",
    "turn-start",
    "turn-end",
    "prompt",
    "prompt-append",
    "prompt-rewrite",
    "prompt-clear",
    "compaction",
    "prune",
    "attempt",
    "retry",
    "replace",
];

/// `?limit=` within 1..=`max`, `default` when absent.
fn page_limit(limit: Option<u64>, default: u64, max: u64) -> Result<u64, Box<Response>> {
    let limit = limit.unwrap_or(default);
    if limit == 0 || limit > max {
        return Err(Box::new(bad_request(format!("limit must be 1 to {max}"))));
    }
    Ok(limit)
}

/// `{"from","limit","nextFrom"}`, `nextFrom` null after the last row.
fn page(from: u64, limit: u64, total: u64) -> Value {
    let end = from.saturating_add(limit);
    json!({ "from": from, "limit": limit, "nextFrom": (end < total).then_some(end) })
}

/// The sessions page: `audit` rows sorted, filtered and paged (`audit_cache`).
pub(crate) async fn audit(
    State(state): State<AppState>,
    Query(query): Query<AuditQuery>,
) -> Response {
    let limit = match page_limit(query.limit, AUDIT_PAGE_ROWS_DEFAULT, AUDIT_PAGE_ROWS_MAX) {
        Ok(limit) => limit,
        Err(refused) => return *refused,
    };
    if query
        .filter
        .as_ref()
        .is_some_and(|f| f.len() > AUDIT_FILTER_BYTES_MAX)
    {
        return bad_request(format!("filter is at most {AUDIT_FILTER_BYTES_MAX} bytes"));
    }
    let cache = Arc::clone(&state.audits);
    let permit = fold_permit(&state).await;
    let answer = state
        .service
        .run_walk(permit, move |store| cache.page(store, &query, limit))
        .await;
    match answer {
        Ok(body) => respond(StatusCode::OK, &body),
        Err(error) => store_failure(&error),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RowsQuery {
    from: Option<u64>,
    limit: Option<u64>,
}

/// The `tokens` document of one page of requests, with `nextSeq` (the head it describes)
/// and `page`.
pub(crate) async fn tokens(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<RowsQuery>,
) -> Response {
    let limit = match page_limit(query.limit, TOKENS_PAGE_ROWS_DEFAULT, TOKENS_PAGE_ROWS_MAX) {
        Ok(limit) => limit,
        Err(refused) => return *refused,
    };
    let from = query.from.unwrap_or(0);
    let cache = Arc::clone(&state.derived);
    let permit = fold_permit(&state).await;
    let derived = state
        .service
        .run_walk(permit, move |store| cache.get(store, &session))
        .await;
    let derived = match derived {
        Ok(derived) => derived,
        Err(error) => return store_failure(&error),
    };
    let report = &derived.tokens;
    let rows: Vec<Value> = slice(&report.requests, from, limit)
        .iter()
        .map(tokens_row)
        .collect();
    let body = json!({
        "session": report.session,
        "nextSeq": derived.next_seq,
        "requests": rows,
        "head": sessionlog_engine::documents::breakdown(&report.head),
        "page": page(from, limit, report.requests.len() as u64),
    });
    respond(StatusCode::OK, &body)
}

/// The compact `requests` document: rows without bodies and without what repeats per
/// header, up to [`super::limits::REQUESTS_COMPACT_PAGE_ROWS_MAX`] a page.
pub(crate) async fn requests_compact(
    state: AppState,
    session: String,
    from: u64,
    limit: u64,
) -> Response {
    let cache = Arc::clone(&state.derived);
    let permit = fold_permit(&state).await;
    let derived = state
        .service
        .run_walk(permit, move |store| cache.get(store, &session))
        .await;
    let derived = match derived {
        Ok(derived) => derived,
        Err(error) => return store_failure(&error),
    };
    let report = &derived.requests;
    let rows: Result<Vec<Value>, _> = slice(&report.requests, from, limit)
        .iter()
        .map(request_row_compact)
        .collect();
    let rows = match rows {
        Ok(rows) => rows,
        Err(error) => return internal(error),
    };
    let body = json!({
        "session": report.session,
        "snapshot": report.snapshot,
        "nextSeq": derived.next_seq,
        "requests": rows,
        "summary": summary(&report.summary),
        "page": page(from, limit, report.requests.len() as u64),
    });
    respond(StatusCode::OK, &body)
}

fn slice<T>(rows: &[T], from: u64, limit: u64) -> &[T] {
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(rows.len());
    let end = usize::try_from(from.saturating_add(limit))
        .unwrap_or(usize::MAX)
        .min(rows.len());
    &rows[start..end]
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ShowQuery {
    from: Option<u64>,
    limit: Option<u64>,
    /// Comma-separated entry kinds to keep.
    kinds: Option<String>,
    max_body_bytes: Option<u64>,
}

/// One page of the `show --json` document: `{"session","entries":[...],"page"}`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<ShowQuery>,
) -> Response {
    let limit = match page_limit(
        query.limit,
        SHOW_PAGE_ENTRIES_DEFAULT,
        SHOW_PAGE_ENTRIES_MAX,
    ) {
        Ok(limit) => limit,
        Err(refused) => return *refused,
    };
    let body_bytes_max = query
        .max_body_bytes
        .unwrap_or(sessionlog_engine::show::BODY_BYTES_MAX_DEFAULT as u64);
    if body_bytes_max == 0 || body_bytes_max > SHOW_BODY_BYTES_MAX {
        return bad_request(format!("maxBodyBytes must be 1 to {SHOW_BODY_BYTES_MAX}"));
    }
    let kinds: Vec<String> = query
        .kinds
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(unknown) = kinds.iter().find(|k| !ENTRY_KINDS.contains(&k.as_str())) {
        return bad_request(format!(
            "unknown entry kind {unknown:?} (one of {})",
            ENTRY_KINDS.join(", ")
        ));
    }
    let options = ShowOptions {
        body_bytes_max: Some(usize::try_from(body_bytes_max).unwrap_or(usize::MAX)),
    };
    let from = query.from.unwrap_or(0);
    let transcript_query = TranscriptQuery { from, limit, kinds };
    let permit = fold_permit(&state).await;
    let answer = state
        .service
        .run_walk(permit, move |store| {
            transcript_page(store, &session, options, &transcript_query)
        })
        .await;
    match answer {
        Ok(found) => {
            let entries: Vec<Value> = found.entries.iter().map(entry).collect();
            let end = from.saturating_add(limit);
            let body = json!({
                "session": found.session,
                "entries": entries,
                "page": { "from": from, "limit": limit, "nextFrom": found.more.then_some(end) },
            });
            respond(StatusCode::OK, &body)
        }
        Err(error) => store_failure(&error),
    }
}
