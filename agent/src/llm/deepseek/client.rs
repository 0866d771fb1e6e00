//! The HTTP side of the DeepSeek adapter: `POST {base}/chat/completions` with the wire body,
//! a timeout on connecting, on the response head and between stream reads, and the SSE
//! stream parsed by `eventsource-stream`. It owns a current-thread runtime, so the loop that
//! calls it stays synchronous.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;

use super::stream::{chunk_deltas, DONE};
use crate::llm::adapter::{CallFailure, CallRequest, Delta, LlmAdapter};
use crate::llm::CancelToken;

/// How often a waiting call looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// The DeepSeek chat-completions client.
#[derive(Debug)]
pub struct DeepSeekClient {
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    http: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl DeepSeekClient {
    /// A client for `base_url` (without the `/chat/completions` path); `timeout` bounds the
    /// connection, the response head and every wait between stream events.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<DeepSeekClient, CallFailure> {
        let setup = |e: &dyn std::fmt::Display| CallFailure::new("SETUP", e.to_string(), false);
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| setup(&e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| setup(&e))?;
        Ok(DeepSeekClient {
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            timeout,
            http,
            runtime,
        })
    }

    async fn call(
        &self,
        call: &CallRequest<'_>,
        cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure> {
        let url = format!("{}/chat/completions", self.base_url);
        let mut request = self.http.post(url).json(call.body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let send = request.send();
        let response = wait(self.timeout, cancel, send).await?.map_err(|e| {
            let timeout = e.is_timeout();
            CallFailure::new(
                if timeout { "TIMEOUT" } else { "HTTP_ERROR" },
                e.to_string(),
                true,
            )
        })?;
        let status = response.status();
        if !status.is_success() {
            let code = status.as_u16();
            let text = wait(self.timeout, cancel, response.text())
                .await?
                .unwrap_or_default();
            let message = format!(
                "HTTP {code}: {}",
                text.chars().take(500).collect::<String>()
            );
            return Err(match code {
                429 => CallFailure::new("RATE_LIMITED", message, true),
                500..=599 => CallFailure::new("SERVER_ERROR", message, true),
                _ => CallFailure::new("HTTP_ERROR", message, false),
            });
        }
        let mut events = response.bytes_stream().eventsource();
        loop {
            let next = wait(self.timeout, cancel, events.next()).await?;
            let event = match next {
                None => {
                    let message = "the stream ended before [DONE]";
                    return Err(CallFailure::new("STREAM_ERROR", message, true));
                }
                Some(Err(e)) => return Err(CallFailure::new("STREAM_ERROR", e.to_string(), true)),
                Some(Ok(event)) => event,
            };
            if event.data.trim() == DONE {
                return Ok(());
            }
            let chunk: serde_json::Value = serde_json::from_str(&event.data)
                .map_err(|e| CallFailure::new("STREAM_ERROR", e.to_string(), true))?;
            if let Some(error) = chunk.get("error") {
                return Err(CallFailure::new("STREAM_ERROR", error.to_string(), true));
            }
            for delta in chunk_deltas(&chunk) {
                sink(delta);
            }
        }
    }
}

/// Awaits `future`, giving up after `timeout` or as soon as `cancel` is set.
async fn wait<F: std::future::Future>(
    timeout: Duration,
    cancel: &CancelToken,
    future: F,
) -> Result<F::Output, CallFailure> {
    let deadline = tokio::time::Instant::now() + timeout;
    tokio::pin!(future);
    loop {
        if cancel.is_cancelled() {
            return Err(CallFailure::aborted());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CallFailure::new("TIMEOUT", "the request timed out", true));
        }
        tokio::select! {
            out = &mut future => return Ok(out),
            () = tokio::time::sleep(CANCEL_POLL) => {}
        }
    }
}

impl LlmAdapter for DeepSeekClient {
    fn stream(
        &mut self,
        call: &CallRequest<'_>,
        cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure> {
        let this = &*self;
        this.runtime.block_on(this.call(call, cancel, sink))
    }
}
