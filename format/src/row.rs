//! Physical rows (spec 3.4): one JSON line to logical events, and back.
//!
//! A V2/V3 row is one event. A V0/V1 row is an event or a packed chunk row that stands for
//! several `assistant/chunk` events. Decoding reads `data` straight into the typed payload when
//! `type` comes first, as every dsh writer puts it.

use serde::de::{self, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Rule, Violation};
use crate::event::{DataSeed, Event, EventData, EventType, SurfaceOp};
use crate::json::{json_object, member_error, strip_position, Key, SAFE_INTEGER_MAX};
use crate::payload::AssistantChunkData;
use crate::seq_ranges::{self, SeqItem};
use crate::stream::{Delta, StreamChunk, ToolCallDelta};
use crate::version::FormatVersion;

/// How rows of one log are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowContext {
    pub version: FormatVersion,
    /// Normalized recordings: an absent `seq` is the row's position, an absent `time` is 0.
    pub snapshot: bool,
    /// Decode to check, not to keep ([`crate::skim`]): the packed runs of embedded streams
    /// are checked as always but hold nothing afterwards. Only for callers that drop the
    /// events once the rules have seen them.
    pub skim: bool,
}

/// The events one row decodes to.
#[derive(Debug)]
pub enum Decoded {
    One(Box<Event>),
    /// A packed chunk row, expanded.
    Packed(Vec<Event>),
}

/// Decodes one row (without its newline) whose first event is expected at `expected_seq`.
pub fn decode_row(line: &[u8], ctx: RowContext, expected_seq: u64) -> Result<Decoded, Violation> {
    crate::skim::skimming(ctx.skim, || decode_row_now(line, ctx, expected_seq))
}

fn decode_row_now(line: &[u8], ctx: RowContext, expected_seq: u64) -> Result<Decoded, Violation> {
    // The decoded size is bounded before anything is built (a wide array would cost ~80x
    // its bytes).
    crate::budget::check_values(line).map_err(|m| Violation::new(Rule::TooLarge, m))?;
    let visitor = RowVisitor {
        legacy: ctx.version.has_packed_rows(),
    };
    // A line that is valid UTF-8 as a whole (every dsh row) is parsed as `str`, so that
    // serde_json checks no string's UTF-8 again; any other line goes through the byte parser,
    // whose error names the bad byte. For valid UTF-8 the two parsers are the same code and
    // give the same values and errors: a string's bytes lie between ASCII quotes and
    // backslashes, so each one is valid UTF-8 when the line is.
    let raw = match crate::utf8::text(line) {
        Some(text) if crate::skim::is_skimming() && ctx.version >= FormatVersion::V3 => {
            parse_stripped(text, visitor)
        }
        Some(text) => parse_row(serde_json::Deserializer::from_str(text), visitor),
        None => parse_row(serde_json::Deserializer::from_slice(line), visitor),
    };
    let raw = raw.map_err(|e| {
        let rule = if e.is_syntax() || e.is_eof() {
            Rule::Json
        } else {
            Rule::Envelope
        };
        Violation::new(rule, e.to_string())
    })?;
    finish_row(raw, ctx, expected_seq)
}

/// Decodes one row from any serde data format (the store keeps rows in the binary format of
/// [`crate::binary`]), applying the envelope rules of [`decode_row`]. Deserializing with this
/// seed fails only when the data is not a row object; envelope faults come back inside.
pub struct RowSeed {
    pub ctx: RowContext,
    pub expected_seq: u64,
}

impl<'de> de::DeserializeSeed<'de> for RowSeed {
    type Value = Result<Decoded, Violation>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        let visitor = RowVisitor {
            legacy: self.ctx.version.has_packed_rows(),
        };
        let raw = crate::skim::skimming(self.ctx.skim, || deserializer.deserialize_map(visitor))?;
        Ok(finish_row(raw, self.ctx, self.expected_seq))
    }
}

/// A skimming decode of a V3 or V4 row of text: first the row with its packed runs stripped
/// (`strip`); when there were none, or the stripped row is refused, the row itself, so that a
/// refusal reads as the row's own.
fn parse_stripped(text: &str, visitor: RowVisitor) -> Result<RawRow, serde_json::Error> {
    thread_local! {
        static STRIPPED: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    let stripped = STRIPPED.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        if !crate::strip::strip_runs(text, &mut buffer) {
            return None;
        }
        parse_row(serde_json::Deserializer::from_str(&buffer), visitor).ok()
    });
    match stripped {
        Some(raw) => Ok(raw),
        None => parse_row(serde_json::Deserializer::from_str(text), visitor),
    }
}

/// Reads one row object and refuses anything after it.
fn parse_row<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    visitor: RowVisitor,
) -> Result<RawRow, serde_json::Error> {
    let raw = de::Deserializer::deserialize_map(&mut de, visitor)?;
    de.end()?;
    Ok(raw)
}

fn finish_row(raw: RawRow, ctx: RowContext, expected_seq: u64) -> Result<Decoded, Violation> {
    if let RawData::Packed(packed) = raw.data {
        return expand_packed(
            raw.kind_name,
            raw.seq0,
            raw.time0,
            *packed,
            ctx,
            expected_seq,
        );
    }
    if raw.seq0.is_some() || raw.time0.is_some() {
        return Err(Violation::new(
            Rule::Envelope,
            "only packed chunk rows carry seq0 and time0",
        ));
    }
    let seq = match raw.seq {
        Some(seq) => check_safe_seq(seq)?,
        None if ctx.snapshot => expected_seq,
        None => return Err(Violation::new(Rule::Envelope, "event row is missing `seq`")),
    };
    let time = match raw.time {
        Some(time) => check_safe_time(time)?,
        None if ctx.snapshot => 0,
        None => {
            return Err(Violation::new(
                Rule::Envelope,
                "event row is missing `time`",
            ))
        }
    };
    let RawData::Event(data) = raw.data else {
        return Err(Violation::new(
            Rule::Envelope,
            "event row is missing `data`",
        ));
    };
    let source_event_seqs = match raw.source_event_seqs {
        Some(items) => Some(
            seq_ranges::expand(&items, seq)
                .map_err(|m| Violation::new(Rule::SourceSeqs, format!("sourceEventSeqs: {m}")))?,
        ),
        None => None,
    };
    let surface_op = match raw.surface_op {
        Some(value) => Some(decode_surface_op(&value, ctx.version)?),
        None => None,
    };
    Ok(Decoded::One(Box::new(Event {
        seq,
        time,
        kind: raw.kind,
        data,
        ignorable: raw.ignorable,
        source_event_seqs,
        surface_op,
    })))
}

fn check_safe_seq(seq: u64) -> Result<u64, Violation> {
    if seq > SAFE_INTEGER_MAX {
        return Err(Violation::new(
            Rule::Envelope,
            format!("seq {seq} is not a safe integer"),
        ));
    }
    Ok(seq)
}

fn check_safe_time(time: i64) -> Result<i64, Violation> {
    if time.unsigned_abs() > SAFE_INTEGER_MAX {
        return Err(Violation::new(
            Rule::Envelope,
            format!("time {time} is not a safe integer"),
        ));
    }
    Ok(time)
}

fn decode_surface_op(value: &Value, version: FormatVersion) -> Result<SurfaceOp, Violation> {
    let invalid = || {
        Violation::new(
            Rule::SurfaceOp,
            format!("invalid replace surfaceOp {value}"),
        )
    };
    let object = match value {
        Value::String(s) if s == "append" => return Ok(SurfaceOp::Append),
        Value::Object(object) => object,
        _ => {
            return Err(Violation::new(
                Rule::SurfaceOp,
                format!("invalid surfaceOp {value}"),
            ))
        }
    };
    let (start_key, end_key) = if version.has_system_head() {
        ("startSeq", "endSeq")
    } else {
        ("start", "end")
    };
    let seq_of = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_u64)
            .filter(|s| *s <= SAFE_INTEGER_MAX)
    };
    if object.len() != 3 || object.get("op") != Some(&Value::from("replace")) {
        return Err(invalid());
    }
    match (seq_of(start_key), seq_of(end_key)) {
        (Some(start_seq), Some(end_seq)) => Ok(SurfaceOp::Replace { start_seq, end_seq }),
        _ => Err(invalid()),
    }
}

/// The packed-row tags of V0/V1.
const PACKED_TAGS: [&str; 3] = ["text-chunks", "reasoning-chunks", "tool-call-chunks"];

json_object! {
    /// `data` of a packed chunk row (spec 3.4): `texts` for text and reasoning rows, `id`,
    /// `name` and `args` for tool-call rows.
    pub struct PackedData {
        req turn: u64 = "turn",
        req step: u64 = "step",
        req index: u64 = "index",
        req dt: Vec<i64> = "dt",
        opt texts: Vec<String> = "texts",
        opt id: String = "id",
        opt name: String = "name",
        opt args: Vec<String> = "args",
    }
}

fn expand_packed(
    tag: Option<String>,
    seq0: Option<u64>,
    time0: Option<i64>,
    packed: PackedData,
    ctx: RowContext,
    expected_seq: u64,
) -> Result<Decoded, Violation> {
    let tag = tag.expect("packed data is only decoded after its tag");
    let bad = |m: String| Err(Violation::new(Rule::Envelope, format!("{tag} row {m}")));
    let (Some(seq0), Some(time0)) = (seq0, time0) else {
        return bad("requires seq0 and time0".to_owned());
    };
    let seq0 = check_safe_seq(seq0)?;
    let time0 = check_safe_time(time0)?;
    if !packed.extra.is_empty() {
        let key = packed.extra.keys().next().map_or("", String::as_str);
        return bad(format!("data has unexpected member `{key}`"));
    }
    let tool = tag == "tool-call-chunks";
    let payload = if tool {
        if packed.texts.is_some() || packed.id.is_none() {
            return bad("data must have exactly turn, step, index, id, dt, args and name?".into());
        }
        packed.args.as_ref()
    } else {
        if packed.args.is_some() || packed.id.is_some() || packed.name.is_some() {
            return bad("data must have exactly turn, step, index, dt and texts".to_owned());
        }
        packed.texts.as_ref()
    };
    let Some(payload) = payload.filter(|p| !p.is_empty()) else {
        return bad("payload must be a non-empty array of strings".to_owned());
    };
    if packed.dt.len() + 1 != payload.len() {
        return bad(format!(
            "dt has {} elements; expected {}",
            packed.dt.len(),
            payload.len() - 1
        ));
    }
    if seq0 != expected_seq && !ctx.snapshot {
        return Err(Violation::new(
            Rule::SeqGap,
            format!("session event seq {seq0} is not contiguous; expected {expected_seq}"),
        ));
    }
    let mut time = time0;
    let mut events = Vec::with_capacity(payload.len());
    for (member_idx, text) in payload.iter().enumerate() {
        if member_idx > 0 {
            time = time.saturating_add(packed.dt[member_idx - 1]);
        }
        let chunk = packed_member(&tag, &packed, text.clone());
        let data = AssistantChunkData {
            turn: packed.turn,
            step: packed.step,
            chunk,
            extra: Default::default(),
        };
        let seq = seq0 + member_idx as u64;
        events.push(Event::new(
            seq,
            time,
            EventData::AssistantChunk(Box::new(data)),
        ));
    }
    Ok(Decoded::Packed(events))
}

fn packed_member(tag: &str, packed: &PackedData, text: String) -> StreamChunk {
    let index = packed.index;
    match tag {
        "text-chunks" => StreamChunk::TextDelta(Delta {
            index,
            text,
            extra: Default::default(),
        }),
        "reasoning-chunks" => StreamChunk::ReasoningDelta(Delta {
            index,
            text,
            extra: Default::default(),
        }),
        _ => StreamChunk::ToolCallDelta(ToolCallDelta {
            index,
            id: packed.id.clone(),
            name: packed.name.clone(),
            arguments_delta: Some(text),
            extra: Default::default(),
        }),
    }
}

enum RawData {
    Event(EventData),
    Packed(Box<PackedData>),
}

/// A row before its envelope is validated.
struct RawRow {
    kind: EventType,
    kind_name: Option<String>,
    seq: Option<u64>,
    time: Option<i64>,
    seq0: Option<u64>,
    time0: Option<i64>,
    data: RawData,
    ignorable: bool,
    source_event_seqs: Option<Vec<SeqItem>>,
    surface_op: Option<Value>,
}

/// Reads a row; `legacy` (V0 and V1) also admits the pre-wrapper payload forms (see
/// [`DataSeed`]).
#[derive(Clone, Copy)]
struct RowVisitor {
    legacy: bool,
}

impl<'de> Visitor<'de> for RowVisitor {
    type Value = RawRow;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an event row object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRow, A::Error> {
        use de::Error;
        let mut kind: Option<(EventType, bool)> = None;
        let mut kind_name = None;
        let mut seen = [false; 9];
        let mut row = RawRow {
            kind: EventType::Other("".into()),
            kind_name: None,
            seq: None,
            time: None,
            seq0: None,
            time0: None,
            data: RawData::Event(EventData::Other(Value::Null)),
            ignorable: false,
            source_event_seqs: None,
            surface_op: None,
        };
        let mut deferred: Option<&'de RawValue> = None;
        let mut has_data = false;
        while let Some(Key(key)) = map.next_key()? {
            let slot = match key.as_ref() {
                "type" => 0,
                "seq" => 1,
                "time" => 2,
                "data" => 3,
                "ignorable" => 4,
                "sourceEventSeqs" => 5,
                "surfaceOp" => 6,
                "seq0" => 7,
                "time0" => 8,
                other => {
                    return Err(A::Error::custom(format_args!(
                        "row has unexpected field `{other}`"
                    )))
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(crate::json::duplicate_member(&key));
            }
            let ctx = |e: A::Error| member_error::<A::Error>(&key, e);
            match slot {
                0 => {
                    let Key(name) = map.next_value().map_err(ctx)?;
                    let packed = PACKED_TAGS.contains(&name.as_ref());
                    kind = Some((EventType::parse(&name), packed));
                    kind_name = Some(name.into_owned());
                }
                1 => row.seq = Some(map.next_value().map_err(ctx)?),
                2 => row.time = Some(map.next_value().map_err(ctx)?),
                3 => {
                    has_data = true;
                    match &kind {
                        Some((kind, packed)) => {
                            row.data = decode_data(&mut map, kind, *packed, self.legacy)?
                        }
                        None => deferred = Some(map.next_value().map_err(ctx)?),
                    }
                }
                4 => {
                    let flag: bool = map.next_value().map_err(ctx)?;
                    if !flag {
                        return Err(A::Error::custom(
                            "ignorable must be exactly true when present",
                        ));
                    }
                    row.ignorable = true;
                }
                5 => row.source_event_seqs = Some(map.next_value().map_err(ctx)?),
                6 => row.surface_op = Some(map.next_value().map_err(ctx)?),
                7 => row.seq0 = Some(map.next_value().map_err(ctx)?),
                _ => row.time0 = Some(map.next_value().map_err(ctx)?),
            }
        }
        let Some((kind, packed)) = kind else {
            return Err(A::Error::custom("row is missing `type`"));
        };
        if !has_data {
            return Err(A::Error::custom("row is missing `data`"));
        }
        if let Some(raw) = deferred {
            let mut de = serde_json::Deserializer::from_str(raw.get());
            row.data = decode_data_from(&mut de, &kind, packed, self.legacy).map_err(|e| {
                A::Error::custom(format_args!("data: {}", strip_position(&e.to_string())))
            })?;
        }
        row.kind = kind;
        row.kind_name = kind_name;
        Ok(row)
    }
}

fn decode_data<'de, A: MapAccess<'de>>(
    map: &mut A,
    kind: &EventType,
    packed: bool,
    legacy: bool,
) -> Result<RawData, A::Error> {
    let ctx = |e: A::Error| member_error::<A::Error>("data", e);
    if packed {
        return Ok(RawData::Packed(Box::new(map.next_value().map_err(ctx)?)));
    }
    let seed = DataSeed { kind, legacy };
    Ok(RawData::Event(map.next_value_seed(seed).map_err(ctx)?))
}

fn decode_data_from<'de, D: de::Deserializer<'de>>(
    d: D,
    kind: &EventType,
    packed: bool,
    legacy: bool,
) -> Result<RawData, D::Error> {
    use serde::de::{Deserialize, DeserializeSeed};
    if packed {
        return Ok(RawData::Packed(Box::new(PackedData::deserialize(d)?)));
    }
    Ok(RawData::Event(DataSeed { kind, legacy }.deserialize(d)?))
}

/// An event encoded as a row of `version`: the native key order `{type, seq, time, data,
/// [sourceEventSeqs], [surfaceOp], [ignorable]}`, provenance range-encoded.
pub struct EventRow<'a> {
    pub event: &'a Event,
    pub version: FormatVersion,
}

impl Serialize for EventRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let event = self.event;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("type", event.kind.as_str())?;
        map.serialize_entry("seq", &event.seq)?;
        map.serialize_entry("time", &event.time)?;
        map.serialize_entry("data", &DataRef(&event.data))?;
        if let Some(seqs) = &event.source_event_seqs {
            map.serialize_entry("sourceEventSeqs", &RangeEncoded(seqs))?;
        }
        if let Some(op) = event.surface_op {
            map.serialize_entry(
                "surfaceOp",
                &SurfaceOpRef {
                    op,
                    version: self.version,
                },
            )?;
        }
        if event.ignorable {
            map.serialize_entry("ignorable", &true)?;
        }
        map.end()
    }
}

struct RangeEncoded<'a>(&'a [u64]);

impl Serialize for RangeEncoded<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        seq_ranges::serialize(self.0, serializer)
    }
}

struct SurfaceOpRef {
    op: SurfaceOp,
    version: FormatVersion,
}

impl Serialize for SurfaceOpRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.op {
            SurfaceOp::Append => serializer.serialize_str("append"),
            SurfaceOp::Replace { start_seq, end_seq } => {
                let (start_key, end_key) = if self.version.has_system_head() {
                    ("startSeq", "endSeq")
                } else {
                    ("start", "end")
                };
                let mut map = serializer.serialize_map(Some(3))?;
                map.serialize_entry("op", "replace")?;
                map.serialize_entry(start_key, &start_seq)?;
                map.serialize_entry(end_key, &end_seq)?;
                map.end()
            }
        }
    }
}

/// Serializes an event payload.
pub struct DataRef<'a>(pub &'a EventData);

impl Serialize for DataRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            EventData::TurnStart(d) => d.serialize(s),
            EventData::TurnEnd(d) => d.serialize(s),
            EventData::StepStart(d) | EventData::StepEnd(d) => d.serialize(s),
            EventData::SystemMessage(d) => d.serialize(s),
            EventData::DeveloperMessage(d) => d.serialize(s),
            EventData::UserMessage(d) => d.serialize(s),
            EventData::AssistantMessage(d) => d.serialize(s),
            EventData::AssistantAttempt(d) => d.serialize(s),
            EventData::AssistantChunk(d) => d.serialize(s),
            EventData::ToolCall(d) => d.serialize(s),
            EventData::ToolResult(d) => d.serialize(s),
            EventData::RequestHeader(d) => d.serialize(s),
            EventData::RequestContext(d) => d.serialize(s),
            EventData::SessionEndSeed(d) => d.serialize(s),
            EventData::CompactionStart(d) => d.serialize(s),
            EventData::CompactionSummary(d) => d.serialize(s),
            EventData::CompactionPrune(d) => d.serialize(s),
            EventData::CompactionEnd(d) => d.serialize(s),
            EventData::ImageOffload(d) => d.serialize(s),
            EventData::Other(v) => v.serialize(s),
        }
    }
}

/// Encodes `event` as one JSON row of `version`, without the newline.
pub fn encode_row(event: &Event, version: FormatVersion, out: &mut Vec<u8>) {
    serde_json::to_writer(out, &EventRow { event, version })
        .expect("writing JSON to a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: RowContext = RowContext {
        version: FormatVersion::V3,
        snapshot: false,
        skim: false,
    };

    /// `decode_row`'s outcome through the `str` parser and through the byte parser.
    fn through_both(line: &str) -> (String, String) {
        let visitor = || RowVisitor { legacy: false };
        let finish = |raw: Result<RawRow, serde_json::Error>| {
            format!(
                "{:?}",
                raw.map_err(|e| e.to_string())
                    .map(|raw| finish_row(raw, CTX, 0))
            )
        };
        (
            finish(parse_row(
                serde_json::Deserializer::from_str(line),
                visitor(),
            )),
            finish(parse_row(
                serde_json::Deserializer::from_slice(line.as_bytes()),
                visitor(),
            )),
        )
    }

    // Goal: on valid UTF-8 the `str` parser that `decode_row` uses gives the byte parser's
    // values and its error texts byte for byte (escapes, surrogates, non-ASCII text and keys,
    // type errors, duplicates, trailing bytes, cut lines).
    #[test]
    fn str_and_byte_parsers_agree_on_utf8_lines() {
        let lines = [
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1}}"#,
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"n\u00e9":"\ud83d\ude00 caf\u00e9 \u2603"}}"#,
            "{\"type\":\"turn/end\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1,\"caf\u{e9}\":\"\u{1F600}\"}}",
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"x":"\ud800"}}"#,
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"x":"\q"}}"#,
            r#"{"type":"turn/end","seq":"0","time":1,"data":{"turn":1}}"#,
            r#"{"type":"turn/end","seq":0,"seq":0,"time":1,"data":{"turn":1}}"#,
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1}} x"#,
            r#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":"#,
            "{\"type\":\"turn/end\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1,\"x\":\"a\u{7}b\"}}",
        ];
        for line in lines {
            let (as_str, as_bytes) = through_both(line);
            assert_eq!(as_str, as_bytes, "{line}");
        }
    }

    // Goal: a line that is not valid UTF-8 is refused with the byte parser's text, which
    // names the member and the position just past the string holding the bad byte.
    #[test]
    fn invalid_utf8_is_refused_with_its_position() {
        let mut line = br#"{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"x":"#.to_vec();
        line.extend_from_slice(b"\"a\xffb\"}}");
        let violation = decode_row(&line, CTX, 0).unwrap_err();
        assert_eq!(violation.rule, Rule::Envelope);
        assert_eq!(
            violation.message,
            "data: x: invalid unicode code point at line 1 column 64"
        );
    }
}
