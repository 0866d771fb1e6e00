//! Payload member types the spec states for members kept as JSON (spec 5.2, 6.1, 13.1).
//!
//! The core events decode into typed payloads, so their member types are enforced by decoding.
//! The plugin events stay [`EventData::Other`] values, and `compaction/summary` keeps its
//! content members as [`Value`]s: this module checks the members whose type the spec gives,
//! and only those, for the versions whose vocabulary is the released one (V2 and V3). Each kind
//! of check is its own [`Rule`]; the text is dsh's payload wording, `format v{n} {type} at seq
//! {seq} data.{member}: ...` (spec relations.md, "Payload types").
//!
//! What is typed:
//! - content blocks: `compaction/summary.summary` (spec 13.1) and `.rawOutput` (relations.md),
//!   and the `content` of each message in `agent/inbox/spliced.inserted` ("an array of user
//!   messages", spec 5.2; 6.1 gives every message an array `content`): an array of objects,
//!   each with a string `type`;
//! - non-negative safe integers: the seq a delivery marker covers (`throughSeq`) and the
//!   inbox positions and counts of `agent/inbox/spliced` (`start`, `removedCount`);
//! - strings: the texts of `session/title.title` and, when present, `feedback/record.text` and
//!   `command/done.text`;
//! - booleans: `tool/ptc-dispatch.isError` (V2: `tool/code-dispatch`).
//!
//! Members that a relational rule reads (spec 12.2: turn, step and retry numbers, retry and
//! command ids, providers, policy keys, title `messageSeqs`, PTC ids, compaction owner turns,
//! `sourceEventSeq`, `sessionId`) are left to [`crate::relations`]: dsh refuses a wrong value
//! there with its relational text (relations.md prints `{turn}` as JSON for that reason), and
//! a type check here would pre-empt it. In a normalized recording (snapshot mode) a `{{name}}`
//! placeholder string stands in for any typed value.

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
    /// An array of messages, each with content blocks.
    Messages,
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
const INBOX_SPLICED: Members = &[
    ("inserted", R, K::Messages),
    ("start", R, K::Integer),
    ("removedCount", O, K::Integer),
];
const DELIVERY_ACCEPTED: Members = &[("throughSeq", R, K::Integer)];
const SESSION_TITLE: Members = &[("title", R, K::String)];
/// `feedback/record` and `command/done`: `text` is optional (newer feedback recordings carry
/// `category` instead, spec 5.2).
const TEXT: Members = &[("text", O, K::String)];
const DISPATCH: Members = &[("isError", R, K::Boolean)];

/// The typed members of `kind`, if it has any.
fn members_of(kind: &EventType, version: FormatVersion) -> Members {
    use EventType as T;
    match kind {
        T::CompactionSummary => COMPACTION_SUMMARY,
        T::AgentInboxSpliced => INBOX_SPLICED,
        T::DeliveryAccepted => DELIVERY_ACCEPTED,
        T::SessionTitle => SESSION_TITLE,
        T::FeedbackRecord | T::CommandDone => TEXT,
        T::ToolPtcDispatch => DISPATCH,
        // V3 keeps an ignorable retired `tool/code-dispatch` opaquely (spec 11 rule 8).
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
        Kind::Messages => match value {
            Value::Array(messages) => {
                let blocks = |m: &Value| {
                    let content = m.get("content").unwrap_or(&Value::Null);
                    type_fault(content, Kind::Content, snapshot).is_none()
                };
                (!messages.iter().all(blocks))
                    .then_some("requires messages whose content is an array of content blocks")
            }
            _ => Some("must be an array of messages"),
        },
        Kind::String => (!value.is_string()).then_some("must be a string"),
        Kind::Boolean => (!value.is_boolean()).then_some("must be a boolean"),
    }
}

/// A non-negative safe integer written as an integer, as every typed count of the codec reads
/// one (`2.0` is refused there too).
fn is_count(value: &Value) -> bool {
    value.as_u64().is_some_and(|n| n <= SAFE_INTEGER_MAX)
}

fn violation(event: &Event, ctx: RuleContext, name: &str, kind: Kind, what: &str) -> Violation {
    let rule = match kind {
        Kind::Content | Kind::Messages => Rule::ContentMember,
        Kind::Integer => Rule::IntegerMember,
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
        let ctx = RowContext {
            version,
            snapshot,
            skim: false,
        };
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

    // Goal: the content of inbox-spliced messages is content blocks, like every message's.
    // Method: an accepted splice, a message with string content, and `inserted` not an array.
    #[test]
    fn inbox_messages_content() {
        let message = json!({"id": "m", "role": "user", "content": [{"type": "text", "text": "x"}],
            "source": {"kind": "user"}});
        let splice = json!({"target": "next-turn", "start": 2, "inserted": [message]});
        assert_eq!(check("agent/inbox/spliced", splice.clone()), Ok(()));
        let mut bad = splice.clone();
        bad["inserted"][0]["content"] = json!("x");
        refused(
            "agent/inbox/spliced",
            bad,
            Rule::ContentMember,
            "format v3 agent/inbox/spliced at seq 7 data.inserted: requires messages whose \
             content is an array of content blocks",
        );
        let mut bad = splice;
        bad["inserted"] = json!({});
        refused(
            "agent/inbox/spliced",
            bad,
            Rule::ContentMember,
            "format v3 agent/inbox/spliced at seq 7 data.inserted: must be an array of messages",
        );
    }

    // Goal: seqs, positions and counts that no relational rule reads are safe integers.
    // Method: per member, an accepted value and a refused one (a string, a negative number, an
    // integral float, an unsafe integer, absence).
    #[test]
    fn integer_members() {
        let splice = json!({"target": "next-turn", "start": 2, "inserted": [], "removedCount": 1});
        assert_eq!(check("agent/inbox/spliced", splice.clone()), Ok(()));
        for (member, value) in [("start", json!(-1)), ("removedCount", json!(1.0))] {
            let mut bad = splice.clone();
            bad[member] = value;
            refused(
                "agent/inbox/spliced",
                bad,
                Rule::IntegerMember,
                &format!(
                    "format v3 agent/inbox/spliced at seq 7 data.{member}: must be a \
                     non-negative safe integer"
                ),
            );
        }
        let kind = "session-log-deepseek/delivery-accepted";
        let delivery = json!({"sessionId": "s", "throughSeq": 6, "sessionFormatVersion": 3});
        assert_eq!(check(kind, delivery), Ok(()));
        refused(
            kind,
            json!({"sessionId": "s", "throughSeq": 9007199254740992u64}),
            Rule::IntegerMember,
            "format v3 session-log-deepseek/delivery-accepted at seq 7 data.throughSeq: must be \
             a non-negative safe integer",
        );
        refused(
            kind,
            json!({"sessionId": "s"}),
            Rule::IntegerMember,
            "format v3 session-log-deepseek/delivery-accepted at seq 7 data.throughSeq: is \
             required",
        );
    }

    // Goal: the texts of titles, feedback and command results are strings.
    // Method: accepted payloads, then one text of another type per event type.
    #[test]
    fn string_members() {
        let title = json!({"title": "t", "messageSeqs": [], "source": {"kind": "user"}});
        assert_eq!(check("session/title", title), Ok(()));
        refused(
            "session/title",
            json!({"title": ["t"], "messageSeqs": [], "source": {"kind": "user"}}),
            Rule::StringMember,
            "format v3 session/title at seq 7 data.title: must be a string",
        );
        assert_eq!(check("feedback/record", json!({"text": "good"})), Ok(()));
        // dsh's own text-turn recording holds this variant (regression: it was refused).
        let category = json!({"category": "other"});
        assert_eq!(check("feedback/record", category), Ok(()));
        refused(
            "feedback/record",
            json!({"text": 5}),
            Rule::StringMember,
            "format v3 feedback/record at seq 7 data.text: must be a string",
        );
        let done = json!({"commandId": "c", "kind": "error"});
        assert_eq!(check("command/done", done), Ok(()));
        refused(
            "command/done",
            json!({"commandId": "c", "kind": "error", "text": null}),
            Rule::StringMember,
            "format v3 command/done at seq 7 data.text: must be a string",
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
