//! The row stage of a [`LogReader`](super::LogReader): reads the log's lines and decodes each
//! row into events, handing the admission one [`RowItem`] at a time.
//!
//! The stage runs inline, on the reader's own thread, or pipelined ([`RowStage::pipelined`]):
//! on a thread of its own that runs ahead of the admission by a bounded number of chunks.
//! Either way the items are the same, so every event, fault and line number is: the stage
//! keeps no state the admission changes. The seq a row's first event is expected at (a
//! snapshot row's seq, a packed row's `seq0` check) is the count of events decoded before it,
//! which is the admission's next seq for as long as the admission accepts every event; after
//! its first refusal the reader only asks whether a later row decodes as a `turn/end`, which
//! does not depend on that seq.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use serde_json::Value;

use super::parallel::Parallel;
use super::ROW_SIZE_BYTES_MAX;
use crate::error::{Fault, ReadError, Rule, Violation};
use crate::frame::{FrameCorruption, FrameReader, TornFrame};
use crate::row::{decode_row, Decoded, RowContext};
use crate::version::FormatVersion;

/// Text a pipelined stage puts in one chunk before sending it (a longer row makes a chunk of
/// its own).
pub(crate) const PIPELINE_CHUNK_BYTES: usize = 1 << 20;
/// Chunks a pipelined stage may have sent that the admission has not taken yet. With the one
/// it is building and the one being admitted, at most four chunks' rows are decoded at once.
pub(crate) const PIPELINE_CHUNKS_AHEAD: usize = 2;

pub(super) enum Source<R: Read> {
    Raw(BufReader<R>),
    Zstd(Box<BufReader<FrameReader<BufReader<R>>>>),
    /// Decompressed elsewhere; the function reports the torn frame.
    Frames(BufReader<R>, fn(&R) -> Option<TornFrame>),
}

impl<R: Read> Source<R> {
    fn buf_read(&mut self) -> &mut dyn BufRead {
        match self {
            Source::Raw(r) | Source::Frames(r, _) => r,
            Source::Zstd(r) => r.as_mut(),
        }
    }

    fn torn(&self) -> Option<TornFrame> {
        match self {
            Source::Raw(_) => None,
            Source::Zstd(frames) => frames.get_ref().torn(),
            Source::Frames(frames, torn) => torn(frames.get_ref()),
        }
    }
}

pub(super) enum LineRead {
    Complete,
    Torn,
    Eof,
    TooLong,
}

/// One step of the stage, stamped with the physical line (the header is line 1) and the byte
/// offset where that line starts, as the reader's faults name them.
pub(super) struct RowItem {
    pub(super) line_no: u64,
    pub(super) offset_bytes: u64,
    pub(super) kind: RowKind,
}

pub(super) enum RowKind {
    /// A complete row, decoded; `snapshot` is the mode it was decoded in.
    Row {
        snapshot: bool,
        decoded: Result<Decoded, Violation>,
    },
    /// A row over [`ROW_SIZE_BYTES_MAX`].
    TooLong,
    /// The last line has no newline: the message says where it was cut.
    Torn(String),
    /// The end of the input, with the message naming a zstd frame it cut short, if any.
    End(Option<String>),
    /// A read failed (a corrupt zstd frame is a fault of its line).
    Failed(ReadError),
}

/// The inline stage: the input, the line being read, and where it is.
pub(super) struct Rows<R: Read> {
    source: Source<R>,
    version: FormatVersion,
    /// Decided by the header or the options, else by the first row.
    snapshot: Option<bool>,
    line_no: u64,
    offset_bytes: u64,
    line: Vec<u8>,
    /// The length of the last line read (without its newline), wherever it was read to.
    line_len: usize,
    decoded_events: u64,
    /// Rows are decoded to be checked, not kept ([`crate::skim`]).
    pub(super) skim: bool,
}

impl<R: Read> Rows<R> {
    pub(super) fn new(source: Source<R>) -> Rows<R> {
        Rows {
            source,
            version: FormatVersion::V3,
            snapshot: None,
            line_no: 0,
            offset_bytes: 0,
            line: Vec::new(),
            line_len: 0,
            decoded_events: 0,
            skim: false,
        }
    }

    /// Decodes the rows to check them, not to keep them ([`crate::skim`]).
    pub(super) fn skim(&mut self) {
        self.skim = true;
    }

    /// Sets what the header decided, before the first row.
    pub(super) fn start(&mut self, version: FormatVersion, snapshot: Option<bool>) {
        self.version = version;
        self.snapshot = snapshot;
    }

    pub(super) fn line_no(&self) -> u64 {
        self.line_no
    }

    /// The last line read, without its newline.
    pub(super) fn line(&self) -> &[u8] {
        &self.line
    }

    pub(super) fn read_line(&mut self) -> Result<LineRead, ReadError> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let outcome = self.read_line_onto(&mut line);
        self.line = line;
        outcome
    }

    /// Reads the next line (without its newline) onto the end of `text`, as [`Rows::read_line`]
    /// reads it into the stage's own buffer: the same outcomes, line numbers and offsets.
    pub(super) fn read_line_onto(&mut self, text: &mut Vec<u8>) -> Result<LineRead, ReadError> {
        self.offset_bytes += self.line_len_consumed();
        let start = text.len();
        let outcome = read_bounded_line(self.source.buf_read(), text, start);
        self.line_len = text.len() - start;
        match outcome {
            Ok(read) => {
                if !matches!(read, LineRead::Eof) {
                    self.line_no += 1;
                }
                Ok(read)
            }
            Err(error) => Err(self.io_error(error)),
        }
    }

    /// Bytes of the previous line including its newline; offsets are tracked lazily.
    fn line_len_consumed(&self) -> u64 {
        if self.line_no == 0 {
            0
        } else {
            self.line_len as u64 + 1
        }
    }

    fn io_error(&self, error: io::Error) -> ReadError {
        match error
            .get_ref()
            .and_then(|e| e.downcast_ref::<FrameCorruption>())
        {
            Some(corruption) => ReadError::Fault(Fault {
                line: self.line_no + 1,
                offset_bytes: self.offset_bytes,
                seq: None,
                rule: Rule::Frame,
                message: corruption.to_string(),
            }),
            None => ReadError::Io(error),
        }
    }

    /// The line number and byte offset of the last line read.
    pub(super) fn position(&self) -> (u64, u64) {
        (self.line_no, self.offset_bytes)
    }

    pub(super) fn version(&self) -> FormatVersion {
        self.version
    }

    /// The snapshot mode, once the header, the options or the first row decided it.
    pub(super) fn snapshot_mode(&self) -> Option<bool> {
        self.snapshot
    }

    /// Names the zstd frame that ended early, when the input is compressed and did.
    pub(super) fn torn_frame_message(&self) -> Option<String> {
        let torn = self.source.torn()?;
        Some(format!(
            "end of file inside zstd frame {} (at byte offset {})",
            torn.frame_index, torn.frame_offset_bytes
        ))
    }

    /// Reads the next line and says what it is.
    pub(super) fn next_item(&mut self) -> RowItem {
        let kind = match self.read_line() {
            Err(error) => RowKind::Failed(error),
            Ok(LineRead::Complete) => self.decode(),
            Ok(LineRead::Eof) => RowKind::End(self.torn_frame_message()),
            Ok(LineRead::Torn) => RowKind::Torn(self.torn_line_message()),
            Ok(LineRead::TooLong) => RowKind::TooLong,
        };
        RowItem {
            line_no: self.line_no,
            offset_bytes: self.offset_bytes,
            kind,
        }
    }

    /// What a torn last line (just read) is: the zstd frame cut short, or where the line is.
    pub(super) fn torn_line_message(&self) -> String {
        self.torn_frame_message().unwrap_or_else(|| {
            format!(
                "the last line is cut short at byte offset {} (no newline)",
                self.offset_bytes + self.line_len as u64
            )
        })
    }

    fn decode(&mut self) -> RowKind {
        let snapshot = *self
            .snapshot
            .get_or_insert_with(|| first_row_lacks_seq(&self.line));
        let ctx = RowContext {
            version: self.version,
            snapshot,
            skim: self.skim,
        };
        let decoded = decode_row(&self.line, ctx, self.decoded_events);
        self.decoded_events += match &decoded {
            Ok(Decoded::One(_)) => 1,
            Ok(Decoded::Packed(events)) => events.len() as u64,
            Err(_) => 0,
        };
        RowKind::Row { snapshot, decoded }
    }
}

/// The stage: inline, on a thread of its own, or decoding beside a helper thread.
pub(super) enum RowStage<R: Read> {
    Inline(Rows<R>),
    Pipelined(Pipeline),
    Parallel(Parallel<R>),
}

impl<R: Read> RowStage<R> {
    pub(super) fn next_item(&mut self) -> RowItem {
        match self {
            RowStage::Inline(rows) => rows.next_item(),
            RowStage::Pipelined(pipeline) => pipeline.next_item(),
            RowStage::Parallel(parallel) => parallel.next_item(),
        }
    }

    /// The stage decoding its rows on this thread and a helper thread, in chunks of about
    /// `chunk_bytes` of text (`parallel` module), when the log's rows decode independently;
    /// else the stage as it was.
    pub(super) fn parallel(self, chunk_bytes: usize) -> RowStage<R> {
        match self {
            RowStage::Inline(rows) => match Parallel::start(rows, chunk_bytes) {
                Ok(parallel) => RowStage::Parallel(parallel),
                Err(rows) => RowStage::Inline(rows),
            },
            other => other,
        }
    }

    /// The stage moved to a thread of its own (a stage already off the inline path stays as
    /// it is).
    ///
    /// # Panics
    ///
    /// If the operating system cannot start the thread.
    pub(super) fn pipelined(self) -> RowStage<R>
    where
        R: Send + 'static,
    {
        let rows = match self {
            RowStage::Inline(rows) => rows,
            other => return other,
        };
        let (line_no, offset_bytes) = (rows.line_no, rows.offset_bytes);
        let (sender, receiver) = mpsc::sync_channel(PIPELINE_CHUNKS_AHEAD);
        let thread = std::thread::Builder::new()
            .name("sessionlog-rows".into())
            .spawn(move || run_stage(rows, &sender))
            .expect("the row stage's thread starts");
        RowStage::Pipelined(Pipeline {
            receiver: Some(receiver),
            chunk: VecDeque::new(),
            thread: Some(thread),
            line_no,
            offset_bytes,
        })
    }
}

/// Reads and decodes until the end of the input (or a failed read), sending the items in
/// chunks; stops early when the reader is gone.
fn run_stage<R: Read>(mut rows: Rows<R>, sender: &SyncSender<VecDeque<RowItem>>) {
    loop {
        let mut chunk = VecDeque::new();
        let mut text_bytes = 0;
        let last = loop {
            let item = rows.next_item();
            let last = matches!(item.kind, RowKind::End(_) | RowKind::Failed(_));
            text_bytes += rows.line.len() + 1;
            chunk.push_back(item);
            if last || text_bytes >= PIPELINE_CHUNK_BYTES {
                break last;
            }
        };
        if sender.send(chunk).is_err() || last {
            return;
        }
    }
}

/// The admission's side of a pipelined stage.
pub(super) struct Pipeline {
    /// `None` only while dropping, so that the stage sees the reader gone.
    receiver: Option<Receiver<VecDeque<RowItem>>>,
    chunk: VecDeque<RowItem>,
    thread: Option<JoinHandle<()>>,
    /// Where the last item was, for the item that says the stage is gone.
    line_no: u64,
    offset_bytes: u64,
}

impl Pipeline {
    fn next_item(&mut self) -> RowItem {
        loop {
            if let Some(item) = self.chunk.pop_front() {
                self.line_no = item.line_no;
                self.offset_bytes = item.offset_bytes;
                return item;
            }
            match self.receiver.as_ref().map(Receiver::recv) {
                Some(Ok(chunk)) => self.chunk = chunk,
                // The stage ends after its last item, which the reader never reads past; so
                // this is a stage that panicked.
                _ => {
                    return RowItem {
                        line_no: self.line_no,
                        offset_bytes: self.offset_bytes,
                        kind: RowKind::Failed(ReadError::Io(io::Error::other(
                            "the log's row reader stopped",
                        ))),
                    }
                }
            }
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        drop(self.receiver.take());
        self.chunk.clear();
        if let Some(thread) = self.thread.take() {
            // The stage stops at its next send; a panic in it was reported as a failed read.
            let _ = thread.join();
        }
    }
}

fn first_row_lacks_seq(line: &[u8]) -> bool {
    // A row over the value budget is not parsed here; `decode_row` refuses it.
    if crate::budget::check_values(line).is_err() {
        return false;
    }
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(row)) => !row.contains_key("seq") && !row.contains_key("seq0"),
        _ => false,
    }
}

/// Reads one line onto `line` after its first `start` bytes (which are another line's).
fn read_bounded_line(
    source: &mut dyn BufRead,
    line: &mut Vec<u8>,
    start: usize,
) -> io::Result<LineRead> {
    loop {
        let available = match source.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if line.len() == start {
                LineRead::Eof
            } else {
                LineRead::Torn
            });
        }
        match memchr::memchr(b'\n', available) {
            Some(newline_idx) => {
                line.extend_from_slice(&available[..newline_idx]);
                source.consume(newline_idx + 1);
                // The newline may come in the same chunk that takes the row over the limit.
                if line.len() - start > ROW_SIZE_BYTES_MAX {
                    return Ok(LineRead::TooLong);
                }
                return Ok(LineRead::Complete);
            }
            None => {
                let n = available.len();
                line.extend_from_slice(available);
                source.consume(n);
                if line.len() - start > ROW_SIZE_BYTES_MAX {
                    return Ok(LineRead::TooLong);
                }
            }
        }
    }
}
