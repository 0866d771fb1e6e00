//! The parallel row stage of a [`LogReader`](super::LogReader): the reader's thread reads the
//! log's lines in chunks, and it and one helper thread decode them, so that a log whose check
//! is mostly decoding reads in about half the time on a machine with a core to spare
//! (BENCHMARKS.md, "Check").
//!
//! The reader's thread keeps a window of chunks read ahead. It decodes the front chunk itself
//! when the helper has not taken it; the helper takes the newest chunk nobody has taken, so
//! the two rarely want the same one, and the reader waits only for a chunk the helper is
//! decoding. The items come out in the order of the lines, each the same as the inline stage
//! makes: the line number, the byte offset and every outcome of a read are decided on the
//! reader's thread as the line is read, and only the decoding of complete rows moves.
//!
//! Only a log whose rows decode independently of one another runs here: one event per row
//! (no packed V0/V1 rows) and not a normalized recording (whose rows may take their seq from
//! their position). There `decode_row` does not read the seq it is told to expect, which is
//! what lets the rows of a chunk decode before the rows ahead of them.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::rows::{LineRead, RowItem, RowKind, Rows};
use super::ROW_SIZE_BYTES_MAX;
use crate::row::{decode_row, RowContext};

/// Text the reader puts in one chunk (a longer row makes a chunk of its own).
pub const PARALLEL_CHUNK_BYTES: usize = 256 << 10;
/// Room a chunk's text has beyond [`PARALLEL_CHUNK_BYTES`] for the line that fills it.
const CHUNK_SLACK_BYTES: usize = 16 << 10;
/// Chunks the reader keeps read ahead; with the text bound below, memory stays at a few
/// chunks' rows however long the log.
const WINDOW_CHUNKS: usize = 4;

/// One line as the reader's thread read it: where it is, and either the range of a complete
/// row in the chunk's text or what the read found instead (the item the inline stage makes).
struct Line {
    line_no: u64,
    offset_bytes: u64,
    read: LineOutcome,
}

enum LineOutcome {
    Row { end: usize },
    Other(RowKind),
}

/// Lines read together: the text of their complete rows back to back.
struct Chunk {
    text: Vec<u8>,
    lines: Vec<Line>,
}

impl Chunk {
    /// Every line's item, in order; complete rows decoded.
    fn decode(self, ctx: RowContext) -> VecDeque<RowItem> {
        let mut start = 0;
        self.lines
            .into_iter()
            .map(|line| {
                let kind = match line.read {
                    LineOutcome::Row { end } => {
                        // Rows here decode independently: `decode_row` reads the expected seq
                        // only for packed rows and normalized recordings (module docs).
                        let decoded = decode_row(&self.text[start..end], ctx, 0);
                        start = end;
                        RowKind::Row {
                            snapshot: ctx.snapshot,
                            decoded,
                        }
                    }
                    LineOutcome::Other(kind) => kind,
                };
                RowItem {
                    line_no: line.line_no,
                    offset_bytes: line.offset_bytes,
                    kind,
                }
            })
            .collect()
    }
}

enum Slot {
    Read(Chunk),
    /// The helper is decoding it.
    Taken,
    Decoded(VecDeque<RowItem>),
}

#[derive(Default)]
struct Window {
    /// The chunks read and not yet handed to the admission, oldest first, each with its
    /// number (so that the helper's result finds its slot) and its text's length.
    slots: VecDeque<(u64, usize, Slot)>,
    /// Text bytes of the chunks in `slots`, decoded or not: what bounds the window's rows.
    text_bytes: usize,
    /// The reader is gone: the helper stops.
    closed: bool,
    /// The helper stopped (it panicked): a chunk it took will not come back.
    helper_gone: bool,
}

/// The window and the condition both threads wait on.
type Shared = (Mutex<Window>, Condvar);

fn lock(shared: &Shared) -> MutexGuard<'_, Window> {
    // A panic while holding the lock leaves the window as it was between two steps, each of
    // which keeps it consistent; the reader reports a helper that stopped as a failed read.
    shared
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The reader's side of the parallel stage.
pub(super) struct Parallel<R: Read> {
    rows: Rows<R>,
    ctx: RowContext,
    chunk_bytes: usize,
    shared: Arc<Shared>,
    helper: Option<JoinHandle<()>>,
    /// The items of the chunk being handed out.
    items: VecDeque<RowItem>,
    next_chunk: u64,
    /// The last read ended the input (its end, a torn line or a failed read).
    ended: bool,
}

impl<R: Read> Parallel<R> {
    /// The parallel stage over `rows`, or `rows` back when its log does not qualify (module
    /// docs) or the helper thread cannot start.
    pub(super) fn start(rows: Rows<R>, chunk_bytes: usize) -> Result<Parallel<R>, Rows<R>> {
        let Some(ctx) = rows.independent_rows() else {
            return Err(rows);
        };
        let shared: Arc<Shared> = Arc::default();
        let helper_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("sessionlog-decode".into())
            .spawn(move || help(&helper_shared, ctx));
        let Ok(helper) = spawned else {
            return Err(rows);
        };
        Ok(Parallel {
            rows,
            ctx,
            chunk_bytes: chunk_bytes.max(1),
            shared,
            helper: Some(helper),
            items: VecDeque::new(),
            next_chunk: 0,
            ended: false,
        })
    }

    pub(super) fn next_item(&mut self) -> RowItem {
        loop {
            if let Some(item) = self.items.pop_front() {
                return item;
            }
            self.read_ahead();
            let shared = Arc::clone(&self.shared);
            let mut window = lock(&shared);
            let Some((_, text_len, front)) = window.slots.front_mut() else {
                drop(window);
                // Past the last item the reader never asks again; if it does, the inline
                // stage's answer at the end of the input.
                return self.rows.next_item();
            };
            let text_len = *text_len;
            match std::mem::replace(front, Slot::Taken) {
                Slot::Read(chunk) => {
                    window.text_bytes -= text_len;
                    window.slots.pop_front();
                    drop(window);
                    self.items = chunk.decode(self.ctx);
                }
                Slot::Decoded(items) => {
                    window.text_bytes -= text_len;
                    window.slots.pop_front();
                    self.items = items;
                }
                Slot::Taken if window.helper_gone => {
                    drop(window);
                    return self.helper_stopped();
                }
                Slot::Taken => drop(shared.1.wait(window)),
            }
        }
    }

    /// Reads chunks until the window is full or the input has ended.
    fn read_ahead(&mut self) {
        while !self.ended {
            {
                let window = lock(&self.shared);
                if window.slots.len() >= WINDOW_CHUNKS
                    || window.text_bytes >= WINDOW_CHUNKS.saturating_mul(self.chunk_bytes)
                {
                    return;
                }
            }
            let chunk = self.read_chunk();
            let mut window = lock(&self.shared);
            window.text_bytes += chunk.text.len();
            let number = self.next_chunk;
            window
                .slots
                .push_back((number, chunk.text.len(), Slot::Read(chunk)));
            self.next_chunk += 1;
            drop(window);
            self.shared.1.notify_all();
        }
    }

    /// Reads lines until the chunk holds `chunk_bytes` of text or the input ends; each line's
    /// number, offset and outcome are the inline stage's (`Rows::next_item`).
    fn read_chunk(&mut self) -> Chunk {
        let mut chunk = Chunk {
            // Room for the chunk's last line too, most of the time: no reallocation (a chunk
            // size a caller set larger than the default grows as it fills).
            text: Vec::with_capacity(
                self.chunk_bytes.min(PARALLEL_CHUNK_BYTES) + CHUNK_SLACK_BYTES,
            ),
            lines: Vec::new(),
        };
        while chunk.text.len() < self.chunk_bytes && !self.ended {
            let start = chunk.text.len();
            let outcome = self.rows.read_line_onto(&mut chunk.text);
            if !matches!(outcome, Ok(LineRead::Complete)) {
                // Only complete rows are decoded; the rest of a line is not kept.
                chunk.text.truncate(start);
            }
            let read = match outcome {
                Ok(LineRead::Complete) => LineOutcome::Row {
                    end: chunk.text.len(),
                },
                Ok(LineRead::TooLong) => LineOutcome::Other(RowKind::TooLong),
                Ok(LineRead::Eof) => {
                    self.ended = true;
                    LineOutcome::Other(RowKind::End(self.rows.torn_frame_message()))
                }
                Ok(LineRead::Torn) => {
                    self.ended = true;
                    LineOutcome::Other(RowKind::Torn(self.rows.torn_line_message()))
                }
                Err(error) => {
                    self.ended = true;
                    LineOutcome::Other(RowKind::Failed(error))
                }
            };
            let (line_no, offset_bytes) = self.rows.position();
            chunk.lines.push(Line {
                line_no,
                offset_bytes,
                read,
            });
        }
        chunk
    }

    fn helper_stopped(&mut self) -> RowItem {
        self.ended = true;
        let (line_no, offset_bytes) = self.rows.position();
        RowItem {
            line_no,
            offset_bytes,
            kind: RowKind::Failed(crate::error::ReadError::Io(std::io::Error::other(
                "the log's row decoder stopped",
            ))),
        }
    }
}

impl<R: Read> Drop for Parallel<R> {
    fn drop(&mut self) {
        lock(&self.shared).closed = true;
        self.shared.1.notify_all();
        if let Some(helper) = self.helper.take() {
            // The helper stops after the chunk it is decoding; a panic in it was reported as
            // a failed read.
            let _ = helper.join();
        }
    }
}

/// Tells the reader the helper stopped (after the reader is gone, or by a panic, when a chunk it
/// took will not come back).
struct Gone<'a>(&'a Shared);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        lock(self.0).helper_gone = true;
        self.0 .1.notify_all();
    }
}

/// The helper: decodes the newest chunk nobody has taken, until the reader is gone.
fn help(shared: &Shared, ctx: RowContext) {
    let _gone = Gone(shared);
    let mut window = lock(shared);
    loop {
        if window.closed {
            return;
        }
        let newest = window
            .slots
            .iter()
            .rposition(|(_, _, slot)| matches!(slot, Slot::Read(_)));
        let Some(at) = newest else {
            window = shared.1.wait(window).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let (number, _, slot) = &mut window.slots[at];
        let number = *number;
        let Slot::Read(chunk) = std::mem::replace(slot, Slot::Taken) else {
            unreachable!("the helper took a chunk it found read");
        };
        drop(window);
        let items = chunk.decode(ctx);
        window = lock(shared);
        if let Some((_, _, slot)) = window.slots.iter_mut().find(|(n, _, _)| *n == number) {
            *slot = Slot::Decoded(items);
        }
        shared.1.notify_all();
    }
}

impl<R: Read> Rows<R> {
    /// The decoding context when this log's rows decode independently of one another (module
    /// docs): after the header and the snapshot mode are decided, and no packed rows.
    fn independent_rows(&self) -> Option<RowContext> {
        let version = self.version();
        match self.snapshot_mode() {
            Some(false) if !version.has_packed_rows() => Some(RowContext {
                version,
                snapshot: false,
                skim: self.skim,
            }),
            _ => None,
        }
    }
}

const _: () = assert!(PARALLEL_CHUNK_BYTES < ROW_SIZE_BYTES_MAX);
