//! The surface fold (spec §7.1, §7.2): the ordered live surface nodes and `replaceGeneration`.
//!
//! A transition is planned first and applied second, so a rejected event leaves the state
//! untouched. Replace endpoints are resolved by surface position, never by comparing seqs: after
//! a head rewrite the surface can read `[11, 8, 9]`.

use serde::Serialize;
use serde_json::Value;

use crate::error::{Rule, Violation};
use crate::event::{Event, EventData, EventType, SurfaceOp};
use crate::json::Extra;
use crate::message::{ContentBlock, Source};
use crate::payload::ToolResultData;

/// What kind of surface event a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    System,
    User,
    Assistant,
    ToolResult,
}

/// One live surface node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub seq: u64,
    pub kind: NodeKind,
    /// For tool results: everything a content rewrite must keep, serialized (spec §7.2 6.4).
    rewrite_identity: Option<Box<str>>,
}

/// The surface fold state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Surface {
    nodes: Vec<Node>,
    replace_generation: u64,
}

/// A validated transition, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// A log-only event: no change.
    Keep,
    Append(Node),
    /// Replace the nodes at positions `start_idx..=end_idx` by `node`.
    Replace {
        start_idx: usize,
        end_idx: usize,
        node: Node,
    },
}

/// The text of the head-protection refusal (spec §7.2 step 6.5).
pub const HEAD_REWRITE_REFUSAL: &str = "surface replace: node 0 holds the system prompt and may \
     be rewritten only by a system/message over exactly that node";

impl Surface {
    /// The live nodes in surface order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The seqs of the live nodes, in surface order.
    pub fn seqs(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.seq).collect()
    }

    /// Incremented by every replace.
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// The surface position of `seq`, if it is live.
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.nodes.iter().rposition(|n| n.seq == seq)
    }

    /// Plans the transition for `event`, whose envelope has already been checked.
    pub fn plan(&self, event: &Event) -> Result<Plan, Violation> {
        let (Some(op), Some(kind)) = (event.surface_op, node_kind(&event.kind)) else {
            return Ok(Plan::Keep);
        };
        let node = Node {
            seq: event.seq,
            kind,
            rewrite_identity: rewrite_identity(event),
        };
        let (start_seq, end_seq) = match op {
            SurfaceOp::Append => return Ok(Plan::Append(node)),
            SurfaceOp::Replace { start_seq, end_seq } => (start_seq, end_seq),
        };
        let surface_error = |m: String| Err(Violation::new(Rule::Surface, m));
        let Some(start_idx) = self.position(start_seq) else {
            return surface_error(format!("start seq {start_seq} not found in surface"));
        };
        let Some(end_idx) = self.position(end_seq) else {
            return surface_error(format!("end seq {end_seq} not found in surface"));
        };
        if start_idx > end_idx {
            return surface_error(format!("start seq {start_seq} is after end seq {end_seq}"));
        }
        let shadowed = &self.nodes[start_idx..=end_idx];
        let sources = event.source_event_seqs.as_deref().unwrap_or(&[]);
        if let Some(missing) = shadowed.iter().find(|n| !sources.contains(&n.seq)) {
            return Err(Violation::new(
                Rule::SourceSeqs,
                format!(
                    "replace sourceEventSeqs must cover shadowed seq {}",
                    missing.seq
                ),
            ));
        }
        if kind == NodeKind::ToolResult {
            check_tool_result_rewrite(&node, shadowed)?;
        }
        let head_is_system = self
            .nodes
            .first()
            .is_some_and(|n| n.kind == NodeKind::System);
        if start_idx == 0 && head_is_system && (kind != NodeKind::System || end_idx != 0) {
            return Err(Violation::new(Rule::HeadProtection, HEAD_REWRITE_REFUSAL));
        }
        Ok(Plan::Replace {
            start_idx,
            end_idx,
            node,
        })
    }

    /// Applies a plan made by [`Surface::plan`] on this same state, and returns how to undo
    /// it.
    pub fn apply(&mut self, plan: Plan) -> Undo {
        match plan {
            Plan::Keep => Undo::Nothing,
            Plan::Append(node) => {
                self.nodes.push(node);
                Undo::Pop
            }
            Plan::Replace {
                start_idx,
                end_idx,
                node,
            } => {
                assert!(
                    start_idx <= end_idx,
                    "a replace plan spans at least one node"
                );
                assert!(
                    end_idx < self.nodes.len(),
                    "a replace plan was made on this surface"
                );
                let removed: Vec<Node> = self.nodes.splice(start_idx..=end_idx, [node]).collect();
                self.replace_generation += 1;
                Undo::Restore { start_idx, removed }
            }
        }
    }

    /// Reverts the most recent [`Surface::apply`] that returned `undo`.
    pub fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Nothing => {}
            Undo::Pop => {
                self.nodes
                    .pop()
                    .expect("undo follows the append it reverts");
            }
            Undo::Restore { start_idx, removed } => {
                self.nodes.splice(start_idx..=start_idx, removed);
                self.replace_generation -= 1;
            }
        }
    }
}

/// How to revert one applied plan; undone in reverse order of application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    Nothing,
    Pop,
    Restore {
        start_idx: usize,
        removed: Vec<Node>,
    },
}

/// The node kind of a V3 surface type.
pub fn node_kind(kind: &EventType) -> Option<NodeKind> {
    match kind {
        EventType::SystemMessage => Some(NodeKind::System),
        EventType::UserMessage => Some(NodeKind::User),
        EventType::AssistantMessage => Some(NodeKind::Assistant),
        EventType::ToolResult => Some(NodeKind::ToolResult),
        _ => None,
    }
}

fn check_tool_result_rewrite(node: &Node, shadowed: &[Node]) -> Result<(), Violation> {
    let [target] = shadowed else {
        return Err(Violation::new(
            Rule::Surface,
            "a tool/result replace must shadow exactly one tool/result node",
        ));
    };
    if target.kind != NodeKind::ToolResult {
        return Err(Violation::new(
            Rule::Surface,
            format!(
                "a tool/result replace must shadow a tool/result node, not seq {}",
                target.seq
            ),
        ));
    }
    if target.rewrite_identity != node.rewrite_identity {
        return Err(Violation::new(
            Rule::Surface,
            format!(
                "a tool/result rewrite may change only message.content[0].content; it differs \
                 from seq {} elsewhere",
                target.seq
            ),
        ));
    }
    Ok(())
}

/// Everything of a tool result except `message.content[0].content`, for the rewrite rule.
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

fn rewrite_identity(event: &Event) -> Option<Box<str>> {
    let EventData::ToolResult(data) = &event.data else {
        return None;
    };
    Some(identity_of(data).into_boxed_str())
}

fn identity_of(data: &ToolResultData) -> String {
    let message = &data.message;
    let (first, rest) = match message.content.split_first() {
        Some((ContentBlock::ToolResult(block), rest)) => (
            Some(FirstBlockIdentity {
                tool_call_id: &block.tool_call_id,
                is_error: block.is_error,
                extra: &block.extra,
            }),
            rest,
        ),
        _ => (None, message.content.as_slice()),
    };
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
        first,
        rest,
    };
    serde_json::to_string(&identity).expect("serializing borrowed JSON values cannot fail")
}
