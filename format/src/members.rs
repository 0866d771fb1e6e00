//! Payload member types the spec states for the events kept as JSON (spec 5.2, 6.1, 13.1).
//!
//! The core events decode into typed payloads, so their member types are enforced by decoding.
//! The plugin events stay [`EventData::Other`] values, and a few typed payloads keep a member
//! as a [`Value`] (`compaction/summary.summary`, `compaction/start.turn`): this module checks
//! the members whose type the spec gives, and only those, for the versions whose vocabulary is
//! the released one (V2 and V3). Each kind of check is its own [`Rule`]; the text is dsh's
//! payload wording, `format v{n} {type} at seq {seq} data.{member}: ...` (spec relations.md,
//! "Payload types").
//!
//! What is typed, and why (a careful reading where the tables are terse):
//! - content blocks: `compaction/summary.summary` (spec 13.1) and `.rawOutput` (relations.md):
//!   an array of objects, each with a string `type`;
//! - non-negative safe integers: the turn, step and retry numbers of `llm/retry` and
//!   `llm/retry-started`, the owner turn of `compaction/start` and `compaction/end` (or
//!   `null`), and every member that names a seq (`command/done.sourceEventSeq`,
//!   `delivery-accepted.throughSeq`, the `messageSeqs` of titles) or a format version;
//! - strings: the ids, names and providers the relational rules compare (command ids, retry
//!   providers and policy keys, PTC call ids and names, title texts, delivery session ids);
//! - booleans: `tool/ptc-dispatch.isError` (V2: `tool/code-dispatch`).
//!
//! Members the spec leaves untyped (`llm/retry.retryId`, whose refusal text prints it as JSON,
//! every `failure`, `arguments`, `source`) are not checked. In a normalized recording
//! (snapshot mode) a `{{name}}` placeholder string stands in for any typed value.

use serde_json::Value;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType};
use crate::header::is_placeholder;
use crate::json::SAFE_INTEGER_MAX;
use crate::rules::RuleContext;
use crate::version::FormatVersion;

/// The type a member must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An array of content blocks (objects with a string `type`).
    Content,
    /// A non-negative safe integer.
    Integer,
    /// A non-negative safe integer or `null`.
    IntegerOrNull,
    /// An array of non-negative safe integers.
    Integers,
    String,
    Boolean,
}

/// Whether a member must be present; an absent optional member is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    Required,
    Optional,
}

use Kind as K;
use Presence::{Optional as O, Required as R};

type Members = &'static [(&'static str, Presence, Kind)];

const COMPACTION_SUMMARY: Members = &[("summary", R, K::Content), ("rawOutput", O, K::Content)];
const COMPACTION_OWNER: Members = &[("turn", R, K::IntegerOrNull)];
const LLM_RETRY: Members = &[
    ("turn", R, K::Integer),
    ("step", R, K::Integer),
    ("retry", R, K::Integer),
    ("provider", R, K::String),
    ("policyKey", R, K::String),
];
const LLM_RETRY_STARTED: Members = &[
    ("turn", R, K::Integer),
    ("step", R, K::Integer),
    ("retry", R, K::Integer),
];
const COMMAND_RUN: Members = &[("commandId", R, K::String), ("name", R, K::String)];
const COMMAND_DONE: Members = &[
    ("commandId", R, K::String),
    ("kind", R, K::String),
    ("sourceEventSeq", O, K::Integer),
];
const DELIVERY_ACCEPTED: Members = &[
    ("sessionId", R, K::String),
    ("throughSeq", R, K::Integer),
    ("sessionFormatVersion", O, K::Integer),
];
const SESSION_TITLE: Members = &[("title", R, K::String), ("messageSeqs", R, K::Integers)];
const TITLE_REQUEST: Members = &[("messageSeqs", R, K::Integers)];
const DISPATCH_START: Members = &[
    ("rootCallId", R, K::String),
    ("parentCallId", R, K::String),
    ("subCallId", R, K::String),
    ("name", R, K::String),
];
const DISPATCH: Members = &[
    ("rootCallId", R, K::String),
    ("parentCallId", R, K::String),
    ("subCallId", R, K::String),
    ("name", R, K::String),
    ("isError", R, K::Boolean),
];

/// The typed members of `kind`, if it has any.
fn members_of(kind: &EventType, version: FormatVersion) -> Members {
    use EventType as T;
    match kind {
        T::CompactionSummary => COMPACTION_SUMMARY,
        T::CompactionStart | T::CompactionEnd => COMPACTION_OWNER,
        T::LlmRetry => LLM_RETRY,
        T::LlmRetryStarted => LLM_RETRY_STARTED,
        T::CommandRun => COMMAND_RUN,
        T::CommandDone => COMMAND_DONE,
        T::DeliveryAccepted => DELIVERY_ACCEPTED,
        T::SessionTitle => SESSION_TITLE,
        T::SessionTitleLlmRequest => TITLE_REQUEST,
        T::ToolPtcDispatchStart => DISPATCH_START,
        T::ToolPtcDispatch => DISPATCH,
        // V3 keeps an ignorable retired `tool/code-dispatch*` opaquely (spec 11 rule 8).
        T::ToolCodeDispatchStart if version < FormatVersion::V3 => DISPATCH_START,
        T::ToolCodeDispatch if version < FormatVersion::V3 => DISPATCH,
        _ => &[],
    }
}

/// Checks the typed members of `event` (V2 and V3 only; older logs are audited by their
/// migration edge).
pub fn check_members(event: &Event, ctx: RuleContext) -> Result<(), Violation> {
    if ctx.version < FormatVersion::V2 {
        return Ok(());
    }
    let members = members_of(&event.kind, ctx.version);
    if members.is_empty() {
        return Ok(());
    }
    for &(name, presence, kind) in members {
        let value = match member(&event.data, name) {
            Some(value) => value,
            // A typed payload enforces its required members; a plugin payload's presence is
            // the V2 -> V3 audit's member list, so an absent member is only refused here when
            // the type needs it to be checked at all.
            None if presence == Presence::Required && matches!(event.data, EventData::Other(_)) => {
                return Err(violation(event, ctx, name, kind, "is required"));
            }
            None => continue,
        };
        if let Some(what) = type_fault(value, kind, ctx.snapshot) {
            return Err(violation(event, ctx, name, kind, what));
        }
    }
    Ok(())
}

/// The member `name` of the payload, wherever the payload keeps it.
fn member<'a>(data: &'a EventData, name: &str) -> Option<&'a Value> {
    match data {
        EventData::Other(value) => value.get(name),
        EventData::CompactionSummary(d) => match name {
            "summary" => Some(&d.summary),
            "rawOutput" => d.raw_output.as_ref(),
            _ => None,
        },
        EventData::CompactionStart(d) if name == "turn" => Some(&d.turn),
        EventData::CompactionEnd(d) if name == "turn" => Some(&d.turn),
        _ => None,
    }
}

/// What is wrong with `value` as a `kind`, worded after `data.{member}: `.
fn type_fault(value: &Value, kind: Kind, snapshot: bool) -> Option<&'static str> {
    if snapshot && value.as_str().is_some_and(is_placeholder) {
        return None;
    }
    match kind {
        Kind::Content => match value {
            Value::Array(blocks) => {
                let tagged = |b: &Value| b.get("type").is_some_and(Value::is_string);
                (!blocks.iter().all(tagged))
                    .then_some("requires content blocks with string type tags")
            }
            _ => Some("content must be an array"),
        },
        Kind::Integer => (!is_count(value)).then_some("must be a non-negative safe integer"),
        Kind::IntegerOrNull => (!value.is_null() && !is_count(value))
            .then_some("must be a non-negative safe integer or null"),
        Kind::Integers => match value {
            Value::Array(items) if items.iter().all(is_count) => None,
            _ => Some("must be an array of non-negative safe integers"),
        },
        Kind::String => (!value.is_string()).then_some("must be a string"),
        Kind::Boolean => (!value.is_boolean()).then_some("must be a boolean"),
    }
}

/// A non-negative safe integer, as JavaScript's `Number.isSafeInteger` sees one (`2.0` is 2).
fn is_count(value: &Value) -> bool {
    let Value::Number(n) = value else {
        return false;
    };
    if let Some(n) = n.as_u64() {
        return n <= SAFE_INTEGER_MAX;
    }
    n.as_f64()
        .is_some_and(|f| f >= 0.0 && f.fract() == 0.0 && f <= SAFE_INTEGER_MAX as f64)
}

fn violation(event: &Event, ctx: RuleContext, name: &str, kind: Kind, what: &str) -> Violation {
    let rule = match kind {
        Kind::Content => Rule::ContentMember,
        Kind::Integer | Kind::IntegerOrNull | Kind::Integers => Rule::IntegerMember,
        Kind::String => Rule::StringMember,
        Kind::Boolean => Rule::BooleanMember,
    };
    Violation::new(
        rule,
        format!(
            "format {} {} at seq {} data.{name}: {what}",
            ctx.version, event.kind, event.seq
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::error::{Rule, Violation};
    use crate::row::{decode_row, Decoded, RowContext};
    use crate::rules::{check_event, RuleContext};
    use crate::version::FormatVersion;

    const SUMMARY: &str = r#"{"compactionId":"c","summary":[{"type":"text","text":"s"}],
        "shadowedRange":{"start":1,"end":2},"shadowedSeqs":[1,2],"shadowedTokenCount":9,
        "provider":"p","model":"m"}"#;

    /// Decodes `{type, seq: 7, data}` as a row of `version` and runs the stateless rules.
    fn check_in(
        version: FormatVersion,
        snapshot: bool,
        kind: &str,
        data: Value,
    ) -> Result<(), Violation> {
        let row = json!({"type": kind, "seq": 7, "time": 0, "data": data}).to_string();
        let ctx = RowContext { version, snapshot };
        let Decoded::One(event) = decode_row(row.as_bytes(), ctx, 7).expect("the row decodes")
        else {
            panic!("not a packed row");
        };
        check_event(&event, RuleContext { version, snapshot })
    }

    fn check(kind: &str, data: Value) -> Result<(), Violation> {
        check_in(FormatVersion::V3, false, kind, data)
    }

    fn refused(kind: &str, data: Value, rule: Rule, text: &str) {
        assert_eq!(check(kind, data), Err(Violation::new(rule, text)), "{kind}");
    }

    fn with(base: &str, member: &str, value: Value) -> Value {
        let mut data: Value = serde_json::from_str(base).expect("valid base");
        data[member] = value;
        data
    }

    // Goal: `rawOutput` and `summary` are arrays of content blocks, in every version the rule
    // covers (the issue's `gen --version 2` hole), and nothing else about them is checked.
    // Method: the accepted shape, then a string, then an untagged block, in V2 and V3.
    #[test]
    fn compaction_summary_content() {
        let blocks = json!([{"type": "text", "text": "raw"}]);
        assert_eq!(
            check("compaction/summary", with(SUMMARY, "rawOutput", blocks)),
            Ok(())
        );
        assert_eq!(
            check("compaction/summary", serde_json::from_str(SUMMARY).unwrap()),
            Ok(())
        );
        let text = with(SUMMARY, "rawOutput", json!("raw"));
        let v2 = check_in(FormatVersion::V2, false, "compaction/summary", text.clone());
        assert_eq!(
            v2,
            Err(Violation::new(
                Rule::ContentMember,
                "format v2 compaction/summary at seq 7 data.rawOutput: content must be an array"
            ))
        );
        refused(
            "compaction/summary",
            text,
            Rule::ContentMember,
            "format v3 compaction/summary at seq 7 data.rawOutput: content must be an array",
        );
        refused(
            "compaction/summary",
            with(SUMMARY, "summary", json!([{"text": "no tag"}])),
            Rule::ContentMember,
            "format v3 compaction/summary at seq 7 data.summary: requires content blocks with \
             string type tags",
        );
        // V1 and V0 logs are audited by their migration edge, not here.
        let text = with(SUMMARY, "rawOutput", json!("raw"));
        assert_eq!(
            check_in(FormatVersion::V1, false, "compaction/summary", text),
            Ok(())
        );
    }

    // Goal: turn, step and retry numbers, owner turns and seq members are safe integers.
    // Method: per member, an accepted value (an integral float too, as JavaScript reads it) and
    // a refused one.
    #[test]
    fn integer_members() {
        let retry = json!({"retryId": 1, "turn": 1, "step": 2, "provider": "p", "mode": "m",
            "policyKey": "k", "retry": 1, "delayMs": 5, "failure": {}});
        assert_eq!(check("llm/retry", retry.clone()), Ok(()));
        let mut float = retry.clone();
        float["step"] = json!(2.0);
        assert_eq!(check("llm/retry", float), Ok(()));
        let mut bad = retry.clone();
        bad["retry"] = json!("1");
        refused(
            "llm/retry",
            bad,
            Rule::IntegerMember,
            "format v3 llm/retry at seq 7 data.retry: must be a non-negative safe integer",
        );
        let started = json!({"retryId": "r", "turn": 1, "step": 1, "retry": 1});
        assert_eq!(check("llm/retry-started", started.clone()), Ok(()));
        let mut bad = started;
        bad["turn"] = json!(-1);
        refused(
            "llm/retry-started",
            bad,
            Rule::IntegerMember,
            "format v3 llm/retry-started at seq 7 data.turn: must be a non-negative safe integer",
        );
        let start = json!({"compactionId": "c", "turn": null});
        assert_eq!(check("compaction/start", start), Ok(()));
        refused(
            "compaction/end",
            json!({"compactionId": "c", "turn": "1"}),
            Rule::IntegerMember,
            "format v3 compaction/end at seq 7 data.turn: must be a non-negative safe integer or \
             null",
        );
        let done = json!({"commandId": "c", "kind": "success", "sourceEventSeq": 3});
        assert_eq!(check("command/done", done), Ok(()));
        refused(
            "command/done",
            json!({"commandId": "c", "kind": "success", "sourceEventSeq": 9007199254740992u64}),
            Rule::IntegerMember,
            "format v3 command/done at seq 7 data.sourceEventSeq: must be a non-negative safe \
             integer",
        );
        let title = json!({"title": "t", "messageSeqs": [1, 2], "source": {"kind": "user"}});
        assert_eq!(check("session/title", title), Ok(()));
        refused(
            "session/title-llm-request",
            json!({"titleProvider": "p", "messageSeqs": [1, "2"], "route": {}, "system": "s",
                "messages": [], "maxTokens": 5}),
            Rule::IntegerMember,
            "format v3 session/title-llm-request at seq 7 data.messageSeqs: must be an array of \
             non-negative safe integers",
        );
        let delivery = json!({"sessionId": "s", "throughSeq": 6, "sessionFormatVersion": 3});
        assert_eq!(
            check("session-log-deepseek/delivery-accepted", delivery),
            Ok(())
        );
        refused(
            "session-log-deepseek/delivery-accepted",
            json!({"sessionId": "s"}),
            Rule::IntegerMember,
            "format v3 session-log-deepseek/delivery-accepted at seq 7 data.throughSeq: is \
             required",
        );
    }

    // Goal: ids, names and providers that the relational rules compare are strings.
    // Method: per event family, an accepted payload and one member of another type.
    #[test]
    fn string_members() {
        let run = json!({"commandId": "c1", "name": "compact", "source": {"kind": "user"}});
        assert_eq!(check("command/run", run), Ok(()));
        refused(
            "command/run",
            json!({"commandId": 1, "name": "compact", "source": {}}),
            Rule::StringMember,
            "format v3 command/run at seq 7 data.commandId: must be a string",
        );
        refused(
            "session/title",
            json!({"title": ["t"], "messageSeqs": [], "source": {}}),
            Rule::StringMember,
            "format v3 session/title at seq 7 data.title: must be a string",
        );
        let start = json!({"rootCallId": "a", "parentCallId": "a", "subCallId": "b",
            "name": "n", "arguments": {"x": 1}});
        assert_eq!(check("tool/ptc-dispatch-start", start.clone()), Ok(()));
        let mut bad = start;
        bad["subCallId"] = Value::Null;
        refused(
            "tool/ptc-dispatch-start",
            bad,
            Rule::StringMember,
            "format v3 tool/ptc-dispatch-start at seq 7 data.subCallId: must be a string",
        );
    }

    // Goal: `isError` of a PTC settle is a boolean, under its V3 and its V2 name.
    // Method: accepted and refused settles in V3, and the V2 predecessor tag in V2.
    #[test]
    fn boolean_members() {
        let settle = json!({"rootCallId": "a", "parentCallId": "a", "subCallId": "b",
            "name": "n", "arguments": {}, "isError": false, "content": []});
        assert_eq!(check("tool/ptc-dispatch", settle.clone()), Ok(()));
        let mut bad = settle;
        bad["isError"] = json!("false");
        refused(
            "tool/ptc-dispatch",
            bad.clone(),
            Rule::BooleanMember,
            "format v3 tool/ptc-dispatch at seq 7 data.isError: must be a boolean",
        );
        let v2 = check_in(FormatVersion::V2, false, "tool/code-dispatch", bad);
        assert_eq!(v2.map_err(|v| v.rule), Err(Rule::BooleanMember));
    }

    // Goal: normalized recordings keep placeholders where typed values are expected.
    // Method: a placeholder throughSeq in snapshot mode is accepted, and refused otherwise.
    #[test]
    fn placeholders_in_snapshots() {
        let delivery = json!({"sessionId": "{{id}}", "throughSeq": "{{seq}}"});
        let kind = "session-log-deepseek/delivery-accepted";
        assert_eq!(
            check_in(FormatVersion::V3, true, kind, delivery.clone()),
            Ok(())
        );
        let strict = check_in(FormatVersion::V3, false, kind, delivery);
        assert_eq!(strict.map_err(|v| v.rule), Err(Rule::IntegerMember));
    }
}
