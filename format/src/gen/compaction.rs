//! Compactions and tool-result prunes: when they happen, what range they shadow, and their events.

use serde_json::json;

use crate::event::{Event, EventData, SurfaceOp};
use crate::json::Extra;
use crate::message::ContentBlock;
use crate::payload::{
    CompactionEndData, CompactionPruneData, CompactionStartData, CompactionSummaryData, SeqRange,
};
use crate::surface::NodeKind;

use super::surface_model::tokens_of;
use super::text::prose;
use super::{Generator, MODEL, PROVIDER, REQUEST_OVERHEAD_TOKENS};

/// Estimated surface tokens above which the next gap between steps compacts.
const SURFACE_TOKENS_MAX: u64 = 60_000;
/// Bounds of the tail a compaction keeps, in estimated tokens.
const RETAIN_TOKENS_MIN: u64 = 8_000;
const RETAIN_TOKENS_MAX: u64 = 20_000;
/// Nodes a compaction always leaves at the tail of the surface.
const RETAIN_NODES_MIN: usize = 4;
const CHECKPOINT_OPENING: &str = "This is an automatically generated checkpoint condensing an \
     earlier span of the conversation to free up context. The summary below stands in for the \
     original messages; continue the work from where it left off, without acknowledging this \
     checkpoint.\n\n<compacted-summary>";
const CHECKPOINT_CLOSING: &str = "</compacted-summary>";
const PRUNED_OUTPUT: &str = "[output pruned]";

impl Generator {
    /// Whether the gap between two steps compacts: the surface is large, or by chance.
    pub(super) fn compaction_due(&mut self) -> bool {
        self.surface.len() > 2 * RETAIN_NODES_MIN
            && (self.surface_tokens() > SURFACE_TOKENS_MAX
                || self.gaps.compaction >= 90
                || self.rng.permille(8))
    }

    /// The last surface position of a compaction range that starts at position 1 (spec
    ///  13.2): it keeps a tail of recent nodes and never splits a tool call from its results.
    pub(super) fn compaction_end(&mut self) -> Option<usize> {
        assert_eq!(
            self.surface.first().map(|n| n.kind),
            Some(NodeKind::System),
            "head at 0"
        );
        let retain_tokens = self.rng.range(RETAIN_TOKENS_MIN, RETAIN_TOKENS_MAX);
        let mut keep_from = self.surface.len();
        let mut kept_tokens = 0;
        while keep_from > 1 && kept_tokens < retain_tokens {
            keep_from -= 1;
            kept_tokens += self.surface[keep_from].tokens;
        }
        keep_from = keep_from.min(self.surface.len().saturating_sub(RETAIN_NODES_MIN));
        // Tool results follow their assistant message on the surface, so a boundary is
        // balanced when the first kept node is not a tool result.
        while keep_from > 1 && self.surface[keep_from].kind == NodeKind::ToolResult {
            keep_from -= 1;
        }
        // At least two nodes, or compacting is not worth a summary.
        (keep_from >= 3).then(|| keep_from - 1)
    }

    /// A compaction transaction replacing surface positions `1..=end_idx` by a checkpoint.
    pub(super) fn compaction(&mut self, end_idx: usize) -> Vec<Event> {
        let compaction_id = self.id("cmp");
        let shadowed: Vec<u64> = self.surface[1..=end_idx].iter().map(|n| n.seq).collect();
        let shadowed_tokens: u64 = self.surface[1..=end_idx].iter().map(|n| n.tokens).sum();
        let (first, last) = (shadowed[0], shadowed[shadowed.len() - 1]);
        let turn = json!(self.turn);
        let mut batch = Vec::with_capacity(4);
        self.advance(50, 500);
        let start = CompactionStartData {
            compaction_id: compaction_id.clone(),
            turn: turn.clone(),
            source_command_id: None,
            extra: Extra::new(),
        };
        let start_seq = self.push(&mut batch, EventData::CompactionStart(Box::new(start)));
        let words = self.rng.range(150, 450);
        let summary = prose(&mut self.rng, words);
        self.advance(3_000, 30_000);
        let summary_seq = self.push_summary(
            &mut batch,
            &compaction_id,
            &summary,
            &shadowed,
            shadowed_tokens,
        );
        let mut sources = vec![start_seq, summary_seq];
        sources.extend(&shadowed);
        let content = vec![
            ContentBlock::text(CHECKPOINT_OPENING),
            ContentBlock::text(summary),
            ContentBlock::text(CHECKPOINT_CLOSING),
        ];
        let mut checkpoint_source = self.plugin_source("compact", "user");
        checkpoint_source
            .extra
            .insert("compactionId".to_owned(), json!(compaction_id));
        let message = self.message("user", checkpoint_source, content);
        let op = SurfaceOp::Replace {
            start_seq: first,
            end_seq: last,
        };
        self.push_surface(
            &mut batch,
            EventData::UserMessage(Box::new(message)),
            op,
            Some(sources),
        );
        self.advance(1, 20);
        let end = CompactionEndData {
            compaction_id,
            turn,
            source_command_id: None,
            error: None,
            extra: Extra::new(),
        };
        self.push(&mut batch, EventData::CompactionEnd(Box::new(end)));
        self.gaps.compaction = 0;
        batch
    }

    fn push_summary(
        &mut self,
        batch: &mut Vec<Event>,
        compaction_id: &str,
        summary: &str,
        shadowed: &[u64],
        shadowed_tokens: u64,
    ) -> u64 {
        let summary_tokens = tokens_of(&[ContentBlock::text(summary)]);
        let range = SeqRange {
            start: shadowed[0],
            end: shadowed[shadowed.len() - 1],
            extra: Extra::new(),
        };
        let data = CompactionSummaryData {
            compaction_id: compaction_id.to_owned(),
            summary: json!([{ "type": "text", "text": summary }]),
            shadowed_range: range,
            shadowed_seqs: shadowed.to_vec(),
            shadowed_token_count: shadowed_tokens,
            provider: PROVIDER.to_owned(),
            model: MODEL.to_owned(),
            source_command_id: None,
            max_tokens: None,
            usage: Some(json!({
                "inputTokens": shadowed_tokens + REQUEST_OVERHEAD_TOKENS,
                "outputTokens": summary_tokens,
            })),
            // dsh records the model's raw output (its content blocks, like `summary`) whenever
            // the summary came from a stream.
            raw_output: Some(json!([{ "type": "text", "text": summary }])),
            llm_stream_call: Some(true),
            extra: Extra::new(),
        };
        self.push(batch, EventData::CompactionSummary(Box::new(data)))
    }

    /// An older, unpruned tool result, if any.
    pub(super) fn prune_target(&mut self) -> Option<u64> {
        let older = self.surface.len().saturating_sub(2 * RETAIN_NODES_MIN);
        let candidates: Vec<u64> = self.surface[..older]
            .iter()
            .filter(|n| n.tool.is_some() && n.tokens >= 64)
            .map(|n| n.seq)
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(*self.rng.pick(&candidates))
    }

    /// `compaction/prune`, then the tool result again with its output replaced.
    pub(super) fn push_prune(&mut self, batch: &mut Vec<Event>, target: u64) {
        let position = self
            .position(target)
            .expect("the prune target was chosen from the surface");
        let node = &self.surface[position];
        let tokens = node.tokens;
        let mut data = node
            .tool
            .clone()
            .expect("prune targets are unpruned tool results");
        let range = SeqRange {
            start: target,
            end: target,
            extra: Extra::new(),
        };
        let prune = CompactionPruneData {
            shadowed_range: range,
            shadowed_seqs: vec![target],
            shadowed_token_count: tokens,
            extra: Extra::new(),
        };
        self.push(batch, EventData::CompactionPrune(Box::new(prune)));
        match data.message.content.first_mut() {
            Some(ContentBlock::ToolResult(block)) => {
                block.content = vec![ContentBlock::text(PRUNED_OUTPUT)];
            }
            // A V4 tool message holds its content itself.
            _ if self.v4() => data.message.content = vec![ContentBlock::text(PRUNED_OUTPUT)],
            _ => panic!("generated tool results hold one tool-result block"),
        }
        let op = SurfaceOp::Replace {
            start_seq: target,
            end_seq: target,
        };
        self.push_surface(batch, EventData::ToolResult(data), op, Some(vec![target]));
    }
}
