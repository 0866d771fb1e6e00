//! The keyless replay provider: scripted responses instead of a network.
//!
//! A script is JSON:
//!
//! ```json
//! {
//!   "models": [{ "model": "my-model", "systemPromptUpdate": "in-history" }],
//!   "responses": [
//!     { "reasoning": "...", "text": "...",
//!       "toolCalls": [{ "name": "echo", "arguments": { "text": "hi" } }],
//!       "usage": { "inputTokens": 10, "outputTokens": 3, "cacheReadTokens": 8 } },
//!     { "error": { "code": "RATE_LIMITED", "message": "slow down", "retryable": true } }
//!   ]
//! }
//! ```
//!
//! Each call consumes the next response; an `error` response fails that call. `models`
//! declares `systemPromptUpdate` per model (absent: the model needs message 0 rewritten).
//! When the script is exhausted, or without a script, every call answers
//! [`DEFAULT_ANSWER`].

use std::collections::VecDeque;

use serde_json::Value;

use super::adapter::{CallFailure, CallRequest, Delta, LlmAdapter};
use super::CancelToken;
use crate::prompt::capability::{normalize_model_info, Catalog, ModelInfo};

/// The provider name of replay routes.
pub const REPLAY_PROVIDER: &str = "replay";
/// The answer of an unscripted call.
pub const DEFAULT_ANSWER: &str =
    "This is the replay provider's default answer: no script was given, so nothing was asked of a real model.";

/// Why a script was refused.
#[derive(Debug, thiserror::Error)]
#[error("replay script: {0}")]
pub struct ScriptError(pub String);

/// A parsed script.
#[derive(Debug, Clone, Default)]
pub struct ReplayScript {
    models: Vec<ModelInfo>,
    responses: VecDeque<Value>,
}

impl ReplayScript {
    /// Parses a script document.
    pub fn parse(text: &str) -> Result<ReplayScript, ScriptError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| ScriptError(e.to_string()))?;
        let mut models = Vec::new();
        if let Some(list) = doc.get("models") {
            let Value::Array(list) = list else {
                return Err(ScriptError("models must be an array".into()));
            };
            for model in list {
                let info = normalize_model_info(model, REPLAY_PROVIDER)
                    .map_err(|e| ScriptError(e.to_string()))?;
                models.push(info);
            }
        }
        let responses = match doc.get("responses") {
            None => VecDeque::new(),
            Some(Value::Array(list)) => list.iter().cloned().collect(),
            Some(_) => return Err(ScriptError("responses must be an array".into())),
        };
        Ok(ReplayScript { models, responses })
    }

    /// The model info of `model` on `provider`: the script's declaration, else the built-in
    /// DeepSeek catalog entry of that name, else a model with no declared capability.
    pub fn model_info(&self, provider: &str, model: &str) -> ModelInfo {
        if let Some(info) = self.models.iter().find(|m| m.model == model) {
            return ModelInfo {
                provider: provider.to_owned(),
                ..info.clone()
            };
        }
        let catalog = Catalog::deepseek();
        let known = catalog.models().iter().find(|m| m.model == model);
        match known {
            Some(info) => ModelInfo {
                provider: provider.to_owned(),
                ..info.clone()
            },
            None => ModelInfo {
                provider: provider.to_owned(),
                model: model.to_owned(),
                input: Vec::new(),
                context_window: None,
                system_prompt_update: None,
                tool_update: false,
            },
        }
    }
}

/// The replay adapter.
#[derive(Debug, Default)]
pub struct ReplayProvider {
    script: ReplayScript,
    calls: u64,
}

impl ReplayProvider {
    pub fn new(script: ReplayScript) -> ReplayProvider {
        ReplayProvider { script, calls: 0 }
    }

    pub fn script(&self) -> &ReplayScript {
        &self.script
    }
}

fn text(value: &Value, name: &str) -> Option<String> {
    value.get(name).and_then(Value::as_str).map(str::to_owned)
}

impl LlmAdapter for ReplayProvider {
    fn stream(
        &mut self,
        _call: &CallRequest<'_>,
        cancel: &CancelToken,
        sink: &mut dyn FnMut(Delta),
    ) -> Result<(), CallFailure> {
        if cancel.is_cancelled() {
            return Err(CallFailure::aborted());
        }
        self.calls += 1;
        let Some(response) = self.script.responses.pop_front() else {
            for word in DEFAULT_ANSWER.split_inclusive(' ') {
                sink(Delta::Text(word.to_owned()));
            }
            sink(Delta::Finish("stop".into()));
            return Ok(());
        };
        if let Some(error) = response.get("error") {
            let code = text(error, "code").unwrap_or_else(|| "SCRIPTED_ERROR".into());
            let message = text(error, "message").unwrap_or_else(|| code.clone());
            let retryable = error.get("retryable").and_then(Value::as_bool);
            return Err(CallFailure::new(&code, message, retryable.unwrap_or(true)));
        }
        if let Some(reasoning) = text(&response, "reasoning") {
            sink(Delta::Reasoning(reasoning));
        }
        if let Some(answer) = text(&response, "text") {
            for word in answer.split_inclusive(' ') {
                if cancel.is_cancelled() {
                    return Err(CallFailure::aborted());
                }
                sink(Delta::Text(word.to_owned()));
            }
        }
        let calls = response.get("toolCalls").and_then(Value::as_array);
        for (index, call) in calls.into_iter().flatten().enumerate() {
            let arguments = match call.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "{}".to_owned(),
            };
            sink(Delta::ToolCall {
                index: index as u64,
                id: Some(format!("call_{}_{index}", self.calls)),
                name: text(call, "name"),
                arguments,
            });
        }
        if let Some(usage) = response.get("usage") {
            let usage = serde_json::from_value(usage.clone())
                .map_err(|e| CallFailure::new("SCRIPT", e.to_string(), false))?;
            sink(Delta::Usage(usage));
        }
        sink(Delta::Finish("stop".into()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::capability::{SystemPromptUpdate, DEEPSEEK_FLASH};

    // Goal: a script's model declares its capability; deepseek-flash declares it by catalog;
    // other names declare nothing.
    // Method: parse a script with one model and look three names up.
    #[test]
    fn models_declare_the_capability() {
        let script = ReplayScript::parse(
            r#"{"models":[{"model":"m1","systemPromptUpdate":"in-history"}],"responses":[]}"#,
        )
        .unwrap_or_default();
        let in_history = Some(SystemPromptUpdate::InHistory);
        assert_eq!(
            script.model_info("replay", "m1").system_prompt_update,
            in_history
        );
        let flash = script.model_info("replay", DEEPSEEK_FLASH);
        assert_eq!(flash.system_prompt_update, in_history);
        assert_eq!(
            script.model_info("replay", "other").system_prompt_update,
            None
        );
    }

    // Goal: an unscripted call answers the default text; a scripted error fails the call.
    // Method: run one error response, then the default.
    #[test]
    fn scripted_error_then_default() {
        let script = ReplayScript::parse(r#"{"responses":[{"error":{"code":"RATE_LIMITED"}}]}"#)
            .unwrap_or_default();
        let mut replay = ReplayProvider::new(script);
        let route = crate::prompt::capability::PreparedCall {
            provider: "replay".into(),
            model: "m".into(),
            context_window: None,
            system_prompt_update: None,
            tool_update: false,
        };
        let body = Value::Null;
        let call = CallRequest {
            route: &route,
            body: &body,
        };
        let cancel = CancelToken::new();
        let failed = replay.stream(&call, &cancel, &mut |_| {});
        assert_eq!(failed.map_err(|f| f.code), Err("RATE_LIMITED".to_owned()));
        let mut text = String::new();
        let ok = replay.stream(&call, &cancel, &mut |d| {
            if let Delta::Text(t) = d {
                text.push_str(&t);
            }
        });
        assert_eq!((ok, text.as_str()), (Ok(()), DEFAULT_ANSWER));
    }
}
