//! Reading a request body within the limits: its declared and actual size, a shared budget
//! of body bytes in flight, and a deadline for the whole body.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::json::respond;
use super::limits::ServerLimits;

/// Bytes of request bodies held at once, as permits of one byte each.
#[derive(Clone)]
pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    bytes_max: usize,
}

impl BodyBudget {
    pub(crate) fn new(limits: &ServerLimits) -> BodyBudget {
        let bytes_max = limits
            .bodies_in_flight_bytes_max
            .min(Semaphore::MAX_PERMITS)
            .min(u32::MAX as usize);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(bytes_max)),
            bytes_max,
        }
    }
}

/// A body read whole, with its share of the budget (released when this is dropped).
pub(crate) struct ReadBody {
    pub(crate) bytes: Bytes,
    _share: OwnedSemaphorePermit,
}

/// Reads `body` of at most `bytes_max` bytes: 413 `body-too-large` when its bytes exceed it
/// (read up to the bound), 408 `body-timeout` when the share of the budget
/// and the whole body do not arrive within the body timeout (a slow or lying client), 400
/// when the connection fails mid-body.
pub(crate) async fn read_body(
    budget: &BodyBudget,
    limits: &ServerLimits,
    headers: &HeaderMap,
    body: Body,
    bytes_max: usize,
) -> Result<ReadBody, Response> {
    let too_large = || {
        respond(
            StatusCode::PAYLOAD_TOO_LARGE,
            &json!({ "error": "body-too-large",
                "message": format!("the body is larger than {bytes_max} bytes"),
                "bytesMax": bytes_max }),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // A body declared too large is still read up to the bound before the 413: a client that
    // is still sending when the connection closes gets a reset instead of the answer.
    let share = declared.map_or(bytes_max as u64, |n| n.min(bytes_max as u64)) as usize;
    let share_bytes = share.min(budget.bytes_max);
    let read = async {
        let share = Arc::clone(&budget.bytes)
            .acquire_many_owned(share_bytes.max(1) as u32)
            .await
            .expect("the budget is never closed");
        let mut out = Vec::with_capacity(share_bytes);
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| {
                respond(
                    StatusCode::BAD_REQUEST,
                    &json!({ "error": "bad-body", "message": error.to_string() }),
                )
            })?;
            if out.len() + chunk.len() > bytes_max {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(ReadBody {
            bytes: Bytes::from(out),
            _share: share,
        })
    };
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Ok(read) => read,
        Err(_) => Err(respond(
            StatusCode::REQUEST_TIMEOUT,
            &json!({ "error": "body-timeout",
                "message": format!("the body did not arrive within {} s",
                    limits.body_read_timeout.as_secs_f64()) }),
        )),
    }
}
