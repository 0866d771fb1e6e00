//! The rewrite identity of a tool result: everything a `tool/result` replace must keep
//! (`message.content[0].content` is the only thing a rewrite may change; V4: `message.content`).
//!
//! It is JSON text: an object with, in this order, `turn`, `step`, `error`, `meta`, `extra`
//! (the payload's unknown members), `id`, `role`, `source`, `message_extra` (the message's
//! unknown members), `first` (`null`, or the wrapper block's `tool_call_id`, `is_error` and
//! `extra`) and `rest` (the blocks after the wrapper; a V4 tool message has none), every value
//! as serde_json writes it and absent optional ones as `null`. A surface node keeps it, and a
//! fold checkpoint stores it (`CheckpointNode::rewrite_identity`), so these bytes are part of
//! the checkpoint format.
//!
//! Every tool result that joins a surface has one, in each fold that admits it, so it is written
//! by hand: the fixed keys as literals, a string that needs no escape copied as it is, and every
//! other value (a non-empty map, an `error` or `meta`, a source with unknown members, extra
//! blocks) by serde_json. The test module keeps the derived serializer this replaced and
//! compares the two.

use serde::Serialize;
use serde_json::Value;

use crate::event::{Event, EventData};
use crate::json::Extra;
use crate::message::{ContentBlock, Source, ToolResultBlock};
use crate::payload::ToolResultData;
use crate::words::needs_no_escape;

/// Room for a typical identity (about 250 bytes), so it is written without regrowing.
const IDENTITY_BYTES: usize = 320;

/// The rewrite identity of `event` when it is a tool result.
pub(super) fn rewrite_identity(event: &Event) -> Option<Box<str>> {
    let EventData::ToolResult(data) = &event.data else {
        return None;
    };
    Some(identity_of(data).into_boxed_str())
}

/// The wrapper block whose `content` a rewrite may change, and the blocks after it.
fn split(data: &ToolResultData) -> (Option<&ToolResultBlock>, &[ContentBlock]) {
    let message = &data.message;
    match message.content.split_first() {
        Some((ContentBlock::ToolResult(block), rest)) => (Some(block), rest),
        // A V4 tool message has no wrapper: its whole `content` is what a rewrite may change.
        _ if message.role.as_deref() == Some("tool") => (None, &[]),
        _ => (None, message.content.as_slice()),
    }
}

fn identity_of(data: &ToolResultData) -> String {
    let message = &data.message;
    let (first, rest) = split(data);
    let mut out = String::with_capacity(IDENTITY_BYTES);
    out.push_str("{\"turn\":");
    push_u64(&mut out, data.turn);
    out.push_str(",\"step\":");
    push_u64(&mut out, data.step);
    out.push_str(",\"error\":");
    push_option(&mut out, data.error.as_ref());
    out.push_str(",\"meta\":");
    push_option(&mut out, data.meta.as_ref());
    out.push_str(",\"extra\":");
    push_map(&mut out, &data.extra);
    out.push_str(",\"id\":");
    push_option_str(&mut out, message.id.as_deref());
    out.push_str(",\"role\":");
    push_option_str(&mut out, message.role.as_deref());
    out.push_str(",\"source\":");
    match &message.source {
        Some(source) => push_source(&mut out, source),
        None => out.push_str("null"),
    }
    out.push_str(",\"message_extra\":");
    push_map(&mut out, &message.extra);
    out.push_str(",\"first\":");
    match first {
        Some(block) => {
            out.push_str("{\"tool_call_id\":");
            push_str(&mut out, &block.tool_call_id);
            out.push_str(",\"is_error\":");
            out.push_str(match block.is_error {
                Some(true) => "true",
                Some(false) => "false",
                None => "null",
            });
            out.push_str(",\"extra\":");
            push_map(&mut out, &block.extra);
            out.push('}');
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"rest\":");
    if rest.is_empty() {
        out.push_str("[]");
    } else {
        push_json(&mut out, rest);
    }
    out.push('}');
    out
}

/// A source as its `Serialize` writes it: the typed members in declaration order, absent ones
/// left out, then the unknown ones (when there are any, serde_json writes the whole source).
fn push_source(out: &mut String, source: &Source) {
    let Source {
        kind,
        plugin,
        provider,
        model,
        call_id,
        extra,
    } = source;
    if !extra.is_empty() {
        return push_json(out, source);
    }
    out.push_str("{\"kind\":");
    push_str(out, kind);
    let optional = [
        ("plugin", plugin),
        ("provider", provider),
        ("model", model),
        ("callId", call_id),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            out.push_str(",\"");
            out.push_str(key);
            out.push_str("\":");
            push_str(out, value);
        }
    }
    out.push('}');
}

/// An integer as serde_json writes it (with the same `itoa`).
fn push_u64(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

fn push_str(out: &mut String, text: &str) {
    if needs_no_escape(text.as_bytes()) {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        push_json(out, text);
    }
}

fn push_option_str(out: &mut String, text: Option<&str>) {
    match text {
        Some(text) => push_str(out, text),
        None => out.push_str("null"),
    }
}

fn push_option<T: Serialize>(out: &mut String, value: Option<&T>) {
    match value {
        Some(value) => push_json(out, value),
        None => out.push_str("null"),
    }
}

/// A map as serde_json writes it: its members in order (a V4 tool message keeps
/// `toolCallId` and `isError` among its unknown members).
fn push_map(out: &mut String, map: &Extra) {
    out.push('{');
    for (member_idx, (key, value)) in map.iter().enumerate() {
        if member_idx > 0 {
            out.push(',');
        }
        push_str(out, key);
        out.push(':');
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::String(text) => push_str(out, text),
            other => push_json(out, other),
        }
    }
    out.push('}');
}

fn push_json<T: Serialize + ?Sized>(out: &mut String, value: &T) {
    let text = serde_json::to_string(value).expect("serializing borrowed JSON values cannot fail");
    out.push_str(&text);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::gen::{GenOptions, Generator};
    use crate::message::Message;
    use crate::version::FormatVersion;

    /// The derived serializer the hand-written one replaced: the oracle.
    #[derive(Serialize)]
    struct RewriteIdentity<'a> {
        turn: u64,
        step: u64,
        error: &'a Option<Value>,
        meta: &'a Option<Value>,
        extra: &'a Extra,
        id: &'a Option<String>,
        role: &'a Option<String>,
        source: &'a Option<Source>,
        message_extra: &'a Extra,
        first: Option<FirstBlockIdentity<'a>>,
        rest: &'a [ContentBlock],
    }

    #[derive(Serialize)]
    struct FirstBlockIdentity<'a> {
        tool_call_id: &'a str,
        is_error: Option<bool>,
        extra: &'a Extra,
    }

    fn derived(data: &ToolResultData) -> String {
        let message = &data.message;
        let (first, rest) = split(data);
        let identity = RewriteIdentity {
            turn: data.turn,
            step: data.step,
            error: &data.error,
            meta: &data.meta,
            extra: &data.extra,
            id: &message.id,
            role: &message.role,
            source: &message.source,
            message_extra: &message.extra,
            first: first.map(|block| FirstBlockIdentity {
                tool_call_id: &block.tool_call_id,
                is_error: block.is_error,
                extra: &block.extra,
            }),
            rest,
        };
        serde_json::to_string(&identity).unwrap()
    }

    fn extra(value: Value) -> Extra {
        match value {
            Value::Object(map) => Extra::from(map),
            _ => unreachable!("an object"),
        }
    }

    fn tool_result(text: &str, flag: Option<bool>) -> ToolResultData {
        let block = ContentBlock::ToolResult(ToolResultBlock {
            tool_call_id: text.to_owned(),
            content: vec![ContentBlock::text("output")],
            is_error: flag,
            extra: Extra::new(),
        });
        ToolResultData {
            turn: 3,
            step: 9_007_199_254_740_991,
            message: Message {
                id: Some(text.to_owned()),
                role: Some("user".to_owned()),
                content: vec![block],
                source: Some(Source {
                    kind: "tool".to_owned(),
                    plugin: None,
                    provider: None,
                    model: None,
                    call_id: Some(text.to_owned()),
                    extra: Extra::new(),
                }),
                extra: Extra::new(),
            },
            error: None,
            meta: None,
            extra: Extra::new(),
        }
    }

    /// Every member that has a slow path, set one at a time and all together.
    fn variants(text: &str) -> Vec<ToolResultData> {
        let base = tool_result(text, Some(false));
        let mut all = Vec::new();
        let with = |change: &dyn Fn(&mut ToolResultData)| {
            let mut data = base.clone();
            change(&mut data);
            data
        };
        all.push(base.clone());
        all.push(with(&|d| {
            d.turn = 0;
            d.step = u64::MAX;
        }));
        all.push(with(&|d| d.turn = 10));
        all.push(with(&|d| d.error = Some(json!({"code": text, "n": -0.5}))));
        all.push(with(&|d| d.meta = Some(json!([text, null, 1e300]))));
        all.push(with(&|d| d.extra = extra(json!({ "z": text, "a": {} }))));
        all.push(with(&|d| d.message.id = None));
        all.push(with(&|d| d.message.role = Some("tool".to_owned())));
        all.push(with(&|d| d.message.source = None));
        all.push(with(&|d| {
            let source = d.message.source.as_mut().unwrap();
            source.plugin = Some(text.to_owned());
            source.provider = Some("p".to_owned());
            source.model = Some(text.to_owned());
            source.call_id = None;
        }));
        all.push(with(&|d| {
            let source = d.message.source.as_mut().unwrap();
            source.extra = extra(json!({ "form": text }));
        }));
        all.push(with(&|d| d.message.extra = extra(json!({ "k": [text] }))));
        all.push(with(&|d| {
            d.message.role = Some("tool".to_owned());
            d.message.extra = extra(json!({ "toolCallId": text, "isError": true, text: null }));
            d.extra = extra(json!({ "b": false, "n": 7, text: text }));
        }));
        all.push(with(&|d| {
            if let ContentBlock::ToolResult(block) = &mut d.message.content[0] {
                block.is_error = None;
                block.extra = extra(json!({ "x": text }));
            }
        }));
        all.push(with(&|d| d.message.content.push(ContentBlock::text(text))));
        all.push(with(&|d| {
            d.message.content.insert(0, ContentBlock::text(text))
        }));
        all.push(with(&|d| d.message.content.clear()));
        all.push(with(&|d| {
            d.message.role = Some("tool".to_owned());
            d.message.content = vec![ContentBlock::text(text)];
        }));
        all
    }

    // Goal: the hand-written identity is byte for byte the derived serializer's, for every
    // member's fast and slow path and for strings that need escapes or are beyond ASCII.
    // Method: every variant of a tool result over edgy strings, compared with the oracle.
    #[test]
    fn identity_is_the_derived_serialization() {
        let texts = [
            "",
            "call_00_jEmt8KZg9g1E3jL5OkWZnDTU",
            "a\"quote",
            "back\\slash",
            "tab\there and a newline\n",
            "\u{0}\u{1f}\u{7f}",
            "\u{e9} \u{2013} \u{65e5}\u{672c} \u{1f980}",
            "seven b",
            "exactly8",
            "sixteen bytes!!!",
            "/solidus/ and </script>",
        ];
        for text in texts {
            for (variant_idx, data) in variants(text).iter().enumerate() {
                assert_eq!(
                    identity_of(data),
                    derived(data),
                    "{text:?}, variant {variant_idx}"
                );
            }
        }
    }

    // Goal: the same over the tool results of generated V3 and V4 sessions.
    // Method: every tool result of 3,000 events of each version.
    #[test]
    fn generated_identities_are_the_derived_serialization() {
        for version in [FormatVersion::V3, FormatVersion::V4] {
            let options = GenOptions {
                events: 3_000,
                seed: 11,
            };
            let events = Generator::for_version(options, version)
                .unwrap()
                .into_events();
            let mut n_results = 0;
            for event in events {
                if let EventData::ToolResult(data) = &event.data {
                    assert_eq!(identity_of(data), derived(data), "seq {}", event.seq);
                    n_results += 1;
                }
            }
            assert!(n_results > 100, "{version:?}: {n_results} tool results");
        }
    }

    proptest! {
        // Goal: a string is copied as it is exactly when serde_json would write it unescaped.
        // Method: strings of any characters, weighted to the ones that are escaped.
        #[test]
        fn strings_are_written_as_serde_json_writes_them(
            text in "[\"\\\\\u{0}-\u{1f} a-z\u{7f}\u{e9}\u{1f980}]{0,40}"
        ) {
            let mut out = String::new();
            push_str(&mut out, &text);
            prop_assert_eq!(out, serde_json::to_string(&text).unwrap());
            for data in variants(&text) {
                prop_assert_eq!(identity_of(&data), derived(&data));
            }
        }
    }
}
