//! `selectCompactableRange` (spec 13.2): the span of surface nodes one compaction shadows.

use std::collections::HashSet;

use sessionlog_format::surface::NodeKind;
use sessionlog_format::tokens::estimate_message;
use sessionlog_format::{ContentBlock, SessionFold};

/// One live surface node as range selection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeNode {
    pub seq: u64,
    pub kind: NodeKind,
    /// The heuristic estimate of its derived message (0 when it derives none).
    pub tokens: u64,
    /// Ids of the tool calls its message makes.
    pub calls: Vec<String>,
    /// Ids of the tool calls its message answers.
    pub results: Vec<String>,
}

/// A selected span: surface positions `start_idx..=end_idx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactRange {
    pub start_idx: usize,
    pub end_idx: usize,
    pub start_seq: u64,
    pub end_seq: u64,
    /// The shadowed seqs in surface order; the authority over `start_seq`/`end_seq`, which
    /// need not be numerically ordered after a head rewrite.
    pub shadowed_seqs: Vec<u64>,
    /// The sum of the shadowed nodes' heuristic estimates.
    pub shadowed_tokens: u64,
}

/// The live surface of `fold` priced node by node, in surface order.
pub fn surface_nodes(fold: &SessionFold) -> Vec<RangeNode> {
    let nodes = fold.admission().surface().nodes();
    nodes
        .iter()
        .map(|node| {
            let message = fold.message(node.seq);
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for block in message.map(|m| m.content.as_slice()).unwrap_or_default() {
                match block {
                    ContentBlock::ToolCall(call) => calls.push(call.id.clone()),
                    ContentBlock::ToolResult(result) => results.push(result.tool_call_id.clone()),
                    _ => {}
                }
            }
            // A V4 tool message answers the call its `toolCallId` names.
            if let Some(id) = message
                .filter(|m| m.role.as_deref() == Some("tool"))
                .and_then(|m| m.extra.get("toolCallId"))
                .and_then(|id| id.as_str())
            {
                results.push(id.to_owned());
            }
            RangeNode {
                seq: node.seq,
                kind: node.kind,
                tokens: message.map(estimate_message).unwrap_or(0),
                calls,
                results,
            }
        })
        .collect()
}

/// `balanced[k]`: no tool call among `nodes[..k]` waits for a result at or after `k`.
fn balanced_prefixes(nodes: &[RangeNode]) -> Vec<bool> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut balanced = Vec::with_capacity(nodes.len() + 1);
    balanced.push(true);
    for node in nodes {
        for id in &node.calls {
            open.insert(id);
        }
        for id in &node.results {
            open.remove(id.as_str());
        }
        balanced.push(open.is_empty());
    }
    balanced
}

/// The span to compact, or `None` when nothing may be compacted:
/// 1. the span starts at the first non-system node, so the system head at node 0 is never
///    shadowed (later in-history system nodes may be);
/// 2. a tail of at least `retain_tokens` (summed from the end) is kept; the boundary then
///    moves earlier until no tool call before it waits for a result after it;
/// 3. with `max_input_tokens > 0`, the span is the shortest head exceeding that budget,
///    extended forward to a balanced boundary, and never reaching into the kept tail.
pub fn select_compactable_range(
    nodes: &[RangeNode],
    retain_tokens: u64,
    max_input_tokens: u64,
) -> Option<CompactRange> {
    let first = nodes.iter().position(|n| n.kind != NodeKind::System)?;
    let balanced = balanced_prefixes(nodes);
    let mut keep_from = nodes.len();
    let mut kept = 0u64;
    while keep_from > first && kept < retain_tokens {
        keep_from -= 1;
        kept += nodes[keep_from].tokens;
    }
    while keep_from > first && !balanced[keep_from] {
        keep_from -= 1;
    }
    if keep_from <= first {
        return None;
    }
    let mut head_end = keep_from;
    if max_input_tokens > 0 {
        let mut end = first;
        let mut sum = 0u64;
        while end < keep_from && sum <= max_input_tokens {
            sum += nodes[end].tokens;
            end += 1;
        }
        while end < keep_from && !balanced[end] {
            end += 1;
        }
        head_end = end;
    }
    let span = &nodes[first..head_end];
    Some(CompactRange {
        start_idx: first,
        end_idx: head_end - 1,
        start_seq: span[0].seq,
        end_seq: span[span.len() - 1].seq,
        shadowed_seqs: span.iter().map(|n| n.seq).collect(),
        shadowed_tokens: span.iter().map(|n| n.tokens).sum(),
    })
}

/// Why a requested region cannot be compacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// The seq names no live surface node.
    #[error("seq {seq} is not a live surface node")]
    NotOnSurface { seq: u64 },
    /// The end comes before the start in surface order.
    #[error(
        "the region's end (seq {end_seq}) comes before its start (seq {start_seq}) on the surface"
    )]
    Reversed { start_seq: u64, end_seq: u64 },
    /// The region includes node 0, the head of the surface, which is never shadowed.
    #[error("the region includes node 0 (seq {seq}), which is never shadowed")]
    IncludesHead { seq: u64 },
    /// A tool call and its result lie on opposite sides of a region boundary.
    #[error("the region splits a tool call from its result at its {side} boundary")]
    Unbalanced { side: &'static str },
    /// The span is no larger than an empty checkpoint, so compacting it cannot shrink.
    #[error("the region holds {tokens} tokens, no more than an empty checkpoint ({floor})")]
    TooSmall { tokens: u64, floor: u64 },
}

/// The surface span from `start_seq` to `end_seq` (both inclusive, in surface order), for
/// a manual compaction of a chosen region. It must not include node 0 and must be
/// tool-pairing balanced: no call before it waits for a result inside or after it, and no
/// call inside it waits for a result after it.
pub fn select_region(
    nodes: &[RangeNode],
    start_seq: u64,
    end_seq: u64,
) -> Result<CompactRange, RegionError> {
    let position = |seq: u64| {
        nodes
            .iter()
            .position(|n| n.seq == seq)
            .ok_or(RegionError::NotOnSurface { seq })
    };
    let start = position(start_seq)?;
    let end = position(end_seq)?;
    if end < start {
        return Err(RegionError::Reversed { start_seq, end_seq });
    }
    if start == 0 {
        return Err(RegionError::IncludesHead { seq: start_seq });
    }
    let balanced = balanced_prefixes(nodes);
    if !balanced[start] {
        return Err(RegionError::Unbalanced { side: "start" });
    }
    if !balanced[end + 1] {
        return Err(RegionError::Unbalanced { side: "end" });
    }
    let span = &nodes[start..=end];
    Ok(CompactRange {
        start_idx: start,
        end_idx: end,
        start_seq,
        end_seq,
        shadowed_seqs: span.iter().map(|n| n.seq).collect(),
        shadowed_tokens: span.iter().map(|n| n.tokens).sum(),
    })
}

/// Whether `range` starts at the first non-system node: the span an automatic compaction
/// would take, right after the system head.
pub fn starts_at_head(nodes: &[RangeNode], range: &CompactRange) -> bool {
    nodes.iter().position(|n| n.kind != NodeKind::System) == Some(range.start_idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(seq: u64, kind: NodeKind, tokens: u64) -> RangeNode {
        RangeNode {
            seq,
            kind,
            tokens,
            calls: Vec::new(),
            results: Vec::new(),
        }
    }

    fn call(seq: u64, tokens: u64, id: &str) -> RangeNode {
        RangeNode {
            calls: vec![id.to_owned()],
            ..node(seq, NodeKind::Assistant, tokens)
        }
    }

    fn result(seq: u64, tokens: u64, id: &str) -> RangeNode {
        RangeNode {
            results: vec![id.to_owned()],
            ..node(seq, NodeKind::ToolResult, tokens)
        }
    }

    /// system head, then user/assistant pairs of 10 tokens each.
    fn plain(pairs: u64) -> Vec<RangeNode> {
        let mut nodes = vec![node(0, NodeKind::System, 50)];
        for i in 0..pairs {
            nodes.push(node(1 + 2 * i, NodeKind::User, 10));
            nodes.push(node(2 + 2 * i, NodeKind::Assistant, 10));
        }
        nodes
    }

    #[test]
    fn never_shadows_the_system_head() {
        // Goal: node 0 (the system prompt) is never in the span, even with nothing retained.
        // Method: select with retain 0 over a head and three pairs; also a surface of only
        // system nodes.
        let nodes = plain(3);
        let range = select_compactable_range(&nodes, 0, 0).expect("a range");
        assert_eq!(range.start_idx, 1);
        assert_eq!(range.shadowed_seqs, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(range.shadowed_tokens, 60);
        let only_system = vec![node(0, NodeKind::System, 5), node(1, NodeKind::System, 5)];
        assert_eq!(select_compactable_range(&only_system, 0, 0), None);
    }

    #[test]
    fn anchors_at_node_zero_without_a_system_head() {
        // Goal: a surface that does not start with a system node compacts from position 0.
        // Method: drop the head of a plain surface and select with retain 0.
        let nodes = plain(2)[1..].to_vec();
        let range = select_compactable_range(&nodes, 0, 0).expect("a range");
        assert_eq!((range.start_idx, range.start_seq), (0, 1));
    }

    #[test]
    fn keeps_a_recent_tail_of_retain_tokens() {
        // Goal: the nodes summing to retain_tokens from the end are kept.
        // Method: five pairs of 10-token nodes, retain 25: the last three nodes stay.
        let nodes = plain(5);
        let range = select_compactable_range(&nodes, 25, 0).expect("a range");
        assert_eq!(range.end_idx, nodes.len() - 4);
        assert_eq!(range.end_seq, 7);
    }

    #[test]
    fn nothing_when_the_tail_covers_everything() {
        // Goal: when the retained tail reaches the first compactable node there is no range.
        // Method: retain more tokens than the whole surface holds; also an empty surface.
        assert_eq!(select_compactable_range(&plain(2), 1_000, 0), None);
        assert_eq!(select_compactable_range(&[], 0, 0), None);
    }

    #[test]
    fn later_system_nodes_may_be_shadowed() {
        // Goal: an in-history system node after the head is compacted like any other node.
        // Method: head, user, system update, user, assistant; retain 10 keeps only the last.
        let nodes = vec![
            node(0, NodeKind::System, 50),
            node(1, NodeKind::User, 10),
            node(2, NodeKind::System, 30),
            node(3, NodeKind::User, 10),
            node(4, NodeKind::Assistant, 10),
        ];
        let range = select_compactable_range(&nodes, 10, 0).expect("a range");
        assert_eq!(range.shadowed_seqs, vec![1, 2, 3]);
    }

    #[test]
    fn never_splits_a_tool_call_from_its_result() {
        // Goal: the boundary moves earlier until no call before it waits for a result.
        // Method: the tail budget lands between a call and its two results; the span must end
        // before the call.
        let nodes = vec![
            node(0, NodeKind::System, 50),
            node(1, NodeKind::User, 10),
            node(2, NodeKind::Assistant, 10),
            node(3, NodeKind::User, 10),
            call(4, 10, "a"),
            result(5, 10, "a"),
            result(6, 10, "b"),
            node(7, NodeKind::Assistant, 10),
        ];
        let mut nodes = nodes;
        nodes[4].calls.push("b".to_owned());
        let range = select_compactable_range(&nodes, 15, 0).expect("a range");
        assert_eq!(range.shadowed_seqs, vec![1, 2, 3]);
        // A call whose results reach the tail and start right after the anchor: no range.
        let tight = vec![
            node(0, NodeKind::System, 50),
            call(1, 10, "a"),
            result(2, 10, "a"),
        ];
        assert_eq!(select_compactable_range(&tight, 5, 0), None);
    }

    #[test]
    fn input_budget_takes_the_shortest_balanced_head() {
        // Goal: with max_input_tokens the span is the shortest head over the budget, extended
        // to a balanced boundary.
        // Method: budget 15 over 10-token nodes ends after two nodes; when the second is a
        // call, the span extends over its result.
        let nodes = plain(5);
        let range = select_compactable_range(&nodes, 0, 15).expect("a range");
        assert_eq!(range.shadowed_seqs, vec![1, 2]);
        let nodes = vec![
            node(0, NodeKind::System, 50),
            node(1, NodeKind::User, 10),
            call(2, 10, "a"),
            result(3, 10, "a"),
            node(4, NodeKind::Assistant, 10),
            node(5, NodeKind::User, 10),
        ];
        let range = select_compactable_range(&nodes, 0, 15).expect("a range");
        assert_eq!(range.shadowed_seqs, vec![1, 2, 3]);
    }

    #[test]
    fn endpoints_follow_surface_order_not_seq_order() {
        // Goal: after a head rewrite the surface is non-monotonic; endpoints come by position.
        // Method: a surface [11, 8, 9, 10] with a system head at seq 11.
        let nodes = vec![
            node(11, NodeKind::System, 50),
            node(8, NodeKind::User, 10),
            node(9, NodeKind::Assistant, 10),
            node(10, NodeKind::User, 10),
        ];
        let range = select_compactable_range(&nodes, 10, 0).expect("a range");
        assert_eq!((range.start_seq, range.end_seq), (8, 9));
    }

    #[test]
    fn a_region_is_chosen_by_seq() {
        // Goal: a mid-surface region is selected by its endpoints, in surface order.
        // Method: a plain surface; select seqs 3..=6 and check positions and tokens; a
        // region right after the head starts at the head, a later one does not.
        let nodes = plain(4);
        let range = select_region(&nodes, 3, 6).expect("a region");
        assert_eq!((range.start_idx, range.end_idx), (3, 6));
        assert_eq!(range.shadowed_seqs, vec![3, 4, 5, 6]);
        assert_eq!(range.shadowed_tokens, 40);
        assert!(!starts_at_head(&nodes, &range));
        let head = select_region(&nodes, 1, 2).expect("a region");
        assert!(starts_at_head(&nodes, &head));
    }

    #[test]
    fn a_region_is_refused_with_a_typed_error() {
        // Goal: unknown seqs, a reversed span, node 0 and a split tool pairing are refused.
        // Method: one call per refusal over small surfaces.
        let nodes = plain(2);
        assert_eq!(
            select_region(&nodes, 1, 99),
            Err(RegionError::NotOnSurface { seq: 99 })
        );
        assert_eq!(
            select_region(&nodes, 3, 1),
            Err(RegionError::Reversed {
                start_seq: 3,
                end_seq: 1
            })
        );
        assert_eq!(
            select_region(&nodes, 0, 2),
            Err(RegionError::IncludesHead { seq: 0 })
        );
        let tools = vec![
            node(0, NodeKind::System, 50),
            node(1, NodeKind::User, 10),
            call(2, 10, "a"),
            result(3, 10, "a"),
            node(4, NodeKind::Assistant, 10),
        ];
        assert_eq!(
            select_region(&tools, 1, 2),
            Err(RegionError::Unbalanced { side: "end" })
        );
        assert_eq!(
            select_region(&tools, 3, 4),
            Err(RegionError::Unbalanced { side: "start" })
        );
        assert!(select_region(&tools, 2, 3).is_ok());
    }
}
