//! The generator's model of the surface: live nodes, their kinds and estimated tokens.

use crate::event::{Event, EventData, SurfaceOp};
use crate::message::ContentBlock;
use crate::payload::ToolResultData;
use crate::surface::NodeKind;

use super::{Generator, REQUEST_OVERHEAD_TOKENS};

/// One live surface node, as the generator models it.
#[derive(Debug, Clone)]
pub(super) struct Live {
    pub(super) seq: u64,
    pub(super) kind: NodeKind,
    pub(super) tokens: u64,
    /// An empty system node (a cleared in-history prompt).
    pub(super) blank: bool,
    /// An appended tool result that has not been pruned: the payload a rewrite copies.
    pub(super) tool: Option<Box<ToolResultData>>,
}

impl Generator {
    /// Pushes a surface event and applies it to the surface model.
    pub(super) fn push_surface(
        &mut self,
        batch: &mut Vec<Event>,
        data: EventData,
        op: SurfaceOp,
        sources: Option<Vec<u64>>,
    ) -> u64 {
        let message = data.message().expect("surface payloads carry a message");
        let kind = match &data {
            EventData::SystemMessage(_) => NodeKind::System,
            EventData::DeveloperMessage(_) => NodeKind::Developer,
            EventData::UserMessage(_) => NodeKind::User,
            EventData::AssistantMessage(_) => NodeKind::Assistant,
            _ => NodeKind::ToolResult,
        };
        let tokens = tokens_of(&message.content);
        let blank = message.content.is_empty();
        let tool = match (&data, op) {
            (EventData::ToolResult(d), SurfaceOp::Append) => Some(d.clone()),
            _ => None,
        };
        let (seq, time) = self.stamp();
        let mut event = Event::new(seq, time, data).with_surface_op(op);
        if let Some(sources) = sources {
            event = event.with_sources(sources);
        }
        batch.push(event);
        self.apply_surface(
            Live {
                seq,
                kind,
                tokens,
                blank,
                tool,
            },
            op,
        );
        seq
    }

    /// The surface transition of spec 7.2, on the model; endpoints resolve by position.
    fn apply_surface(&mut self, node: Live, op: SurfaceOp) {
        let SurfaceOp::Replace { start_seq, end_seq } = op else {
            self.surface.push(node);
            return;
        };
        let start_idx = self
            .position(start_seq)
            .expect("replace endpoints are live nodes");
        let end_idx = self
            .position(end_seq)
            .expect("replace endpoints are live nodes");
        assert!(start_idx <= end_idx, "a replace spans the surface in order");
        assert!(
            start_idx > 0 || node.kind == NodeKind::System,
            "only the prompt replaces 0"
        );
        // The provider cache holds only the prefix before the rewritten span.
        let prefix_tokens: u64 = self.surface[..start_idx].iter().map(|n| n.tokens).sum();
        self.cached_tokens = self
            .cached_tokens
            .min(prefix_tokens + REQUEST_OVERHEAD_TOKENS);
        self.surface.splice(start_idx..=end_idx, [node]);
        self.need_series = true;
    }

    pub(super) fn position(&self, seq: u64) -> Option<usize> {
        self.surface.iter().rposition(|n| n.seq == seq)
    }

    pub(super) fn surface_tokens(&self) -> u64 {
        self.surface.iter().map(|n| n.tokens).sum()
    }
}

/// The heuristic token estimate of some content: four bytes a token.
pub(super) fn tokens_of(content: &[ContentBlock]) -> u64 {
    fn bytes(block: &ContentBlock) -> usize {
        match block {
            ContentBlock::Text(b) | ContentBlock::Reasoning(b) => b.text.len(),
            ContentBlock::ToolCall(c) => c.name.len() + c.arguments.len(),
            ContentBlock::ToolResult(r) => r.content.iter().map(bytes).sum(),
            _ => 0,
        }
    }
    content.iter().map(bytes).sum::<usize>() as u64 / 4 + 4
}
