//! The member lists of the released V2 dispositions (spec 5.1, 5.2, 10.6 item 4): a V2
//! payload must hold every required member and nothing beyond the required and optional
//! ones.
//!
//! Core payloads are typed, so their required members are already enforced by decoding; for
//! them the audit checks that no member was left over in `extra`. Plugin payloads are kept as
//! JSON and are checked against [`PLUGIN_MEMBERS`].

use serde_json::{Map, Value};
use sessionlog_format::{EventData, EventType, Message};

/// `(type, required, optional)` for the plugin payloads of the frozen V2 inventory (spec 5.2).
/// `feedback/record` also admits `category`, which newer recordings carry.
const PLUGIN_MEMBERS: &[(&str, &[&str], &[&str])] = &[
    (
        "agent/inbox/spliced",
        &["target", "start", "inserted"],
        &["removedCount", "outcome"],
    ),
    ("agent-preset/selected", &["agentPreset"], &[]),
    ("approval/asked", &["id", "toolName"], &["callId", "reason"]),
    ("approval/decided", &["id", "outcome"], &[]),
    ("approval/policy", &["policy"], &["source"]),
    ("command/run", &["commandId", "name", "source"], &["args"]),
    (
        "command/done",
        &["commandId", "kind"],
        &["text", "sourceEventSeq"],
    ),
    ("feedback/record", &["text"], &["category"]),
    ("feedback/message-put", &["sessionId", "item"], &[]),
    ("feedback/message-delete", &["sessionId", "messageId"], &[]),
    (
        "goal/change",
        &["kind", "version", "operation"],
        &[
            "goal",
            "roundsStarted",
            "createdAt",
            "updatedAt",
            "cleared",
            "clearedAt",
        ],
    ),
    (
        "hook/invoked",
        &["turn", "point", "dialect", "handlerId"],
        &["matcher"],
    ),
    (
        "hook/result",
        &["turn", "point", "handlerId", "decision", "durationMs"],
        &["exitCode", "stderrSummary"],
    ),
    (
        "llm/retry",
        &[
            "retryId",
            "turn",
            "step",
            "provider",
            "mode",
            "policyKey",
            "retry",
            "delayMs",
            "failure",
        ],
        &["maxRetries"],
    ),
    (
        "llm/retry-started",
        &["retryId", "turn", "step", "retry"],
        &[],
    ),
    (
        "model/selection",
        &["provider", "model"],
        &["reasoningEffort"],
    ),
    ("permission/preset", &["preset"], &[]),
    ("plan/mode", &["active"], &[]),
    ("sandbox/mode", &["mode"], &["source"]),
    (
        "schedule/change",
        &["version", "operation"],
        &["schedule", "id", "acceptedAt"],
    ),
    (
        "session-log-deepseek/delivery-accepted",
        &["sessionId", "throughSeq"],
        &["sessionFormatVersion"],
    ),
    ("session/title", &["title", "messageSeqs", "source"], &[]),
    (
        "session/title-llm-request",
        &[
            "titleProvider",
            "messageSeqs",
            "route",
            "system",
            "messages",
            "maxTokens",
        ],
        &[],
    ),
    (
        "subagent/descriptor",
        &["mode", "version", "provider"],
        &[
            "label",
            "agentProvider",
            "agentModel",
            "agentReasoningEffort",
            "persona",
            "toolFilter",
        ],
    ),
    ("subagent/model-selection-policy", &["allowedModels"], &[]),
    ("team/member", &["version", "teamId", "member"], &[]),
    (
        "team/message/delivered",
        &["version", "teamId", "messageId", "targetId"],
        &[],
    ),
    (
        "team/message/queued",
        &["version", "teamId", "message"],
        &[],
    ),
    ("team/task", &["version", "teamId", "task"], &[]),
    ("todo/write", &["todos"], &[]),
    ("tool-workflow/run-start", &["runId", "name"], &[]),
    (
        "tool-workflow/agent-start",
        &["runId", "seq", "label", "childId"],
        &["phase"],
    ),
    ("tool-workflow/agent-end", &["runId", "seq", "outcome"], &[]),
    ("tool-workflow/run-end", &["runId", "stopReason"], &[]),
    (
        "tool/code-dispatch-start",
        &[
            "rootCallId",
            "parentCallId",
            "subCallId",
            "name",
            "arguments",
        ],
        &[],
    ),
    (
        "tool/code-dispatch",
        &[
            "rootCallId",
            "parentCallId",
            "subCallId",
            "name",
            "arguments",
            "isError",
            "content",
        ],
        &[],
    ),
    (
        "web/deepseek-search-llm-request",
        &["endpoint", "apiVersion", "body"],
        &[],
    ),
];

/// The members of a released V2 message: exactly these four (spec 6.1).
const MESSAGE_MEMBERS: [&str; 4] = ["id", "role", "content", "source"];

/// The members of a `feedback/message-put` item (spec 5.2).
const FEEDBACK_ITEM: (&[&str], &[&str]) = (
    &["messageId", "rating", "version", "createdAt", "updatedAt"],
    &["note"],
);

/// What is wrong with a payload's members, worded for [`crate::error::Reason::Payload`].
pub(crate) fn check(kind: &EventType, data: &EventData) -> Result<(), String> {
    match data {
        EventData::Other(value) => check_plugin(kind.as_str(), value),
        EventData::TurnStart(d) => no_extra(&d.extra),
        EventData::TurnEnd(d) => no_extra(&d.extra),
        EventData::StepStart(d) | EventData::StepEnd(d) => no_extra(&d.extra),
        EventData::UserMessage(message) => check_message(message),
        EventData::AssistantMessage(d) => {
            no_extra(&d.extra)?;
            check_message(&d.message)
        }
        EventData::AssistantAttempt(d) => no_extra(&d.extra),
        EventData::ToolCall(d) => no_extra(&d.extra),
        EventData::ToolResult(d) => {
            no_extra(&d.extra)?;
            check_message(&d.message)
        }
        EventData::RequestHeader(d) => no_extra(&d.extra),
        EventData::RequestContext(d) => {
            if d.system_prompt_update.is_some() {
                return Err(unexpected("systemPromptUpdate"));
            }
            no_extra(&d.extra)
        }
        EventData::SessionEndSeed(d) => no_extra(&d.extra),
        EventData::CompactionStart(d) => no_extra(&d.extra),
        EventData::CompactionSummary(d) => no_extra(&d.extra),
        EventData::CompactionPrune(d) => no_extra(&d.extra),
        EventData::CompactionEnd(d) => no_extra(&d.extra),
        // Refused earlier as unclassified in a V2 source; nothing to add here.
        EventData::SystemMessage(_)
        | EventData::DeveloperMessage(_)
        | EventData::AssistantChunk(_)
        | EventData::ImageOffload(_) => Ok(()),
    }
}

fn unexpected(member: &str) -> String {
    format!("has unexpected member {member}")
}

fn no_extra(extra: &Map<String, Value>) -> Result<(), String> {
    match extra.keys().next() {
        Some(member) => Err(unexpected(member)),
        None => Ok(()),
    }
}

/// A surface message of a released V2 source is exactly `{id, role, content, source}`.
fn check_message(message: &Message) -> Result<(), String> {
    if message.id.is_none() {
        return Err("message requires member id".to_owned());
    }
    if message.role.is_none() {
        return Err("message requires member role".to_owned());
    }
    if message.source.is_none() {
        return Err("message requires member source".to_owned());
    }
    match message.extra.keys().next() {
        Some(member) => Err(format!("message has unexpected member {member}")),
        None => Ok(()),
    }
}

/// The same shape over a message kept as JSON (`agent/inbox/spliced.inserted[]`).
pub(crate) fn check_opaque_message(message: &Value) -> Result<(), String> {
    let Some(members) = message.as_object() else {
        return Err("inserted message must be an object".to_owned());
    };
    exact(members, &MESSAGE_MEMBERS, &[]).map_err(|e| format!("inserted message {e}"))
}

fn check_plugin(kind: &str, value: &Value) -> Result<(), String> {
    let Some(members) = value.as_object() else {
        return Err("must be an object".to_owned());
    };
    let Some((_, required, optional)) = PLUGIN_MEMBERS.iter().find(|(k, ..)| *k == kind) else {
        // Classified types without a frozen member list have none to check.
        return Ok(());
    };
    exact(members, required, optional)?;
    if kind == "feedback/message-put" {
        let (required, optional) = FEEDBACK_ITEM;
        let item = members.get("item").and_then(Value::as_object);
        let Some(item) = item else {
            return Err("item must be an object".to_owned());
        };
        exact(item, required, optional).map_err(|e| format!("item {e}"))?;
        let rating = item.get("rating").and_then(Value::as_str);
        if !matches!(rating, Some("positive" | "negative")) {
            return Err("item rating must be positive or negative".to_owned());
        }
    }
    Ok(())
}

/// Every required member present, no member outside required and optional.
fn exact(members: &Map<String, Value>, required: &[&str], optional: &[&str]) -> Result<(), String> {
    if let Some(missing) = required.iter().find(|m| !members.contains_key(**m)) {
        return Err(format!("requires member {missing}"));
    }
    let known = |m: &str| required.contains(&m) || optional.contains(&m);
    match members.keys().find(|m| !known(m)) {
        Some(member) => Err(unexpected(member)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(kind: &str, value: Value) -> Result<(), String> {
        check_plugin(kind, &value)
    }

    // Goal: the table has one row per type, and every row's lists are disjoint.
    // Method: compare each row against every other and against itself.
    #[test]
    fn table_is_well_formed() {
        for (i, (kind, required, optional)) in PLUGIN_MEMBERS.iter().enumerate() {
            assert!(
                PLUGIN_MEMBERS[i + 1..].iter().all(|(k, ..)| k != kind),
                "{kind} listed twice"
            );
            assert!(
                required.iter().all(|m| !optional.contains(m)),
                "{kind} lists a member as both required and optional"
            );
        }
    }

    // Goal: required, optional and unexpected members are told apart.
    // Method: one type, its minimal payload, one optional added, one unknown added, one
    // required removed.
    #[test]
    fn plugin_members_exact() {
        assert_eq!(plugin("approval/policy", json!({"policy": "ask"})), Ok(()));
        let with_source = json!({"policy": "ask", "source": "delegation"});
        assert_eq!(plugin("approval/policy", with_source), Ok(()));
        let extra = json!({"policy": "ask", "mood": 1});
        assert_eq!(
            plugin("approval/policy", extra),
            Err("has unexpected member mood".to_owned())
        );
        assert_eq!(
            plugin("approval/policy", json!({})),
            Err("requires member policy".to_owned())
        );
        assert_eq!(
            plugin("approval/policy", json!([1])),
            Err("must be an object".to_owned())
        );
    }

    // Goal: the feedback item is checked to its nested members and rating.
    // Method: an exact item, then a bad rating and an extra item member.
    #[test]
    fn feedback_item_shape() {
        let item = json!({"messageId": "m", "rating": "positive", "version": 1,
            "createdAt": "t", "updatedAt": "t"});
        let put = |item: Value| json!({"sessionId": "s", "item": item});
        assert_eq!(plugin("feedback/message-put", put(item.clone())), Ok(()));
        let mut bad = item.clone();
        bad["rating"] = json!("meh");
        assert_eq!(
            plugin("feedback/message-put", put(bad)),
            Err("item rating must be positive or negative".to_owned())
        );
        let mut extra = item;
        extra["score"] = json!(3);
        assert_eq!(
            plugin("feedback/message-put", put(extra)),
            Err("item has unexpected member score".to_owned())
        );
    }
}
