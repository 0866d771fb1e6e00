//! The handlers: each parses its input, calls the service, and answers with a document of
//! `json`.

use std::convert::Infallible;

use axum::body::Bytes;
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

use super::json::{self, respond};
use super::{AppState, OPENAPI_JSON};
use crate::log_store::{self, READ_EVENTS_MAX};
use crate::requests::RequestOptions;
use crate::store::{AppendRequest, StoreError, BATCH_EVENTS_MAX};

/// Paths open without a token.
pub(crate) fn open() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi))
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
        .route("/v1/verify", post(verify_all))
}

fn store_failure(error: &StoreError) -> Response {
    let (status, body) = json::store_error(error);
    respond(status, &body)
}

fn bad_request(message: impl Into<String>) -> Response {
    let message = message.into();
    respond(
        StatusCode::BAD_REQUEST,
        &json!({ "error": "bad-request", "message": message }),
    )
}

fn internal(message: impl std::fmt::Display) -> Response {
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
async fn create_session(State(state): State<AppState>, body: Bytes) -> Response {
    let header: SessionHeader = match serde_json::from_slice(&body) {
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

/// Decodes the batch's rows as V3 events; a row that breaks an envelope rule is refused with
/// its seq and rule, as the store refuses an event.
fn decode_batch(session: &str, body: &AppendBody<'_>) -> Result<Vec<Event>, StoreError> {
    if body.events.len() > BATCH_EVENTS_MAX {
        return Err(StoreError::BatchTooLarge {
            session: session.to_owned(),
            n_events: body.events.len(),
        });
    }
    let ctx = RowContext {
        version: FormatVersion::V3,
        snapshot: false,
    };
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
                let message = "a packed chunk row is not a V3 event";
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
    body: Bytes,
) -> Response {
    let parsed: AppendBody<'_> = match serde_json::from_slice(&body) {
        Ok(parsed) => parsed,
        Err(error) => {
            return bad_request(format!(
                "the body must be {{\"expectedNextSeq\", \"events\": [...]}}: {error}"
            ))
        }
    };
    let events = match decode_batch(&session, &parsed) {
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
        .run(move |store| Ok((store.head(&id)?, store.read_range(&id, from_seq, to_seq)?)))
        .await;
    match read {
        Ok((head, events)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json::events(&session, from_seq, head.next_seq, &events),
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
    match state.service.tail(&session, from_seq).await {
        Ok(tail) => Sse::new(tail_stream(tail))
            .keep_alive(KeepAlive::default())
            .into_response(),
        Err(error) => store_failure(&error),
    }
}

fn tail_stream(tail: crate::log_service::Tail) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(Some(tail), |tail| async move {
        let mut tail = tail?;
        match tail.next().await? {
            Ok(event) => {
                let sse = SseEvent::default()
                    .event("event")
                    .id(event.seq.to_string())
                    .data(json::event_row(&event));
                Some((Ok(sse), Some(tail)))
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
    let folded = state
        .service
        .run(move |store| log_store::fold_session(store, &session, query.at))
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
    let folded = state
        .service
        .run(move |store| log_store::fold_session(store, &session, query.at))
        .await;
    match folded {
        Ok(folded) => respond(StatusCode::OK, &json::surface(&folded)),
        Err(error) => store_failure(&error),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestsQuery {
    bodies: Option<bool>,
}

async fn requests(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Query(query): Query<RequestsQuery>,
) -> Response {
    let options = RequestOptions {
        bodies: query.bodies.unwrap_or(false),
    };
    let report = state
        .service
        .run(move |store| log_store::requests(store, &session, options))
        .await;
    match report {
        Ok(report) => match json::requests(&report) {
            Ok(body) => respond(StatusCode::OK, &body),
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

async fn verify(state: AppState, sessions: Vec<String>) -> Response {
    match state
        .service
        .run(move |store| store.verify(&sessions))
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
        ];
        served.sort_unstable();
        assert_eq!(documented, served);
    }
}
