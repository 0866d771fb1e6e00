//! Lines read ahead of a [`crate::LogReader`] in batches, their rows decoded by the reader and
//! by a helper thread at once (issue #23). The reader still takes every line in order and
//! admits every row on its own thread, so what it yields and every fault (line, offset, seq,
//! rule, text) are the same as when it reads and decodes one line at a time.
//!
//! The reader decodes a batch from the front as it goes, the helper from the back; they meet
//! in the middle. The reader never waits for the helper: a line the helper has claimed but not
//! finished, the reader decodes itself (and the helper's result is dropped), so a helper that
//! gets no core costs nothing but the handoff. Rows are decoded ahead only for versions with
//! one event per row (V2 and later), where the row `i` places into a batch expects the batch's
//! first seq plus `i`; the reader takes a row decoded ahead only when it expects that seq.
//!
//! A batch is read up to [`AHEAD_BYTES_MAX`] or [`AHEAD_LINES_MAX`], and ends early at the
//! first line that is not complete (end of input, a torn or too-long line, a read error), which
//! is kept as it was read and handed back in its turn.
//!
//! Memory: a batch holds at most [`AHEAD_BYTES_MAX`] bytes of lines plus its last line (at most
//! [`crate::reader::ROW_SIZE_BYTES_MAX`]), and every decoded value costs at least one byte of
//! them, so its decoded rows stay within the [`crate::budget`] of one largest line plus
//! [`AHEAD_BYTES_MAX`] values. At most two batches are alive: the reader's and the one the
//! helper may still be finishing.

use std::io;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Violation;
use crate::row::{decode_row, Decoded, RowContext};

/// Bytes of lines after which a batch stops reading (the line that crosses it is kept).
pub const AHEAD_BYTES_MAX: usize = 256 << 10;

/// Most lines in one batch.
pub const AHEAD_LINES_MAX: usize = 1024;

/// How [`crate::reader`]'s bounded line read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineRead {
    Complete,
    Torn,
    Eof,
    TooLong,
}

type RowResult = Result<Decoded, Violation>;

/// One batch: its complete lines (a prefix of what was read), one result slot per line, and
/// the claims: the reader takes lines from the front, the helper from the back.
struct Batch {
    lines: Vec<Vec<u8>>,
    slots: Vec<Mutex<Option<RowResult>>>,
    /// `(front, back)`: lines `front..back` are unclaimed.
    claims: Mutex<(usize, usize)>,
    ctx: RowContext,
    first_seq: u64,
}

impl Batch {
    fn expected_seq(&self, line_idx: usize) -> u64 {
        self.first_seq + line_idx as u64
    }

    /// The helper's side: claims lines from the back until the claims meet.
    fn decode_from_back(&self) {
        loop {
            let line_idx = {
                let mut claims = lock(&self.claims);
                if claims.1 <= claims.0 {
                    return;
                }
                claims.1 -= 1;
                claims.1
            };
            let decoded = decode_row(&self.lines[line_idx], self.ctx, self.expected_seq(line_idx));
            *lock(&self.slots[line_idx]) = Some(decoded);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while a slot or the claims were held leaves them whole: they are plain values.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The lines read ahead and the helper thread that decodes them.
pub(crate) struct ReadAhead {
    helper: Option<SyncSender<Arc<Batch>>>,
    batch: Option<Arc<Batch>>,
    /// Index in `batch` of the next line handed back.
    next_idx: usize,
    /// The line that ended the batch, when it was not complete.
    last: Option<(Vec<u8>, io::Result<LineRead>)>,
}

/// One line handed back: its bytes, how its read ended, and its row when decoded ahead.
pub(crate) struct AheadLine {
    pub(crate) read: io::Result<LineRead>,
    pub(crate) decoded: Option<(u64, RowResult)>,
}

impl ReadAhead {
    /// Starts the helper thread; without one (the system refused a thread) the reader decodes
    /// every line itself.
    pub(crate) fn start() -> ReadAhead {
        let (sender, receiver) = sync_channel::<Arc<Batch>>(1);
        let spawned = std::thread::Builder::new()
            .name("sessionlog-decode".into())
            .spawn(move || {
                while let Ok(batch) = receiver.recv() {
                    batch.decode_from_back();
                }
            });
        ReadAhead {
            helper: spawned.ok().map(|_| sender),
            batch: None,
            next_idx: 0,
            last: None,
        }
    }

    /// Whether every line read ahead has been handed back.
    pub(crate) fn is_empty(&self) -> bool {
        self.last.is_none()
            && self
                .batch
                .as_ref()
                .is_none_or(|b| self.next_idx >= b.lines.len())
    }

    /// Reads the next batch with `read_line` (which fills a buffer and says how the read
    /// ended) and hands its complete lines to the helper.
    pub(crate) fn fill(
        &mut self,
        mut read_line: impl FnMut(&mut Vec<u8>) -> io::Result<LineRead>,
        ctx: RowContext,
        first_seq: u64,
    ) {
        assert!(
            self.is_empty(),
            "a batch is read once the last one is used up"
        );
        assert!(
            !ctx.version.has_packed_rows(),
            "rows decode ahead only where a row is one event"
        );
        let mut lines = Vec::new();
        let mut size_bytes = 0;
        while lines.len() < AHEAD_LINES_MAX && size_bytes < AHEAD_BYTES_MAX {
            let mut line = Vec::new();
            let read = read_line(&mut line);
            if !matches!(read, Ok(LineRead::Complete)) {
                self.last = Some((line, read));
                break;
            }
            size_bytes += line.len();
            lines.push(line);
        }
        let n_lines = lines.len();
        let batch = Arc::new(Batch {
            slots: (0..n_lines).map(|_| Mutex::new(None)).collect(),
            lines,
            claims: Mutex::new((0, n_lines)),
            ctx,
            first_seq,
        });
        if let Some(helper) = &self.helper {
            match helper.try_send(Arc::clone(&batch)) {
                // Full: the helper is still on an older batch, and this one is the reader's.
                Ok(()) | Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => self.helper = None,
            }
        }
        self.batch = Some(batch);
        self.next_idx = 0;
    }

    /// The next line read ahead into `line` (cleared first), or `None` when all were handed
    /// back. The reader decodes the row itself when the helper has not.
    pub(crate) fn next(&mut self, line: &mut Vec<u8>) -> Option<AheadLine> {
        line.clear();
        if let Some(batch) = self
            .batch
            .as_ref()
            .filter(|b| self.next_idx < b.lines.len())
        {
            let line_idx = self.next_idx;
            self.next_idx += 1;
            line.extend_from_slice(&batch.lines[line_idx]);
            let claimed_by_helper = {
                let mut claims = lock(&batch.claims);
                let claimed = claims.1 <= line_idx;
                claims.0 = claims.0.max(line_idx + 1);
                claimed
            };
            let ahead = claimed_by_helper
                .then(|| lock(&batch.slots[line_idx]).take())
                .flatten();
            let expected_seq = batch.expected_seq(line_idx);
            let decoded = ahead.unwrap_or_else(|| decode_row(line, batch.ctx, expected_seq));
            return Some(AheadLine {
                read: Ok(LineRead::Complete),
                decoded: Some((expected_seq, decoded)),
            });
        }
        let (last, read) = self.last.take()?;
        line.extend_from_slice(&last);
        Some(AheadLine {
            read,
            decoded: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// The lines of `bytes`, as a source of complete lines.
    fn lines_of(bytes: &[u8]) -> VecDeque<Vec<u8>> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    const CTX: RowContext = RowContext {
        version: crate::FormatVersion::V3,
        snapshot: false,
    };

    fn row(seq: u64) -> String {
        format!(
            r#"{{"type":"turn/end","seq":{seq},"time":1,"data":{{"turn":1,"reason":{{"kind":"stop"}}}}}}"#
        )
    }

    // Goal: every line comes back in order with its row decoded for the seq it expects,
    // whichever side decoded it, then the line that ended the batch as it was read.
    #[test]
    fn lines_come_back_in_order_then_the_incomplete_one() {
        let text: String = (5..2005).map(|s| row(s) + "\n").collect();
        let mut source = lines_of(text.as_bytes());
        let mut ahead = ReadAhead::start();
        ahead.fill(
            |line| match source.pop_front() {
                Some(next) => {
                    *line = next;
                    Ok(LineRead::Complete)
                }
                None => {
                    line.extend_from_slice(b"{\"cut");
                    Ok(LineRead::Torn)
                }
            },
            CTX,
            5,
        );
        let mut line = Vec::new();
        for seq in 5..(5 + AHEAD_LINES_MAX as u64) {
            let next = ahead.next(&mut line).expect("a line");
            assert_eq!(line, row(seq).into_bytes());
            assert!(matches!(next.read, Ok(LineRead::Complete)));
            match next.decoded {
                Some((expected, Ok(Decoded::One(event)))) => {
                    assert_eq!((expected, event.seq), (seq, seq));
                }
                other => panic!("seq {seq}: {other:?}"),
            }
        }
        assert!(
            ahead.is_empty(),
            "a batch holds at most AHEAD_LINES_MAX lines"
        );
        assert!(ahead.next(&mut line).is_none());
    }

    // Goal: a batch cut short by an incomplete line hands that line back last, undecoded.
    #[test]
    fn the_incomplete_line_comes_back_undecoded() {
        let mut ahead = ReadAhead::start();
        let mut reads = vec![Ok(LineRead::Eof), Ok(LineRead::Complete)];
        ahead.fill(
            |line| {
                line.extend_from_slice(row(0).as_bytes());
                reads.pop().expect("two reads")
            },
            CTX,
            0,
        );
        let mut line = Vec::new();
        assert!(ahead.next(&mut line).is_some_and(|a| a.decoded.is_some()));
        let last = ahead.next(&mut line).expect("the end");
        assert!(matches!(last.read, Ok(LineRead::Eof)) && last.decoded.is_none());
        assert!(ahead.is_empty() && ahead.next(&mut line).is_none());
    }
}
