//! The bodies of the migration-edge and surface-operation fuzz targets, shared by the
//! cargo-fuzz binaries (`fuzz_targets/`) and by the workspace test that runs them over the
//! committed seeds (`migrations/tests/it/fuzz_seeds.rs`, which includes this file by path).
//! Only `sessionlog-format` and `sessionlog-migrations` are used, so that the test needs no
//! fuzzing crate; operations are decoded from raw bytes (three bytes an operation).

use std::io::Cursor;

use sessionlog_format::{LogReader, ReadOptions, Recovery};
use sessionlog_migrations::{Catalog, StageOptions};

/// A valid header of each version a migration edge reads.
const EDGE_HEADERS: [&str; 4] = [
    r#"{"type":"session","version":0,"id":"f","createdAt":1,"delegationDepth":0}"#,
    r#"{"type":"session","version":1,"id":"f","createdAt":1,"seedLength":0,"delegationDepth":0}"#,
    r#"{"type":"session","version":2,"id":"f","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
    r#"{"type":"session","version":3,"id":"f","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
];

/// A valid V4 header.
const V4_HEADER: &str =
    r#"{"type":"session","version":4,"id":"f","createdAt":1,"isSeeded":false,"delegationDepth":0}"#;

/// The V4 reader: a valid V4 header, then `rows`, read strictly and recoverably to the end.
/// Refusals are answers; only a panic is a finding.
pub fn read_v4(rows: &[u8]) {
    let mut input = V4_HEADER.as_bytes().to_vec();
    input.push(b'\n');
    input.extend_from_slice(rows);
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        let options = ReadOptions {
            recovery,
            ..ReadOptions::default()
        };
        let _ = sessionlog_format::read_log(Cursor::new(&input), options);
    }
}

/// The migration edge from `version` (0 to 3): a valid header of that version, then
/// `rows`, read recoverably, each admitted event pushed through the edge's stage, then
/// finished. Refusals are answers; only a panic is a finding.
pub fn migrate_edge(version: usize, rows: &[u8]) {
    let mut input = EDGE_HEADERS[version].as_bytes().to_vec();
    input.push(b'\n');
    input.extend_from_slice(rows);
    let options = ReadOptions {
        recovery: Recovery::Recoverable,
        ..ReadOptions::default()
    };
    let Ok(mut reader) = LogReader::new(Cursor::new(input), options) else {
        return;
    };
    let edge = Catalog::released().edges()[version];
    assert_eq!(edge.from.number(), version as u64);
    let mut stage = (edge.build)(StageOptions::default());
    if stage.header(reader.header().clone()).is_err() {
        return;
    }
    let mut out = Vec::new();
    while let Some(event) = reader.next_event() {
        let Ok(event) = event else { return };
        if stage.push(event, &mut out).is_err() {
            return;
        }
    }
    let _ = stage.finish(&mut out);
}

/// One operation on a session's surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Append a user message.
    User,
    /// Append a tool result.
    ToolResult,
    /// Replace the live nodes between two positions (fractions of the surface) by a user
    /// checkpoint; a run that includes the head must be refused.
    Replace(u8, u8),
    /// Rewrite the system head (or clear it).
    HeadRewrite(bool),
    /// Rewrite a live tool result's content.
    Prune(u8),
}

/// Decodes operations, three bytes each (a trailing partial one is dropped).
pub fn decode_ops(bytes: &[u8]) -> Vec<Op> {
    bytes
        .chunks_exact(3)
        .map(|op| match op[0] % 5 {
            0 => Op::User,
            1 => Op::ToolResult,
            2 => Op::Replace(op[1], op[2]),
            3 => Op::HeadRewrite(op[1] & 1 == 1),
            _ => Op::Prune(op[1]),
        })
        .collect()
}

/// What an event did to the surface, in the model.
#[derive(Debug, Clone, Copy)]
enum ModelOp {
    /// Not a surface event (the opening turn and step).
    None,
    Append,
    Replace(u64, u64),
}

/// The naive model: every event's surface op, and the live tool results' call ids.
#[derive(Debug, Default)]
struct Model {
    ops: Vec<ModelOp>,
    calls: Vec<(u64, String)>,
}

impl Model {
    /// The live nodes, folded naively from every surface op (spec 7.2).
    fn nodes(&self) -> Vec<u64> {
        let mut nodes: Vec<u64> = Vec::new();
        for (seq, op) in self.ops.iter().enumerate() {
            match *op {
                ModelOp::None => {}
                ModelOp::Append => nodes.push(seq as u64),
                ModelOp::Replace(start, end) => {
                    let first = nodes
                        .iter()
                        .position(|s| *s == start)
                        .expect("a live start");
                    let last = nodes.iter().position(|s| *s == end).expect("a live end");
                    nodes.splice(first..=last, [seq as u64]);
                }
            }
        }
        nodes
    }
}

fn surface_op_json(op: ModelOp) -> String {
    match op {
        ModelOp::None => unreachable!("surface rows only"),
        ModelOp::Append => r#""append""#.to_owned(),
        ModelOp::Replace(start, end) => {
            format!(r#"{{"op":"replace","startSeq":{start},"endSeq":{end}}}"#)
        }
    }
}

fn sources_json(seqs: &[u64]) -> String {
    let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
    format!(r#","sourceEventSeqs":[{}]"#, list.join(","))
}

fn system_row(seq: u64, text: &str, op: ModelOp, sources: &[u64]) -> String {
    let content = if text.is_empty() {
        String::new()
    } else {
        format!(r#"{{"type":"text","text":"{text}"}}"#)
    };
    let sources = if sources.is_empty() {
        String::new()
    } else {
        sources_json(sources)
    };
    format!(
        r#"{{"type":"system/message","seq":{seq},"time":0,"data":{{"turn":1,"step":1,"message":{{"id":"sys-{seq}","role":"system","content":[{content}],"source":{{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt"}}}}}},"surfaceOp":{}{sources}}}"#,
        surface_op_json(op)
    )
}

fn user_row(seq: u64, op: ModelOp, sources: &[u64]) -> String {
    let sources = if sources.is_empty() {
        String::new()
    } else {
        sources_json(sources)
    };
    format!(
        r#"{{"type":"user/message","seq":{seq},"time":0,"data":{{"id":"user-{seq}","role":"user","content":[{{"type":"text","text":"u{seq}"}}],"source":{{"kind":"user"}}}},"surfaceOp":{}{sources}}}"#,
        surface_op_json(op)
    )
}

fn tool_result_row(seq: u64, call: &str, text: &str, op: ModelOp, sources: &[u64]) -> String {
    format!(
        r#"{{"type":"tool/result","seq":{seq},"time":0,"data":{{"turn":1,"step":1,"message":{{"id":"result-{call}","role":"user","content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"{text}"}}],"isError":false}}],"source":{{"kind":"tool","callId":"{call}"}}}}}},"surfaceOp":{}{}}}"#,
        surface_op_json(op),
        sources_json(sources)
    )
}

fn assistant_call_row(seq: u64, call: &str) -> String {
    format!(
        r#"{{"type":"assistant/message","seq":{seq},"time":0,"data":{{"turn":1,"step":1,"message":{{"id":"assistant-{seq}","role":"assistant","content":[{{"type":"tool-call","id":"{call}","name":"read","arguments":"{{}}"}}],"source":{{"kind":"model","provider":"p","model":"m"}}}},"stream":[]}},"surfaceOp":"append"}}"#
    )
}

fn tool_call_row(seq: u64, call: &str) -> String {
    format!(
        r#"{{"type":"tool/call","seq":{seq},"time":0,"data":{{"turn":1,"step":1,"callId":"{call}","name":"read","arguments":"{{}}"}}}}"#
    )
}

/// The rows an operation appends from the model's next seq with the surface op each carries,
/// and whether the rules must refuse the last; `None` when the operation does not apply.
fn rows_for(op: Op, model: &mut Model) -> Option<(Vec<(String, ModelOp)>, bool)> {
    let seq = model.ops.len() as u64;
    if let Op::ToolResult = op {
        // A result settles a call advertised and started before it (spec 12.2).
        let call = format!("c{seq}");
        let head = model.nodes()[0];
        let result = tool_result_row(seq + 2, &call, "out", ModelOp::Append, &[head]);
        model.calls.push((seq + 2, call.clone()));
        let rows = vec![
            (assistant_call_row(seq, &call), ModelOp::Append),
            (tool_call_row(seq + 1, &call), ModelOp::None),
            (result, ModelOp::Append),
        ];
        return Some((rows, false));
    }
    let (row, surface_op, refused) = row_for(op, model)?;
    Some((vec![(row, surface_op)], refused))
}

/// The row an operation appends at the model's next seq, the surface op it carries, and
/// whether the rules must refuse it; `None` when the operation does not apply.
fn row_for(op: Op, model: &mut Model) -> Option<(String, ModelOp, bool)> {
    let seq = model.ops.len() as u64;
    let nodes = model.nodes();
    let head = nodes[0];
    match op {
        Op::User => Some((user_row(seq, ModelOp::Append, &[]), ModelOp::Append, false)),
        Op::ToolResult => unreachable!("rows_for writes tool results"),
        Op::Replace(a, b) => {
            let pick = |x: u8| (x as usize * nodes.len()) / 256;
            let (start, end) = (pick(a).min(pick(b)), pick(a).max(pick(b)));
            let replace = ModelOp::Replace(nodes[start], nodes[end]);
            let row = user_row(seq, replace, &nodes[start..=end]);
            Some((row, replace, start == 0))
        }
        Op::HeadRewrite(clear) => {
            let replace = ModelOp::Replace(head, head);
            let text = if clear { "" } else { "rewritten" };
            Some((system_row(seq, text, replace, &[head]), replace, false))
        }
        Op::Prune(x) => {
            let live: Vec<&(u64, String)> = model
                .calls
                .iter()
                .filter(|(s, _)| nodes.contains(s))
                .collect();
            let (target, call) = live.get(x as usize % live.len().max(1))?;
            let replace = ModelOp::Replace(*target, *target);
            let row = tool_result_row(seq, call, "[pruned]", replace, &[*target]);
            let target = *target;
            model.calls.push((seq, call.clone()));
            model.calls.retain(|(s, _)| *s != target);
            Some((row, replace, false))
        }
    }
}

/// Runs `ops` (after an opening turn, step and system head) as one V3 log through the strict reader and checks it
/// against the model: the first operation the model refuses must be the reader's first
/// fault, and a log the model accepts must end with the model's nodes.
pub fn surface_ops(bytes: &[u8]) {
    let mut model = Model::default();
    let mut text = String::from(
        r#"{"type":"session","version":3,"id":"f","createdAt":1,"isSeeded":false,"delegationDepth":0}"#,
    );
    text.push('\n');
    text.push_str(r#"{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}"#);
    text.push('\n');
    text.push_str(r#"{"type":"step/start","seq":1,"time":0,"data":{"turn":1,"step":1}}"#);
    text.push('\n');
    text.push_str(&system_row(2, "prompt", ModelOp::Append, &[]));
    text.push('\n');
    model
        .ops
        .extend([ModelOp::None, ModelOp::None, ModelOp::Append]);
    let mut refused_at = None;
    for op in decode_ops(bytes).into_iter().take(256) {
        let Some((rows, refused)) = rows_for(op, &mut model) else {
            continue;
        };
        let n_rows = rows.len();
        for (row_idx, (row, surface_op)) in rows.into_iter().enumerate() {
            text.push_str(&row);
            text.push('\n');
            if refused && row_idx + 1 == n_rows {
                refused_at = Some(model.ops.len() as u64);
                break;
            }
            model.ops.push(surface_op);
        }
        if refused_at.is_some() {
            break;
        }
    }
    let mut reader = LogReader::new(Cursor::new(text.as_bytes()), ReadOptions::default())
        .expect("the header is valid");
    let mut n_events = 0u64;
    let mut fault = None;
    while let Some(event) = reader.next_event() {
        match event {
            Ok(_) => n_events += 1,
            Err(error) => {
                fault = Some(error);
                break;
            }
        }
    }
    match refused_at {
        Some(seq) => {
            assert!(fault.is_some(), "the refused op at seq {seq} was accepted");
            assert_eq!(n_events, seq, "the fault is the refused op's");
        }
        None => {
            assert!(fault.is_none(), "{fault:?}\n{text}");
            assert_eq!(reader.admission().surface().seqs(), model.nodes(), "{text}");
        }
    }
}
