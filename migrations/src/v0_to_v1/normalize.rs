//! The bounded normalisations of released V0 payloads (spec 2, the V1 row), applied to one
//! event's JSON in dsh's order: rename, retired-form refusal, `turn/start`, `turn/end`,
//! `request/header`, steering, retry ids, compaction ids, message wrappers.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::json::{self, count, exact_keys, record, record_mut, Object};
use super::{legacy_compaction_id, legacy_message_id, legacy_retry_id, V0Reason};

/// One event on its way through the edge: its type name and payload as JSON.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    pub(super) seq: u64,
    pub(super) kind: String,
    pub(super) data: Object,
    /// The start of the span a `surfaceOp: replace` names.
    pub(super) replace_start: Option<u64>,
    /// Whether a normaliser changed the type or the payload.
    pub(super) changed: bool,
}

/// The identities the normalisers carry from one event to the next; nothing else of the log
/// is retained.
#[derive(Debug, Clone, Default)]
pub(super) struct Identities {
    /// Message id by seq, for legacy `tool/result` replacements that inherit the id of the
    /// node they replace. One entry per message event.
    message_ids: HashMap<u64, String>,
    /// Retry id by retry chain (`turn`, `step`, `provider`, `policyKey`).
    retry_ids: HashMap<String, String>,
    /// The id of the open compaction group.
    compaction_id: Option<String>,
}

/// The current name of a renamed V0 type (`compact/*` became `compaction/*`).
pub(super) fn current_name(kind: &str) -> Option<&'static str> {
    match kind {
        "compact/start" => Some("compaction/start"),
        "compact/summary" => Some("compaction/summary"),
        "compact/end" => Some("compaction/end"),
        "compact/prune" => Some("compaction/prune"),
        _ => None,
    }
}

/// The retired types no edge converts: `request/header-delta` and `mode/set`, whatever their
/// payload.
pub(super) fn check_retired_type(session_id: &str, kind: &str, seq: u64) -> Result<(), V0Reason> {
    if kind == "request/header-delta" || kind == "mode/set" {
        return Err(V0Reason::RetiredEvent {
            session: session_id.to_owned(),
            kind: kind.to_owned(),
            seq,
        });
    }
    Ok(())
}

/// The retired `fallback` reason of `request/header`.
pub(super) fn check_fallback(session_id: &str, draft: &Draft) -> Result<(), V0Reason> {
    let fallback = draft.data.get("reason") == Some(&json!("fallback"));
    if draft.kind == "request/header" && fallback {
        let session = session_id.to_owned();
        return Err(V0Reason::FallbackReason {
            session,
            seq: draft.seq,
        });
    }
    Ok(())
}

impl Identities {
    /// Applies every normaliser after the rename to `draft`.
    pub(super) fn normalize(
        &mut self,
        session_id: &str,
        draft: &mut Draft,
    ) -> Result<(), V0Reason> {
        turn_start(session_id, draft)?;
        turn_end(session_id, draft)?;
        request_header(session_id, draft)?;
        steering(session_id, draft)?;
        self.retry(session_id, draft);
        self.compaction(session_id, draft);
        self.message(session_id, draft)
    }

    /// Remembers the message id of a checked event, for later replacements.
    pub(super) fn record_message(&mut self, draft: &Draft) {
        let message = if draft.kind == "user/message" {
            Some(&draft.data)
        } else {
            draft.data.get("message").and_then(Value::as_object)
        };
        if let Some(id) = message.and_then(|m| m.get("id")).and_then(Value::as_str) {
            self.message_ids.insert(draft.seq, id.to_owned());
        }
    }

    /// A retry without `retryId` joins the chain of the last retry with the same turn, step,
    /// provider and policy key, or starts one named after its own seq.
    fn retry(&mut self, session_id: &str, draft: &mut Draft) {
        if draft.kind != "llm/retry" {
            return;
        }
        let chain = retry_chain(&draft.data);
        match draft.data.get("retryId") {
            Some(Value::String(id)) if !id.is_empty() => {
                self.retry_ids.insert(chain, id.clone());
                return;
            }
            // An explicit but invalid id is refused by the payload check, never replaced.
            Some(_) => return,
            None => {}
        }
        let id = self
            .retry_ids
            .get(&chain)
            .cloned()
            .unwrap_or_else(|| legacy_retry_id(session_id, draft.seq));
        self.retry_ids.insert(chain, id.clone());
        draft.data.insert("retryId".to_owned(), Value::String(id));
        draft.changed = true;
    }

    /// A compaction group without ids takes the id of its `compaction/start`; its summary,
    /// its end and its checkpoint message (a `compact` plugin source) carry it.
    fn compaction(&mut self, session_id: &str, draft: &mut Draft) {
        match draft.kind.as_str() {
            "session/end-seed" => self.compaction_id = None,
            "compaction/start" => match draft.data.get("compactionId") {
                Some(Value::String(id)) if !id.is_empty() => self.compaction_id = Some(id.clone()),
                Some(_) => {}
                None => {
                    let id = legacy_compaction_id(session_id, draft.seq);
                    self.compaction_id = Some(id.clone());
                    draft
                        .data
                        .insert("compactionId".to_owned(), Value::String(id));
                    draft.changed = true;
                }
            },
            "compaction/summary" | "compaction/end" => {
                let Some(id) = self.compaction_id.clone() else {
                    return;
                };
                if draft.kind == "compaction/end" {
                    self.compaction_id = None;
                }
                if !draft.data.contains_key("compactionId") {
                    draft
                        .data
                        .insert("compactionId".to_owned(), Value::String(id));
                    draft.changed = true;
                }
            }
            "user/message" => {
                let Some(id) = self.compaction_id.clone() else {
                    return;
                };
                let Some(Value::Object(source)) = draft.data.get_mut("source") else {
                    return;
                };
                let checkpoint = source.get("kind") == Some(&json!("plugin"))
                    && source.get("plugin") == Some(&json!("compact"));
                if checkpoint && !source.contains_key("compactionId") {
                    source.insert("compactionId".to_owned(), Value::String(id));
                    draft.changed = true;
                }
            }
            _ => {}
        }
    }

    /// Pre-identity messages: flat user messages, flat assistant messages and flat tool
    /// results gain the current wrapper and a deterministic id.
    fn message(&mut self, session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
        match draft.kind.as_str() {
            "user/message" => {
                let data = &draft.data;
                let flat = !data.contains_key("id")
                    && !data.contains_key("role")
                    && !data.contains_key("message")
                    && data.contains_key("content")
                    && data.contains_key("source");
                if flat {
                    let id = legacy_message_id(session_id, draft.seq);
                    draft.data.insert("id".to_owned(), Value::String(id));
                    draft.data.insert("role".to_owned(), json!("user"));
                    draft.changed = true;
                }
                Ok(())
            }
            "assistant/message" => assistant_message(session_id, draft),
            "tool/result" => self.tool_result(session_id, draft),
            _ => Ok(()),
        }
    }

    fn tool_result(&self, session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
        let data = &draft.data;
        if data.contains_key("message") {
            return Ok(());
        }
        let (Some(Value::String(call_id)), Some(Value::Bool(is_error)), Some(content)) =
            (data.get("callId"), data.get("isError"), data.get("content"))
        else {
            // Not the flat form: the payload check refuses what is left.
            return Ok(());
        };
        let (call_id, is_error, content) = (call_id.clone(), *is_error, content.clone());
        let id = match draft.replace_start {
            None => legacy_message_id(session_id, draft.seq),
            Some(start) => match self.message_ids.get(&start) {
                Some(id) => id.clone(),
                None => return Err(V0Reason::ReplacementWithoutIdentity { seq: draft.seq }),
            },
        };
        for key in ["callId", "isError", "content"] {
            draft.data.shift_remove(key);
        }
        let message = json!({
            "id": id,
            "role": "user",
            "content": [{
                "type": "tool-result",
                "toolCallId": call_id,
                "content": content,
                "isError": is_error,
            }],
            "source": {"kind": "tool", "callId": call_id},
        });
        draft.data.insert("message".to_owned(), message);
        draft.changed = true;
        Ok(())
    }
}

/// The key of a retry chain: the JSON texts of `turn`, `step`, `provider` and `policyKey`,
/// joined by NUL; an absent member contributes an empty text, as in dsh.
fn retry_chain(data: &Object) -> String {
    let part = |key: &str| data.get(key).map_or(String::new(), Value::to_string);
    [
        part("turn"),
        part("step"),
        part("provider"),
        part("policyKey"),
    ]
    .join("\0")
}

/// The member that named an assistant message's origin before `source` existed.
const LEGACY_ASSISTANT_ORIGIN: &str = "provenance";

fn assistant_message(session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
    let data = &mut draft.data;
    let flat = !data.contains_key("message")
        && data.contains_key("content")
        && data.contains_key(LEGACY_ASSISTANT_ORIGIN);
    if !flat {
        return Ok(());
    }
    let label = format!("assistant/message {} legacy source", draft.seq);
    let mut source = record(data.get(LEGACY_ASSISTANT_ORIGIN), &label)?.clone();
    source.insert("kind".to_owned(), json!("model"));
    let content = data.shift_remove("content").unwrap_or(Value::Null);
    data.shift_remove(LEGACY_ASSISTANT_ORIGIN);
    let message = json!({
        "id": legacy_message_id(session_id, draft.seq),
        "role": "assistant",
        "content": content,
        "source": source,
    });
    data.insert("message".to_owned(), message);
    draft.changed = true;
    Ok(())
}

/// `turn/start.trigger` is dropped after a check of its shape.
fn turn_start(session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
    if draft.kind != "turn/start" || !draft.data.contains_key("trigger") {
        return Ok(());
    }
    let label = format!("turn/start {}", draft.seq);
    exact_keys(
        &draft.data,
        &["turn", "trigger"],
        &[],
        &format!("{label} data"),
    )?;
    let turn = count(draft.data.get("turn"), &format!("{label} turn"))?;
    let trigger = record(draft.data.get("trigger"), &format!("{label} trigger"))?;
    let kind_named = matches!(trigger.get("kind"), Some(Value::String(kind)) if !kind.is_empty());
    if turn < 1 || !kind_named {
        return Err(malformed(session_id, "turn/start", draft.seq));
    }
    draft.data.shift_remove("trigger");
    draft.changed = true;
    Ok(())
}

/// The retired `turn/end` reasons become current ones: `aborted` without a cause,
/// `disposed`, and the two flat `error` shapes.
fn turn_end(session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
    if draft.kind != "turn/end" {
        return Ok(());
    }
    let seq = draft.seq;
    exact_keys(
        &draft.data,
        &["turn", "reason"],
        &[],
        &format!("turn/end {seq} data"),
    )?;
    let turn = count(draft.data.get("turn"), &format!("turn/end {seq} turn"))?;
    if turn < 1 {
        return Err(malformed(session_id, "turn/end", seq));
    }
    let reason_label = format!("turn/end {seq} reason");
    let reason = record(draft.data.get("reason"), &reason_label)?;
    let Some(Value::String(kind)) = reason.get("kind") else {
        return Err(malformed(session_id, "turn/end", seq));
    };
    let current = match kind.as_str() {
        "completed" | "blocked" | "max-tokens" | "interrupted" => {
            exact_keys(reason, &["kind"], &[], &reason_label)?;
            return Ok(());
        }
        "aborted" if reason.contains_key("reason") => return Ok(()),
        "aborted" => {
            exact_keys(reason, &["kind"], &[], &reason_label)?;
            json!({"kind": "aborted", "reason": {"kind": "legacy"}})
        }
        "disposed" => {
            exact_keys(reason, &["kind"], &[], &reason_label)?;
            json!({"kind": "aborted", "reason": {"kind": "disposed"}})
        }
        "error" if reason.contains_key("error") => return Ok(()),
        "error" => error_reason(session_id, seq, reason)?,
        // Unknown reason kinds stay owner-opaque.
        _ => return Ok(()),
    };
    draft.data.insert("reason".to_owned(), current);
    draft.changed = true;
    Ok(())
}

/// `{kind:"error", step, failure}` and `{kind:"error", step, message, code?}` become
/// `{kind:"error", error}`; a flat error without a code gets `UNKNOWN`.
fn error_reason(session_id: &str, seq: u64, reason: &Object) -> Result<Value, V0Reason> {
    count(reason.get("step"), &format!("turn/end {seq} error step"))?;
    let reason_label = format!("turn/end {seq} reason");
    if let Some(failure) = reason.get("failure") {
        exact_keys(reason, &["kind", "step", "failure"], &[], &reason_label)?;
        let label = format!("turn/end {seq} failure");
        let failure = record(Some(failure), &label)?;
        let optional = ["status", "providerRetryAfterMs", "requestId"];
        exact_keys(failure, &["message", "code"], &optional, &label)?;
        let typed = failure.get("message").is_some_and(Value::is_string)
            && failure.get("code").is_some_and(Value::is_string);
        if !typed {
            return Err(malformed(session_id, "turn/end", seq));
        }
        return Ok(json!({"kind": "error", "error": failure}));
    }
    exact_keys(
        reason,
        &["kind", "step", "message"],
        &["code"],
        &reason_label,
    )?;
    let message = reason.get("message").and_then(Value::as_str);
    let code = match reason.get("code") {
        None => Some("UNKNOWN"),
        Some(code) => code.as_str(),
    };
    let (Some(message), Some(code)) = (message, code) else {
        return Err(malformed(session_id, "turn/end", seq));
    };
    Ok(json!({"kind": "error", "error": {"message": message, "code": code}}))
}

/// The obsolete `request/header.header.messagePrefix` duplicate is dropped.
fn request_header(session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
    if draft.kind != "request/header" {
        return Ok(());
    }
    let label = format!("request/header {} header", draft.seq);
    let header = record_mut(draft.data.get_mut("header"), &label)?;
    match header.get("messagePrefix") {
        None => Ok(()),
        Some(Value::Array(_)) => {
            header.shift_remove("messagePrefix");
            draft.changed = true;
            Ok(())
        }
        Some(_) => Err(V0Reason::MalformedMessagePrefix {
            session: session_id.to_owned(),
            seq: draft.seq,
        }),
    }
}

/// `steering/message` becomes `user/message`: a wrapped message is unwrapped, a flat one
/// gains a deterministic id and the user role.
fn steering(session_id: &str, draft: &mut Draft) -> Result<(), V0Reason> {
    if draft.kind != "steering/message" {
        return Ok(());
    }
    let seq = draft.seq;
    let data_label = format!("steering/message {seq} data");
    let turn_label = format!("steering/message {seq} turn");
    if let Some(wrapped) = draft.data.get("message") {
        exact_keys(&draft.data, &["turn", "message"], &[], &data_label)?;
        count(draft.data.get("turn"), &turn_label)?;
        let Value::Object(message) = wrapped.clone() else {
            return Err(json::payload(format!(
                "user/message {seq} data must be a JSON object"
            )));
        };
        draft.data = message;
    } else {
        exact_keys(
            &draft.data,
            &["turn", "content", "source"],
            &[],
            &data_label,
        )?;
        count(draft.data.get("turn"), &turn_label)?;
        draft.data.shift_remove("turn");
        let id = legacy_message_id(session_id, seq);
        draft.data.insert("id".to_owned(), Value::String(id));
        draft.data.insert("role".to_owned(), json!("user"));
    }
    draft.kind = "user/message".to_owned();
    draft.changed = true;
    Ok(())
}

fn malformed(session_id: &str, kind: &'static str, seq: u64) -> V0Reason {
    V0Reason::MalformedLegacy {
        session: session_id.to_owned(),
        kind,
        seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(kind: &str, seq: u64, data: Value) -> Draft {
        let Value::Object(data) = data else {
            panic!("test payloads are objects")
        };
        Draft {
            seq,
            kind: kind.to_owned(),
            data,
            replace_start: None,
            changed: false,
        }
    }

    // Goal: a retry chain is keyed by turn, step, provider and policy key only.
    // Method: two retries of one chain with different attempts, then another policy key.
    #[test]
    fn retry_chains_share_one_id() {
        let mut ids = Identities::default();
        let retry = |seq: u64, attempt: u64, key: &str| {
            let data =
                json!({"turn": 1, "step": 1, "provider": "p", "policyKey": key, "retry": attempt});
            draft("llm/retry", seq, data)
        };
        let mut drafts = [retry(4, 1, "k"), retry(6, 2, "k"), retry(8, 1, "other")];
        for d in &mut drafts {
            ids.retry("s", d);
        }
        let got: Vec<_> = drafts.iter().map(|d| d.data["retryId"].clone()).collect();
        let want = ["legacy-retry:s:4", "legacy-retry:s:4", "legacy-retry:s:8"];
        assert_eq!(got, want.map(|id| json!(id)));
    }

    // Goal: the compaction group closes at its end and at a seed end.
    // Method: start, end, then a summary that must not inherit the closed id.
    #[test]
    fn compaction_group_closes() {
        let mut ids = Identities::default();
        let mut start = draft("compaction/start", 2, json!({"turn": null}));
        ids.compaction("s", &mut start);
        let mut end = draft("compaction/end", 3, json!({"turn": null}));
        ids.compaction("s", &mut end);
        assert_eq!(end.data["compactionId"], json!("legacy-compaction:s:2"));
        let mut late = draft("compaction/summary", 4, json!({}));
        ids.compaction("s", &mut late);
        assert!(!late.changed);
    }
}
