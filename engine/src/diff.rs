//! `diff`: where two logs (or two points of one session) first send the model something
//! different: the first divergent request and the message where it diverges.
//!
//! Whole logs are compared request by request (spec: a request is each settled model call),
//! on the call configuration, the tools and the derived messages. Two points (`@SEQ`) compare
//! the messages derived there. Message ids are ignored unless asked for: a migrated log's
//! generated system-message ids differ from a native recording's by design.

use serde_json::Value;
use sessionlog_format::Message;

use crate::error::Error;
use crate::inspect::fold_session;
use crate::replay::SessionSource;
use crate::requests::{requests, RequestOptions, RequestRow};

/// How to compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiffOptions {
    /// Compare message ids too.
    pub ids: bool,
}

/// What differs first.
#[derive(Debug, Clone, PartialEq)]
pub enum Divergence {
    /// Same number of requests (or messages), all equal.
    Same { requests: usize },
    /// Request `index` differs (`None` for a point comparison).
    Request {
        index: Option<usize>,
        what: Difference,
    },
    /// One side has more requests; the first `common` are equal.
    Count { left: usize, right: usize },
}

/// How a request differs.
#[derive(Debug, Clone, PartialEq)]
pub enum Difference {
    Config {
        left: Box<Value>,
        right: Box<Value>,
    },
    Tools,
    /// Message `index` differs; either side may be missing.
    Message {
        index: usize,
        left: Option<Box<Message>>,
        right: Option<Box<Message>>,
    },
}

/// Compares every request of two sessions.
pub fn diff_requests(
    left: SessionSource<'_>,
    right: SessionSource<'_>,
    options: DiffOptions,
) -> Result<Divergence, Error> {
    let bodies = RequestOptions { bodies: true };
    let left = requests(left, bodies)?;
    let right = requests(right, bodies)?;
    for (index, (a, b)) in left.requests.iter().zip(&right.requests).enumerate() {
        if let Some(what) = request_difference(a, b, options) {
            return Ok(Divergence::Request {
                index: Some(index),
                what,
            });
        }
    }
    let (n_left, n_right) = (left.requests.len(), right.requests.len());
    if n_left != n_right {
        return Ok(Divergence::Count {
            left: n_left,
            right: n_right,
        });
    }
    Ok(Divergence::Same { requests: n_left })
}

/// Compares the messages derived at two points (each source's head when its seq is `None`).
pub fn diff_points(
    left: (SessionSource<'_>, Option<u64>),
    right: (SessionSource<'_>, Option<u64>),
    options: DiffOptions,
) -> Result<Divergence, Error> {
    let left = fold_session(left.0, left.1)?;
    let right = fold_session(right.0, right.1)?;
    let a: Vec<Message> = left.messages().into_iter().cloned().collect();
    let b: Vec<Message> = right.messages().into_iter().cloned().collect();
    Ok(match message_difference(&a, &b, options) {
        Some(what) => Divergence::Request { index: None, what },
        None => Divergence::Same { requests: 1 },
    })
}

fn request_difference(a: &RequestRow, b: &RequestRow, options: DiffOptions) -> Option<Difference> {
    if a.config != b.config {
        return Some(Difference::Config {
            left: Box::new(a.config.clone()),
            right: Box::new(b.config.clone()),
        });
    }
    if a.tools != b.tools {
        return Some(Difference::Tools);
    }
    let empty = Vec::new();
    let left = a.messages.as_ref().unwrap_or(&empty);
    let right = b.messages.as_ref().unwrap_or(&empty);
    message_difference(left, right, options)
}

fn message_difference(a: &[Message], b: &[Message], options: DiffOptions) -> Option<Difference> {
    let n = a.len().max(b.len());
    (0..n)
        .find(|&idx| match (a.get(idx), b.get(idx)) {
            (Some(x), Some(y)) => !same_message(x, y, options),
            _ => true,
        })
        .map(|index| Difference::Message {
            index,
            left: a.get(index).cloned().map(Box::new),
            right: b.get(index).cloned().map(Box::new),
        })
}

/// Role and content always; the id when asked. Sources are provenance, not what the model
/// sees, and are not compared.
fn same_message(a: &Message, b: &Message, options: DiffOptions) -> bool {
    a.role == b.role && a.content == b.content && (!options.ids || a.id == b.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_format::ContentBlock;

    fn message(id: &str, role: &str, text: &str) -> Message {
        Message {
            id: Some(id.to_owned()),
            role: Some(role.to_owned()),
            content: vec![ContentBlock::text(text)],
            source: None,
            extra: Default::default(),
        }
    }

    // Goal: the first differing message is found, ids count only when asked, and a missing
    // message on either side is a difference.
    // Method: small lists differing in text, id and length.
    #[test]
    fn first_message_difference() {
        let a = [message("1", "user", "hi"), message("2", "assistant", "yo")];
        let b = [message("x", "user", "hi"), message("2", "assistant", "no")];
        let plain = DiffOptions::default();
        let found = message_difference(&a, &b, plain);
        assert!(matches!(found, Some(Difference::Message { index: 1, .. })));
        let with_ids = message_difference(&a, &b, DiffOptions { ids: true });
        assert!(matches!(
            with_ids,
            Some(Difference::Message { index: 0, .. })
        ));
        assert_eq!(message_difference(&a, &a, plain), None);
        let shorter = message_difference(&a, &a[..1], plain);
        assert!(matches!(
            shorter,
            Some(Difference::Message {
                index: 1,
                right: None,
                ..
            })
        ));
    }
}
