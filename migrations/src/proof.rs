//! The request-equivalence proof of a migration (spec 10.8, extended to the whole chain).
//!
//! The source and the V3 target are folded side by side with [`SessionFold`], each under its
//! own version's rules. The n-th `request/header` of the target is the n-th of the source:
//! no edge adds, drops or reorders request headers. When the target fold has admitted its
//! n-th request header, the source fold is advanced through the source's n-th, and the V3
//! derived messages must equal the source's derived messages with that header's prompt
//! prepended:
//!
//! - the prompt is `header.system` when it is a string, else `""`; a non-empty prompt is
//!   expected as V3 message 0 with role `system` and content exactly one text block holding the
//!   prompt; an empty prompt expects nothing (the empty head derives no message);
//! - every other message is compared by role, content and id, index by index; a source
//!   message without an id (possible only before V1) is compared by role and content, because
//!   the V0 -> V1 edge gives it its deterministic id;
//! - the synthetic system message's id and source are not compared: the id is generated and
//!   the plugin name is not part of what the model sees;
//! - sources of the other messages are not compared either, because the `tools-code-mode`
//!   rename (spec 10.5) and the V4 producer kinds (dsh-v4.md 5.4) change them on purpose;
//! - into V4, messages are compared as the model sees them (see [`ModelView`]): a V3 tool
//!   result (a user message holding one `tool-result` wrapper) and its V4 tool message are
//!   the same tool message (call id, error flag, content), and a V4 content tag the edge moved
//!   into the `plugin:` namespace is compared without that one prefix.
//!
//! The source events wait in a queue between the moment the migrator reads them and the
//! moment the proof folds them; the queue holds only what the stages hold back (an unsettled
//! assistant attempt), so the proof streams like the stages do.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{ContentBlock, Event, EventData, FormatVersion, Message, SessionFold};

use crate::error::{Reason, Refusal};

/// The streaming proof of one migration, from `from` to V3.
pub(crate) struct RequestProof {
    from: FormatVersion,
    to: FormatVersion,
    source: SessionFold,
    /// Source events read but not yet folded, oldest first.
    queue: VecDeque<Arc<Event>>,
    /// Source request headers folded so far.
    source_requests: u64,
    /// Target request headers seen so far; each one is proved when it is seen.
    target_requests: u64,
    /// What the previous request proved: both folds only append between two requests unless a
    /// generation moved, so the messages proved equal then are still equal and only the new
    /// tail needs comparing. This keeps the proof linear in the log, not quadratic.
    proved: Option<Proved>,
}

impl RequestProof {
    /// A proof of a migration from `from` whose source side is folded under the rules of
    /// `folded` (`from` itself, or V1 when the proof starts after the V0 -> V1 edge).
    pub(crate) fn new(
        from: FormatVersion,
        folded: FormatVersion,
        to: FormatVersion,
        snapshot: bool,
    ) -> RequestProof {
        RequestProof {
            from,
            to,
            source: SessionFold::new(RuleContext {
                version: folded,
                snapshot,
            }),
            queue: VecDeque::new(),
            source_requests: 0,
            target_requests: 0,
            proved: None,
        }
    }

    /// Tells the proof that every source event it will be given was admitted, in order, by an
    /// [`sessionlog_format::Admission`] of `ctx` (a log reader's). When that is the source
    /// fold's own rule context, the fold follows the events instead of checking those rules a
    /// second time ([`SessionFold::following`]); otherwise nothing changes. Only before the
    /// first source event: later, it changes nothing either.
    pub(crate) fn source_admitted(&mut self, ctx: RuleContext) {
        let fresh = self.queue.is_empty() && self.source.admission().next_seq() == 0;
        if fresh && self.source.admission().context() == ctx {
            self.source = SessionFold::following(ctx);
        }
    }

    /// Whether the source fold follows the source ([`RequestProof::source_admitted`]).
    #[cfg(test)]
    pub(crate) fn follows(&self) -> bool {
        self.source.admission().follows()
    }

    /// Queues the next source event (shared with the stages when they pass it on unchanged;
    /// the source fold still folds it on its own, checking the source's rules unless it
    /// follows a reader that checked them).
    pub(crate) fn source_event(&mut self, event: Arc<Event>) {
        self.queue.push_back(event);
    }

    /// Proves the request whose header the target fold has just admitted.
    pub(crate) fn target_request(&mut self, target: &SessionFold) -> Result<(), Refusal> {
        self.target_requests += 1;
        let Some((source_seq, prompt)) = self.advance_to_request(self.target_requests)? else {
            let detail = format!(
                "target request {} has no source request header",
                self.target_requests
            );
            let reason = Reason::InvalidOutput {
                to: self.to,
                detail,
            };
            return Err(Refusal::chain(self.from, self.to, None, reason));
        };
        let now = Proved {
            source_generation: self.source.content_generation(),
            target_generation: target.content_generation(),
            prompt,
            n_messages: 0,
        };
        let from_idx = match &self.proved {
            Some(last) if last.same_state(&now) => last.n_messages,
            _ => 0,
        };
        let source_messages = self.source.messages();
        let into_v4 = self.to == FormatVersion::V4;
        let difference = first_difference(
            &now.prompt,
            &source_messages,
            &target.messages(),
            from_idx,
            into_v4,
        );
        let n_messages = source_messages.len();
        self.proved = Some(Proved { n_messages, ..now });
        if let Some(message_idx) = difference {
            let reason = Reason::RequestChanged {
                source_seq,
                message_idx,
            };
            return Err(Refusal::chain(self.from, self.to, Some(source_seq), reason));
        }
        Ok(())
    }

    /// Folds the rest of the source and checks that every source request was proved.
    pub(crate) fn finish(&mut self) -> Result<u64, Refusal> {
        if let Some((source_seq, _)) = self.advance_to_request(self.target_requests + 1)? {
            let detail = format!("source request header at seq {source_seq} has no target");
            let reason = Reason::InvalidOutput {
                to: self.to,
                detail,
            };
            return Err(Refusal::chain(self.from, self.to, Some(source_seq), reason));
        }
        Ok(self.target_requests)
    }

    /// Folds queued source events until the `n`-th request header has been folded; returns
    /// its seq and prompt, or `None` when the queue ran out first.
    fn advance_to_request(&mut self, n: u64) -> Result<Option<(u64, String)>, Refusal> {
        while self.source_requests < n {
            let Some(event) = self.queue.pop_front() else {
                return Ok(None);
            };
            let seq = event.seq;
            let prompt = match &event.data {
                EventData::RequestHeader(data) => Some(match &data.header.system {
                    Some(Value::String(text)) => text.clone(),
                    _ => String::new(),
                }),
                _ => None,
            };
            self.source.admit(event).map_err(|violation| {
                let detail = violation.to_string();
                let reason = Reason::InvalidSource { detail };
                Refusal::chain(self.from, self.to, Some(seq), reason)
            })?;
            if let Some(prompt) = prompt {
                self.source_requests += 1;
                if self.source_requests == n {
                    return Ok(Some((seq, prompt)));
                }
            }
        }
        Ok(None)
    }
}

/// The state at the last proved request.
struct Proved {
    source_generation: u64,
    target_generation: u64,
    prompt: String,
    /// Source messages proved equal (after the prepended prompt).
    n_messages: usize,
}

impl Proved {
    fn same_state(&self, now: &Proved) -> bool {
        self.source_generation == now.source_generation
            && self.target_generation == now.target_generation
            && self.prompt == now.prompt
    }
}

/// The index of the first target message that differs from the expectation, if any; source
/// messages before `from_idx` are known equal. `into_v4` compares [`ModelView`]s.
fn first_difference(
    prompt: &str,
    v2: &[&Message],
    v3: &[&Message],
    from_idx: usize,
    into_v4: bool,
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
                let id_differs = old.id.is_some() && old.id != new.id;
                let differs = if into_v4 {
                    ModelView::of_source(old) != ModelView::of_v4(new)
                } else {
                    old.role != new.role || old.content != new.content
                };
                differs || id_differs
            }
            _ => true,
        })
        .map(|idx| idx + offset)
}

/// What the model is sent of one message: its role, the call a tool result answers with its
/// error flag, and its content. Sources and ids are not part of it (ids are compared apart).
/// Borrowed from the folds' messages: only a block whose tag loses its `plugin:` prefix is a
/// copy, made as the blocks are compared.
#[derive(Debug, PartialEq)]
struct ModelView<'a> {
    role: Option<&'a str>,
    call: Option<(&'a str, Option<bool>)>,
    content: Content<'a>,
}

/// A message's content blocks as the model sees them.
#[derive(Debug, Clone, Copy)]
enum Content<'a> {
    /// The blocks as they are.
    AsIs(&'a [ContentBlock]),
    /// V4 blocks, each with one `plugin:` prefix taken off an unknown tag ([`strip_plugin_tag`]).
    V4(&'a [ContentBlock]),
}

impl<'a> Content<'a> {
    fn blocks(self) -> impl Iterator<Item = Cow<'a, ContentBlock>> {
        let (blocks, v4) = match self {
            Content::AsIs(blocks) => (blocks, false),
            Content::V4(blocks) => (blocks, true),
        };
        blocks.iter().map(move |block| match v4 {
            true => strip_plugin_tag(block),
            false => Cow::Borrowed(block),
        })
    }
}

/// Equal when the model sees the same blocks, in the same order.
impl PartialEq for Content<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.blocks().eq(other.blocks())
    }
}

impl<'a> ModelView<'a> {
    /// A V0 to V3 message: a tool-sourced user message holding exactly one `tool-result`
    /// wrapper is the tool message it wraps.
    fn of_source(message: &'a Message) -> ModelView<'a> {
        if let [ContentBlock::ToolResult(block)] = message.content.as_slice() {
            if message.source_kind() == "tool" {
                return ModelView {
                    role: Some("tool"),
                    call: Some((block.tool_call_id.as_str(), block.is_error)),
                    content: Content::AsIs(&block.content),
                };
            }
        }
        ModelView {
            role: message.role.as_deref(),
            call: None,
            content: Content::AsIs(&message.content),
        }
    }

    /// A V4 message, with one `plugin:` prefix taken off unknown tags.
    fn of_v4(message: &'a Message) -> ModelView<'a> {
        let call = (message.role.as_deref() == Some("tool")).then(|| {
            let id = message.extra.get("toolCallId").and_then(Value::as_str);
            let is_error = message.extra.get("isError").and_then(Value::as_bool);
            (id.unwrap_or_default(), is_error)
        });
        ModelView {
            role: message.role.as_deref(),
            call,
            content: Content::V4(&message.content),
        }
    }
}

fn strip_plugin_tag(block: &ContentBlock) -> Cow<'_, ContentBlock> {
    let ContentBlock::Other(object) = block else {
        return Cow::Borrowed(block);
    };
    let mut object = object.clone();
    let stripped = object
        .get("type")
        .and_then(Value::as_str)
        .and_then(|tag| tag.strip_prefix("plugin:"))
        .map(str::to_owned);
    if let Some(tag) = stripped {
        object.insert("type".to_owned(), tag.into());
    }
    Cow::Owned(ContentBlock::Other(object))
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
            first_difference("be brief", &[&user], &[&system, &user], 0, false),
            None
        );
        assert_eq!(first_difference("", &[&user], &[&user], 0, false), None);
        assert_eq!(
            first_difference("other", &[&user], &[&system, &user], 0, false),
            Some(0)
        );
        assert_eq!(
            first_difference("be brief", &[&user], &[&system, &other], 0, false),
            Some(1)
        );
        assert_eq!(
            first_difference("be brief", &[&user], &[&system], 0, false),
            Some(1)
        );
        assert_eq!(
            first_difference("", &[&user], &[&user, &other], 0, false),
            Some(1)
        );
        assert_eq!(first_difference("be brief", &[], &[], 0, false), Some(0));
    }

    /// A block of tag `tag` with one member besides.
    fn tagged(tag: &str) -> ContentBlock {
        let object = serde_json::json!({"type": tag, "data": 1});
        let Value::Object(object) = object else {
            unreachable!("an object")
        };
        ContentBlock::Other(object.into())
    }

    // Goal: into V4, a V3 tool result and its V4 tool message are the same message, a V4 tag
    // the edge moved into `plugin:` is compared without that prefix, and any other change (a
    // block, the block count, the order, the call, the error flag, a doubled prefix) differs.
    // Method: a V3 tool result and plain messages against V4 messages built from them, then
    // each change alone.
    #[test]
    fn into_v4_messages_are_compared_as_the_model_sees_them() {
        let text = ContentBlock::text("found 3");
        let mut v3_result = message("t1", "user", "");
        v3_result.content = vec![serde_json::from_value(serde_json::json!({
            "type": "tool-result",
            "toolCallId": "call_1",
            "content": [{"type": "text", "text": "found 3"}],
            "isError": false,
        }))
        .unwrap()];
        v3_result.source = serde_json::from_value(serde_json::json!({"kind": "tool"})).unwrap();
        let v4_tool = |content: Vec<ContentBlock>, id: &str, is_error: bool| {
            let mut tool = message("t1", "tool", "");
            tool.content = content;
            tool.extra.insert("toolCallId".to_owned(), id.into());
            tool.extra.insert("isError".to_owned(), is_error.into());
            tool
        };
        let same =
            |old: &Message, new: &Message| first_difference("", &[old], &[new], 0, true).is_none();
        assert!(same(
            &v3_result,
            &v4_tool(vec![text.clone()], "call_1", false)
        ));
        assert!(!same(
            &v3_result,
            &v4_tool(vec![text.clone()], "call_2", false)
        ));
        assert!(!same(
            &v3_result,
            &v4_tool(vec![text.clone()], "call_1", true)
        ));
        assert!(!same(&v3_result, &v4_tool(vec![], "call_1", false)));
        let twice = vec![text.clone(), text.clone()];
        assert!(!same(&v3_result, &v4_tool(twice, "call_1", false)));
        let other_text = vec![ContentBlock::text("found 4")];
        assert!(!same(&v3_result, &v4_tool(other_text, "call_1", false)));

        let mut v3 = message("a1", "assistant", "hi");
        v3.content.push(tagged("custom"));
        let mut v4 = message("a1", "assistant", "hi");
        v4.content.push(tagged("plugin:custom"));
        assert!(same(&v3, &v4));
        v4.content[1] = tagged("plugin:plugin:custom");
        assert!(!same(&v3, &v4));
        v4.content = vec![tagged("plugin:custom"), ContentBlock::text("hi")];
        assert!(!same(&v3, &v4), "the order counts");
        v4.content = vec![ContentBlock::text("hi"), tagged("custom")];
        assert!(
            same(&v3, &v4),
            "a tag without the prefix is compared as it is"
        );
        v4.role = Some("user".to_owned());
        assert!(!same(&v3, &v4));
    }
}
