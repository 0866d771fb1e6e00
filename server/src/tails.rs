//! The caps on open tails: overall, and per bearer token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::json::respond;

/// Open tails, counted overall and per token.
#[derive(Clone)]
pub(crate) struct TailSlots {
    overall: Arc<Semaphore>,
    tails_max: usize,
    per_token: Arc<Mutex<HashMap<String, usize>>>,
    per_token_max: usize,
}

/// One open tail's place; dropping it (the stream ends or its client goes) frees it.
pub(crate) struct TailSlot {
    _overall: OwnedSemaphorePermit,
    token: String,
    per_token: Arc<Mutex<HashMap<String, usize>>>,
}

impl TailSlots {
    pub(crate) fn new(tails_max: usize, per_token_max: usize) -> TailSlots {
        TailSlots {
            overall: Arc::new(Semaphore::new(tails_max)),
            tails_max,
            per_token: Arc::new(Mutex::new(HashMap::new())),
            per_token_max,
        }
    }

    /// A place for one more tail of `token` (`""`: no token): 429 `too-many-tails` when the
    /// token has its share, 503 `tails-full` when the server has.
    pub(crate) fn take(&self, token: &str) -> Result<TailSlot, Box<Response>> {
        let mut per_token = lock(&self.per_token);
        let open = per_token.get(token).copied().unwrap_or(0);
        if open >= self.per_token_max {
            return Err(Box::new(respond(
                StatusCode::TOO_MANY_REQUESTS,
                &json!({ "error": "too-many-tails",
                    "message": format!("this token has {open} open tails, at most {}", self.per_token_max),
                    "tailsMax": self.per_token_max }),
            )));
        }
        let Ok(overall) = Arc::clone(&self.overall).try_acquire_owned() else {
            return Err(Box::new(respond(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "error": "tails-full",
                    "message": format!("the server has {} open tails, its maximum", self.tails_max),
                    "tailsMax": self.tails_max }),
            )));
        };
        *per_token.entry(token.to_owned()).or_insert(0) += 1;
        Ok(TailSlot {
            _overall: overall,
            token: token.to_owned(),
            per_token: Arc::clone(&self.per_token),
        })
    }
}

impl Drop for TailSlot {
    fn drop(&mut self) {
        let mut per_token = lock(&self.per_token);
        if let Some(open) = per_token.get_mut(&self.token) {
            *open -= 1;
            if *open == 0 {
                per_token.remove(&self.token);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
