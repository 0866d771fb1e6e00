//! The request-equivalence proof of the V2 -> V3 edge (spec 10.8).
//!
//! The V2 source and the V3 target are folded side by side with [`SessionFold`]. At every
//! source `request/header` (after folding the source through it, and the target through the
//! header's target event) the V3 derived messages must equal the V2 derived messages with the
//! header's prompt prepended:
//!
//! - the prompt is `header.system` when it is a string, else `""`; a non-empty prompt is
//!   expected as V3 message 0 with role `system` and content exactly one text block holding the
//!   prompt; an empty prompt expects nothing (the empty head derives no message);
//! - every other message is compared by role, content and id, index by index;
//! - the synthetic system message's id and source are not compared: the id is generated and
//!   the plugin name is not part of what the model sees;
//! - sources of the other messages are not compared either, because the `tools-code-mode`
//!   rename (spec 10.5) changes them on purpose.
//!
//! Folding the whole target under the V3 rules is also the target's admission: any violation
//! is the refusal "format v2 to v3 produced an invalid v3 log".

use std::sync::Arc;

use serde_json::Value;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{ContentBlock, Event, EventData, FormatVersion, Message, SessionFold};

use crate::catalog::StageOptions;
use crate::error::{Reason, Refusal};

/// Proves every request of `source` unchanged in `target`, where `mapping[s]` is the target
/// seq of source event `s`. Returns the number of requests proved.
pub fn prove_requests(
    source: &[Event],
    target: &[Event],
    mapping: &[u64],
    options: StageOptions,
) -> Result<u64, Refusal> {
    assert_eq!(source.len(), mapping.len(), "one mapping per source event");
    let context = |version| RuleContext {
        version,
        snapshot: options.snapshot,
    };
    let mut v2 = SessionFold::new(context(FormatVersion::V2));
    let mut v3 = TargetFold {
        fold: SessionFold::new(context(FormatVersion::V3)),
        target,
        next_idx: 0,
    };
    let mut n_requests = 0;
    // What the previous request proved: both folds only append between two requests unless a
    // generation moved, so the messages proved equal then are still equal and only the new
    // tail needs comparing. This keeps the proof linear in the log, not quadratic.
    let mut proved: Option<Proved> = None;
    for event in source {
        v2.admit(Arc::new(event.clone())).map_err(|violation| {
            let detail = violation.to_string();
            Refusal::v2_to_v3(Some(event.seq), Reason::InvalidSource { detail })
        })?;
        let EventData::RequestHeader(data) = &event.data else {
            continue;
        };
        let target_seq = mapping[usize::try_from(event.seq).expect("a seq fits in usize")];
        v3.advance_through(target_seq)?;
        let prompt = match &data.header.system {
            Some(Value::String(text)) => text.as_str(),
            _ => "",
        };
        let now = Proved {
            v2_generation: v2.content_generation(),
            v3_generation: v3.fold.content_generation(),
            prompt: prompt.to_owned(),
            n_messages: 0,
        };
        let from_idx = match &proved {
            Some(last) if last.same_state(&now) => last.n_messages,
            _ => 0,
        };
        let v2_messages = v2.messages();
        let difference = first_difference(prompt, &v2_messages, &v3.fold.messages(), from_idx);
        proved = Some(Proved {
            n_messages: v2_messages.len(),
            ..now
        });
        if let Some(message_idx) = difference {
            let source_seq = event.seq;
            let reason = Reason::RequestChanged {
                source_seq,
                message_idx,
            };
            return Err(Refusal::v2_to_v3(Some(source_seq), reason));
        }
        n_requests += 1;
    }
    v3.advance_through(u64::MAX)?;
    assert_eq!(v3.next_idx, target.len(), "the whole target was admitted");
    Ok(n_requests)
}

/// The state at the last proved request.
struct Proved {
    v2_generation: u64,
    v3_generation: u64,
    prompt: String,
    /// V2 messages proved equal (after the prepended prompt).
    n_messages: usize,
}

impl Proved {
    fn same_state(&self, now: &Proved) -> bool {
        self.v2_generation == now.v2_generation
            && self.v3_generation == now.v3_generation
            && self.prompt == now.prompt
    }
}

/// The V3 fold and how much of the target it has admitted.
struct TargetFold<'a> {
    fold: SessionFold,
    target: &'a [Event],
    next_idx: usize,
}

impl TargetFold<'_> {
    /// Admits target events up to and including seq `last` (or to the end).
    fn advance_through(&mut self, last: u64) -> Result<(), Refusal> {
        while let Some(event) = self.target.get(self.next_idx) {
            if event.seq > last {
                break;
            }
            self.fold
                .admit(Arc::new(event.clone()))
                .map_err(|violation| {
                    let detail = format!("target seq {}: {violation}", event.seq);
                    Refusal::v2_to_v3(None, Reason::InvalidOutput { detail })
                })?;
            self.next_idx += 1;
        }
        Ok(())
    }
}

/// The index of the first V3 message that differs from the expectation, if any; V2 messages
/// before `from_idx` are known equal.
fn first_difference(
    prompt: &str,
    v2: &[&Message],
    v3: &[&Message],
    from_idx: usize,
) -> Option<usize> {
    let offset = usize::from(!prompt.is_empty());
    if offset == 1 {
        let Some(head) = v3.first() else {
            return Some(0);
        };
        let expected = [ContentBlock::text(prompt)];
        if head.role.as_deref() != Some("system") || head.content != expected {
            return Some(0);
        }
    }
    let n_messages = v2.len().max(v3.len().saturating_sub(offset));
    (from_idx.min(n_messages)..n_messages)
        .find(|&idx| match (v2.get(idx), v3.get(idx + offset)) {
            (Some(old), Some(new)) => {
                old.role != new.role || old.content != new.content || old.id != new.id
            }
            _ => true,
        })
        .map(|idx| idx + offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, role: &str, text: &str) -> Message {
        Message {
            id: Some(id.to_owned()),
            role: Some(role.to_owned()),
            content: vec![ContentBlock::text(text)],
            source: None,
            extra: Default::default(),
        }
    }

    // Goal: the comparison names the first differing V3 index, prompt included.
    // Method: equal lists, a wrong prompt, a changed text, a missing and an extra message.
    #[test]
    fn first_difference_indexes_v3_messages() {
        let system = message("generated", "system", "be brief");
        let user = message("u1", "user", "hi");
        let other = message("u1", "user", "bye");
        assert_eq!(
            first_difference("be brief", &[&user], &[&system, &user], 0),
            None
        );
        assert_eq!(first_difference("", &[&user], &[&user], 0), None);
        assert_eq!(
            first_difference("other", &[&user], &[&system, &user], 0),
            Some(0)
        );
        assert_eq!(
            first_difference("be brief", &[&user], &[&system, &other], 0),
            Some(1)
        );
        assert_eq!(
            first_difference("be brief", &[&user], &[&system], 0),
            Some(1)
        );
        assert_eq!(first_difference("", &[&user], &[&user, &other], 0), Some(1));
        assert_eq!(first_difference("be brief", &[], &[], 0), Some(0));
    }
}
