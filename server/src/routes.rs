//! The handlers: each parses its input, calls the service, and answers with a document of
//! `json`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use sessionlog_format::row::{decode_row, Decoded, RowContext};
use sessionlog_format::{Event, FormatVersion, Rule, SessionHeader, Violation};

use super::body::read_body;
use super::json::{self, respond};
use super::limits::{
    decoded_cost, HEADER_BODY_BYTES_MAX, REQUESTS_BODIES_PAGE_ROWS_DEFAULT,
    REQUESTS_BODIES_PAGE_ROWS_MAX, REQUESTS_COMPACT_PAGE_ROWS_DEFAULT,
    REQUESTS_COMPACT_PAGE_ROWS_MAX, REQUESTS_PAGE_ROWS_DEFAULT, REQUESTS_PAGE_ROWS_MAX,
};
use super::{views, AppState, OPENAPI_JSON};
use sessionlog_engine::inspect::fold_session;
use sessionlog_engine::log_store::READ_EVENTS_MAX;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::requests::RequestOptions;
use sessionlog_engine::store::{AppendRequest, StoreError, BATCH_EVENTS_MAX};

/// Paths open without a token.
pub(crate) fn open() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi))
        .merge(super::console::routes())
}

/// Paths behind the token, when one is set.
pub(crate) fn protected() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", get(list_sessions).post(create_session))
        .route("/v1/sessions/{session}", get(session_info))
        .route("/v1/sessions/{session}/head", get(head))
        .route("/v1/sessions/{session}/events", get(read).post(append))
        .route("/v1/sessions/{session}/tail", get(tail))
        .route("/v1/sessions/{session}/messages", get(messages))
        .route("/v1/sessions/{session}/surface", get(surface))
        .route("/v1/sessions/{session}/requests", get(requests))
        .route("/v1/sessions/{session}/verify", get(verify_session))
        .route("/v1/sessions/{session}/tokens", get(views::tokens))
        .route("/v1/sessions/{session}/show", get(views::show))
        .route("/v1/verify", post(verify_all))
        .route("/v1/audit", get(views::audit))
}

pub(crate) fn store_failure(error: &StoreError) -> Response {
    let (status, body) = json::store_error(error);
    respond(status, &body)
}

pub(crate) fn bad_request(message: impl Into<String>) -> Response {
    let message = message.into();
    respond(
        StatusCode::BAD_REQUEST,
        &json!({ "error": "bad-request", "message": message }),
    )
}

pub(crate) fn internal(message: impl std::fmt::Display) -> Response {
    respond(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({ "error": "internal", "message": message.to_string() }),
    )
}

async fn health(State(state): State<AppState>) -> Response {
    let backend = state.service.store().backend_name();
    respond(
        StatusCode::OK,
        &json!({ "status": "ok", "backend": backend }),
    )
}

async fn openapi() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        OPENAPI_JSON,
    )
        .into_response()
}

async fn list_sessions(State(state): State<AppState>) -> Response {
    match state.service.run(|store| store.sessions()).await {
        Ok(ids) => respond(StatusCode::OK, &json!({ "sessions": ids })),
        Err(error) => store_failure(&error),
    }
}

/// The body is the session's V3 header line (its `id` names the session).
async fn create_session(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let bytes_max = HEADER_BODY_BYTES_MAX.min(state.limits.body_bytes_max);
    let body = match read_body(&state.bodies, &state.limits, &headers, body, bytes_max).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let header: SessionHeader = match serde_json::from_slice(&body.bytes) {
        Ok(header) => header,
        Err(error) => return bad_request(format!("the body is not a session header: {error}")),
    };
    let id = header.id.clone();
    if let Err(error) = state.service.create_session(header, false).await {
        return store_failure(&error);
    }
    match state.service.head(&id).await {
        Ok(head) => respond(StatusCode::CREATED, &json::head(&id, &head)),
        Err(error) => store_failure(&error),
    }
}

async fn session_info(State(state): State<AppState>, Path(session): Path<String>) -> Response {
    let id = session.clone();
    let read = state
        .service
        .run(move |store| Ok((store.session_info(&id)?, store.head(&id)?)))
        .await;
    match read {
        Ok((info, head)) => {
            let mut body = json::head(&session, &head);
            body["header"] = serde_json::to_value(&info.header).unwrap_or_default();
            body["snapshot"] = info.snapshot.into();
            respond(StatusCode::OK, &body)
        }
        Err(error) => store_failure(&error),
    }
}

async fn head(State(state): State<AppState>, Path(session): Path<String>) -> Response {
    match state.service.head(&session).await {
        Ok(head) => respond(StatusCode::OK, &json::head(&session, &head)),
        Err(error) => store_failure(&error),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AppendBody<'a> {
    expected_next_seq: u64,
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
}

/// 413 `decoded-too-large` when the batch's rows would decode to more than `decoded_max`
/// bytes by [`decoded_cost`]: wide arrays cost per element, not per byte of text.
fn check_decoded_size(body: &AppendBody<'_>, decoded_max: u64) -> Result<(), Box<Response>> {
    let decoded = body
        .events
        .iter()
        .map(|row| decoded_cost(row.get().as_bytes()))
        .fold(0u64, u64::saturating_add);
    if decoded <= decoded_max {
        return Ok(());
    }
    Err(Box::new(respond(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({ "error": "decoded-too-large",
            "message": format!("the events would take about {decoded} bytes decoded, at most {decoded_max}"),
            "decodedBytes": decoded, "decodedBytesMax": decoded_max }),
    )))
}

/// Decodes the batch's rows as events of the session's version (`ctx`, from its record); a
/// row that breaks an envelope rule is refused with its seq and rule, as the store refuses an
/// event.
fn decode_batch(
    session: &str,
    ctx: RowContext,
    body: &AppendBody<'_>,
) -> Result<Vec<Event>, StoreError> {
    if body.events.len() > BATCH_EVENTS_MAX {
        return Err(StoreError::BatchTooLarge {
            session: session.to_owned(),
            n_events: body.events.len(),
        });
    }
    let mut events = Vec::with_capacity(body.events.len());
    for (expected_seq, row) in (body.expected_next_seq..).zip(&body.events) {
        let rejected = |violation| StoreError::Rejected {
            session: session.to_owned(),
            seq: expected_seq,
            violation,
        };
        match decode_row(row.get().as_bytes(), ctx, expected_seq).map_err(rejected)? {
            Decoded::One(event) => events.push(*event),
            Decoded::Packed(_) => {
                let message = "a packed chunk row is not an event of a stored session";
                return Err(rejected(Violation::new(Rule::Envelope, message)));
            }
        }
    }
    Ok(events)
}

/// 200 with the new head; 409 with the current head on a stale expected seq; 422 with the
/// seq and rule on a refusal.
async fn append(
    State(state): State<AppState>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let bytes_max = state.limits.body_bytes_max;
    let body = match read_body(&state.bodies, &state.limits, &headers, body, bytes_max).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let parsed: AppendBody<'_> = match serde_json::from_slice(&body.bytes) {
        Ok(parsed) => parsed,
        Err(error) => {
            return bad_request(format!(
                "the body must be {{\"expectedNextSeq\", \"events\": [...]}}: {error}"
            ))
        }
    };
    // The event count is refused first (`decode_batch`), as before the decoded bound existed.
    if parsed.events.len() <= BATCH_EVENTS_MAX {
        if let Err(refused) = check_decoded_size(&parsed, state.limits.decoded_bytes_max) {
            return *refused;
        }
    }
    let ctx = if parsed.events.len() <= BATCH_EVENTS_MAX {
        match session_context(&state, &session).await {
            Ok(ctx) => ctx,
            Err(error) => return store_failure(&error),
        }
    } else {
        RowContext {
            version: FormatVersion::V3,
            snapshot: false,
            skim: false,
        }
    };
    let events = match decode_batch(&session, ctx, &parsed) {
        Ok(events) => events,
        Err(error) => return store_failure(&error),
    };
    let request = AppendRequest {
        session: session.clone(),
        expected_next_seq: parsed.expected_next_seq,
        events,
    };
    match state.service.append(request).await {
        Ok(ack) => respond(StatusCode::OK, &json::ack(&ack)),
        Err(error @ StoreError::Conflict { .. }) => {
            let (status, mut body) = json::store_error(&error);
            if let Ok(head) = state.service.head(&session).await {
                body["nextSeq"] = head.next_seq.into();
                body["headHash"] = json::hex(&head.chain).into();
            }
            respond(status, &body)
        }
        Err(error) => store_failure(&error),
    }
}

/// The rules a session's rows are read by: its version and snapshot flag, from its record.
async fn session_context(state: &AppState, session: &str) -> Result<RowContext, StoreError> {
    let id = session.to_owned();
    let info = state
        .service
        .run(move |store| store.session_info(&id))
        .await?;
    Ok(RowContext {
        version: info.version(),
        snapshot: info.snapshot,
        skim: false,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeQuery {
    from: Option<u64>,
    to: Option<u64>,
}

/// Events `from..to` (at most [`READ_EVENTS_MAX`]; the answer's `nextSeq` is the head).
async fn read(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<RangeQuery>,
) -> Response {
    let from_seq = query.from.unwrap_or(0);
    let to_seq = query
        .to
        .unwrap_or(u64::MAX)
        .min(from_seq.saturating_add(READ_EVENTS_MAX));
    let id = session.clone();
    let read = state
        .service
        .run(move |store| {
            let version = store.session_info(&id)?.version();
            Ok((
                version,
                store.head(&id)?,
                store.read_range(&id, from_seq, to_seq)?,
            ))
        })
        .await;
    match read {
        Ok((version, head, events)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json::events(&session, version, from_seq, head.next_seq, &events),
        )
            .into_response(),
        Err(error) => store_failure(&error),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TailQuery {
    from: Option<u64>,
}

/// SSE: one `event` per stored event (`id` = its seq, `data` = its row), from `Last-Event-ID`
/// + 1 when the client resumes, else `?from=`, else 0.
async fn tail(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<TailQuery>,
    headers: HeaderMap,
) -> Response {
    let resumed = headers
        .get("last-event-id")
        .map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()));
    let from_seq = match resumed {
        Some(Some(last)) => last.saturating_add(1),
        Some(None) => return bad_request("Last-Event-ID must be a seq"),
        None => query.from.unwrap_or(0),
    };
    // Auth has passed, so the token presented is the server's; without one, one bucket.
    let token = match state.token {
        Some(_) => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default(),
        None => "",
    };
    let slot = match state.tails.take(token) {
        Ok(slot) => slot,
        Err(refused) => return *refused,
    };
    let version = match session_context(&state, &session).await {
        Ok(ctx) => ctx.version,
        Err(error) => return store_failure(&error),
    };
    match state.service.tail(&session, from_seq).await {
        Ok(tail) => Sse::new(tail_stream(tail, version, slot))
            .keep_alive(KeepAlive::default())
            .into_response(),
        Err(error) => store_failure(&error),
    }
}

/// The tail's events as SSE; the stream owns the tail's slot, so the slot is freed when the
/// connection drops the stream.
fn tail_stream(
    tail: sessionlog_engine::log_service::Tail,
    version: FormatVersion,
    slot: super::tails::TailSlot,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(Some((tail, slot)), move |tail| async move {
        let (mut tail, slot) = tail?;
        match tail.next().await? {
            Ok(event) => {
                let sse = SseEvent::default()
                    .event("event")
                    .id(event.seq.to_string())
                    .data(json::event_row(&event, version));
                Some((Ok(sse), Some((tail, slot))))
            }
            Err(error) => {
                let (_, body) = json::store_error(&error);
                let sse = SseEvent::default().event("error").data(body.to_string());
                Some((Ok(sse), None))
            }
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AtQuery {
    at: Option<u64>,
}

async fn messages(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<AtQuery>,
) -> Response {
    let permit = fold_permit(&state).await;
    let folded = state
        .service
        .run_walk(permit, move |store| {
            let source = SessionSource::Store {
                store,
                session: &session,
            };
            fold_session(source, query.at).map_err(sessionlog_engine::Error::into_store_error)
        })
        .await;
    match folded {
        Ok(folded) => match json::messages(&folded) {
            Ok(body) => respond(StatusCode::OK, &body),
            Err(error) => internal(error),
        },
        Err(error) => store_failure(&error),
    }
}

async fn surface(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<AtQuery>,
) -> Response {
    let permit = fold_permit(&state).await;
    let folded = state
        .service
        .run_walk(permit, move |store| {
            let source = SessionSource::Store {
                store,
                session: &session,
            };
            fold_session(source, query.at).map_err(sessionlog_engine::Error::into_store_error)
        })
        .await;
    match folded {
        Ok(folded) => respond(StatusCode::OK, &json::surface(&folded)),
        Err(error) => store_failure(&error),
    }
}

/// A turn for a whole-session fold; waits while [`super::limits::FOLDS_MAX`] run.
pub(crate) async fn fold_permit(state: &AppState) -> tokio::sync::OwnedSemaphorePermit {
    Arc::clone(&state.folds)
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestsQuery {
    bodies: Option<bool>,
    compact: Option<bool>,
    from: Option<u64>,
    limit: Option<u64>,
}

/// The `requests` document of one page of rows: `?from=` (a row index, default 0) and
/// `?limit=` (default and maximum by whether rows carry bodies); `summary` covers the whole
/// session and `page.nextFrom` is the index after the page (`null` after the last row).
async fn requests(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<RequestsQuery>,
) -> Response {
    let options = RequestOptions {
        bodies: query.bodies.unwrap_or(false),
    };
    let compact = query.compact.unwrap_or(false);
    if compact && options.bodies {
        return bad_request("compact rows carry no bodies: give compact or bodies, not both");
    }
    let (default, max) = if compact {
        (
            REQUESTS_COMPACT_PAGE_ROWS_DEFAULT,
            REQUESTS_COMPACT_PAGE_ROWS_MAX,
        )
    } else if options.bodies {
        (
            REQUESTS_BODIES_PAGE_ROWS_DEFAULT,
            REQUESTS_BODIES_PAGE_ROWS_MAX,
        )
    } else {
        (REQUESTS_PAGE_ROWS_DEFAULT, REQUESTS_PAGE_ROWS_MAX)
    };
    let limit = query.limit.unwrap_or(default);
    if limit == 0 || limit > max {
        return bad_request(format!("limit must be 1 to {max}"));
    }
    let from = query.from.unwrap_or(0);
    if compact {
        return views::requests_compact(state, session, from, limit).await;
    }
    let rows = from..from.saturating_add(limit);
    let permit = fold_permit(&state).await;
    let report = state
        .service
        .run_walk(permit, move |store| {
            sessionlog_engine::stored::requests_page(store, &session, options, rows)
        })
        .await;
    match report {
        Ok(report) => match json::requests(&report) {
            Ok(mut body) => {
                let end = from.saturating_add(limit);
                let next_from = (end < report.summary.requests).then_some(end);
                body["page"] = json!({ "from": from, "limit": limit, "nextFrom": next_from });
                respond(StatusCode::OK, &body)
            }
            Err(error) => internal(error),
        },
        Err(error) => store_failure(&error),
    }
}

/// The verify document of one session (`ok` false when it has faults).
async fn verify_session(State(state): State<AppState>, Path(session): Path<String>) -> Response {
    verify(state, vec![session]).await
}

/// Every session.
async fn verify_all(State(state): State<AppState>) -> Response {
    verify(state, Vec::new()).await
}

/// Waits for a turn while [`super::limits::VERIFIES_MAX`] verifies run; the turn is held
/// until the verify itself ends, even when its client has gone.
async fn verify(state: AppState, sessions: Vec<String>) -> Response {
    let permit = Arc::clone(&state.verifies)
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    match state
        .service
        .run_walk(permit, move |store| store.verify(&sessions))
        .await
    {
        Ok(reports) => respond(StatusCode::OK, &json::verify(&reports)),
        Err(error) => store_failure(&error),
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::OPENAPI_JSON;

    // Goal: the committed OpenAPI description parses and documents exactly the routes served
    // (the list below mirrors `open` and `protected`; a new route must be added to both).
    #[test]
    fn openapi_documents_every_route() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        let mut documented: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        documented.sort_unstable();
        let mut served = vec![
            "/health",
            "/openapi.json",
            "/v1/sessions",
            "/v1/sessions/{session}",
            "/v1/sessions/{session}/head",
            "/v1/sessions/{session}/events",
            "/v1/sessions/{session}/tail",
            "/v1/sessions/{session}/messages",
            "/v1/sessions/{session}/surface",
            "/v1/sessions/{session}/requests",
            "/v1/sessions/{session}/verify",
            "/v1/verify",
            "/v1/sessions/{session}/tokens",
            "/v1/sessions/{session}/show",
            "/v1/audit",
            "/",
            "/console/app.js",
            "/console/app.css",
        ];
        served.sort_unstable();
        assert_eq!(documented, served);
    }
}
