//! The log reader: header, rows, recovery policy and snapshot mode (spec 3, 9, 18).
//!
//! [`LogReader`] streams events one at a time, so memory stays bounded by one row plus the
//! surface. Every event it yields has passed the stateless rules and the stateful admission of
//! the log's version. Raw `.jsonl` and `.jsonl.zstd` are told apart by the zstd magic, not by
//! the file name.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};

use serde_json::Value;

use self::rows::{LineRead, RowItem, RowKind, RowStage, Rows, Source};
use crate::admission::Admission;
use crate::error::{Fault, ReadError, Rule, Violation};
use crate::event::{Event, EventType};
use crate::frame::{is_zstd, FrameReader, TornFrame};
use crate::header::{is_placeholder, SessionHeader};
use crate::relations::Identity;
use crate::row::Decoded;
use crate::rules::RuleContext;
use crate::version::{newer_version_refusal, FormatVersion, FORMAT_VERSION_NEWEST};

mod parallel;
mod rows;

pub use self::parallel::PARALLEL_CHUNK_BYTES;

/// Largest row this reader accepts.
pub const ROW_SIZE_BYTES_MAX: usize = 64 << 20;

/// What to do with a faulty row (spec 3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Any malformed row, seq gap or torn tail is an error.
    #[default]
    Strict,
    /// The first faulty row and its whole suffix are withheld and recorded, unless a later
    /// decodable `turn/end` proves the suffix was committed; then the fault is fatal.
    Recoverable,
}

/// Whether the input is a normalized recording (spec 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotMode {
    /// Detect it: header placeholders such as `{{cwd}}`, or a first row without `seq`.
    #[default]
    Auto,
    /// Always read as a normalized recording.
    On,
    /// Never: every row must carry `seq` and `time`.
    Off,
}

/// Reader settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOptions {
    pub recovery: Recovery,
    pub snapshot: SnapshotMode,
}

/// A whole log, read by [`read_log`].
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    pub header: SessionHeader,
    pub version: FormatVersion,
    pub snapshot: bool,
    pub compressed: bool,
    pub events: Vec<Event>,
    /// The fault whose row and suffix the recoverable policy withheld.
    pub withheld: Option<Fault>,
}

/// Reads a whole log into memory.
pub fn read_log<R: Read>(input: R, options: ReadOptions) -> Result<Log, ReadError> {
    let mut reader = LogReader::new(input, options)?;
    let mut events = Vec::new();
    while let Some(event) = reader.next_event() {
        events.push(event?);
    }
    Ok(Log {
        header: reader.header().clone(),
        version: reader.version(),
        snapshot: reader.snapshot(),
        compressed: reader.compressed(),
        events,
        withheld: reader.withheld().cloned(),
    })
}

/// The decompressed content of a `.jsonl.zstd` log, with where it ended. [`FrameReader`] is
/// one; a caller may decompress elsewhere (on another thread) and hand the reader the result
/// through [`LogReader::from_frames`].
pub trait FrameSource: Read {
    /// The frame that end of input cut short, once a read has reached the end.
    fn torn(&self) -> Option<TornFrame>;
}

impl<R: Read> FrameSource for FrameReader<R> {
    fn torn(&self) -> Option<TornFrame> {
        FrameReader::torn(self)
    }
}

/// Streams the events of one log.
pub struct LogReader<R: Read> {
    /// The row stage: the log's lines, read and decoded (see the `rows` module).
    rows: RowStage<R>,
    /// The first row, read at the open to decide the snapshot mode, until it is taken.
    first: Option<RowItem>,
    compressed: bool,
    header: SessionHeader,
    version: FormatVersion,
    options: ReadOptions,
    /// Decided from the header, or from the first row in `Auto` mode.
    snapshot: Option<bool>,
    admission: Admission,
    /// The physical line and byte offset of the last item taken from the row stage.
    line_no: u64,
    offset_bytes: u64,
    pending: VecDeque<Event>,
    withheld: Option<Fault>,
    finished: bool,
}

impl<R: Read> LogReader<R> {
    /// Opens a log: detects compression, reads and checks the header.
    pub fn new(input: R, options: ReadOptions) -> Result<LogReader<R>, ReadError> {
        let mut buffered = BufReader::with_capacity(1 << 16, input);
        let compressed = is_zstd(buffered.fill_buf().map_err(ReadError::Io)?);
        let source = if compressed {
            let frames = FrameReader::new(buffered);
            Source::Zstd(Box::new(BufReader::with_capacity(1 << 16, frames)))
        } else {
            Source::Raw(buffered)
        };
        LogReader::with_source(source, options)
    }

    /// Opens a `.jsonl.zstd` log that `frames` decompresses; corruption comes through its reads
    /// as `InvalidData` errors holding a [`FrameCorruption`](crate::frame::FrameCorruption),
    /// as [`FrameReader`] reports it.
    pub fn from_frames(frames: R, options: ReadOptions) -> Result<LogReader<R>, ReadError>
    where
        R: FrameSource,
    {
        let source = Source::Frames(BufReader::with_capacity(1 << 16, frames), R::torn);
        LogReader::with_source(source, options)
    }

    fn with_source(source: Source<R>, options: ReadOptions) -> Result<LogReader<R>, ReadError> {
        let compressed = !matches!(source, Source::Raw(_));
        let mut rows = Rows::new(source);
        let (header, version, mut snapshot) = read_header(&mut rows, options)?;
        rows.start(version, snapshot);
        let line_no = rows.line_no();
        // When neither the options nor the header decide the snapshot mode, the first row
        // does; it is read now, so that `snapshot()` is the log's from the open on (an import
        // creates its session, and a migration its target, in that mode before any event).
        let first = if snapshot.is_none() {
            let item = rows.next_item();
            if let RowKind::Row {
                snapshot: first, ..
            } = item.kind
            {
                snapshot = Some(first);
            }
            Some(item)
        } else {
            None
        };
        Ok(LogReader {
            line_no,
            offset_bytes: 0,
            first,
            rows: RowStage::Inline(rows),
            compressed,
            header,
            version,
            options,
            snapshot,
            admission: Admission::default(),
            pending: VecDeque::new(),
            withheld: None,
            finished: false,
        })
    }

    /// This reader decoding its rows to check them, not to keep them ([`crate::skim`]): every
    /// rule applies and every fault reads as it would, but the packed runs of embedded
    /// streams in the events it yields hold nothing. For a caller that only runs the rules
    /// over the events and drops them (`check`, the checking pass of an import).
    ///
    /// # Panics
    ///
    /// When the row stage has already left the inline path (call it before
    /// [`LogReader::parallel`] or [`LogReader::pipelined`]).
    pub fn skimming(mut self) -> LogReader<R> {
        match &mut self.rows {
            RowStage::Inline(rows) => rows.skim(),
            _ => panic!("LogReader::skimming comes before parallel() or pipelined()"),
        }
        self
    }

    /// This reader with its row stage (reading lines and decoding rows) moved to a thread of
    /// its own, ahead of the admission, which stays on the caller's: on a machine with a core
    /// to spare a log reads in about the time of its slower half (BENCHMARKS.md, "Check").
    /// Every event, fault and line number is the same as read inline; the stage runs at most
    /// two chunks of about 1 MiB of text ahead (a longer row is a chunk of its own).
    /// Not for an input whose reads may block for long (standard input): dropping the reader
    /// waits for the stage's current read.
    pub fn pipelined(self) -> LogReader<R>
    where
        R: Send + 'static,
    {
        LogReader {
            rows: self.rows.pipelined(),
            ..self
        }
    }

    /// This reader with its rows decoded on its own thread and a helper thread, in chunks of
    /// about [`PARALLEL_CHUNK_BYTES`] of text read ahead: where decoding is most of the work (a
    /// V4 `check`) a log reads in about half the time on a machine with a core to spare
    /// (BENCHMARKS.md, "Check"), and a caller busy with other work (a migration) leaves most of
    /// the decoding to the helper, as a pipelined reader would. The lines are still read on the
    /// caller's thread, so any input will do. Every event, fault and line number is the same as
    /// read inline. A log whose rows do not decode independently (packed V0/V1 rows, a
    /// normalized recording) and a reader already pipelined stay as they are, and so does every
    /// reader on a machine with one core.
    pub fn parallel(self) -> LogReader<R> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if cores < 2 {
            return self;
        }
        self.parallel_in_chunks(PARALLEL_CHUNK_BYTES)
    }

    /// Whether the rows are decoded beside a helper thread ([`LogReader::parallel`] took).
    pub fn is_parallel(&self) -> bool {
        matches!(self.rows, RowStage::Parallel(_))
    }

    /// [`LogReader::parallel`] with chunks of about `chunk_bytes` of text, whatever the number
    /// of cores (for tests, which make small chunks to exercise the hand-off).
    pub fn parallel_in_chunks(self, chunk_bytes: usize) -> LogReader<R> {
        LogReader {
            rows: self.rows.parallel(chunk_bytes),
            ..self
        }
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub fn version(&self) -> FormatVersion {
        self.version
    }

    /// Whether the input is read as a normalized recording.
    pub fn snapshot(&self) -> bool {
        self.snapshot.unwrap_or(false)
    }

    pub fn compressed(&self) -> bool {
        self.compressed
    }

    /// The physical line (the header is line 1) of the row that held the last event returned:
    /// for a V0/V1 packed row, every event it stands for shares its line.
    pub fn line(&self) -> u64 {
        self.line_no
    }

    /// The withheld fault, once the reader has ended under the recoverable policy.
    pub fn withheld(&self) -> Option<&Fault> {
        self.withheld.as_ref()
    }

    /// The admission state after the last yielded row.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The next event, `None` at the end (or when the recoverable policy withheld the rest).
    pub fn next_event(&mut self) -> Option<Result<Event, ReadError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.finished {
                return None;
            }
            match self.next_item() {
                RowKind::Row { snapshot, decoded } => {
                    if let Err(fault) = self.process_row(snapshot, decoded) {
                        return self.fail(fault);
                    }
                }
                RowKind::End(torn_frame) => return self.end_of_input(torn_frame),
                RowKind::Torn(message) => return self.torn(message),
                RowKind::TooLong => {
                    let message = format!("row exceeds {ROW_SIZE_BYTES_MAX} bytes");
                    let fault = self.fault(None, Violation::new(Rule::TooLarge, message));
                    return self.fail(fault);
                }
                RowKind::Failed(error) => return self.stop(error),
            }
        }
    }

    /// The row stage's next item; its line and offset become the reader's.
    fn next_item(&mut self) -> RowKind {
        let item = match self.first.take() {
            Some(item) => item,
            None => self.rows.next_item(),
        };
        self.line_no = item.line_no;
        self.offset_bytes = item.offset_bytes;
        item.kind
    }

    fn end_of_input(&mut self, torn_frame: Option<String>) -> Option<Result<Event, ReadError>> {
        self.finished = true;
        if let Some(message) = torn_frame {
            return self.torn(message);
        }
        // The relationships that only the end of a whole log decides (spec 12.2).
        let (seq, violation) = self.admission.finish().err()?;
        let fault = self.fault(Some(seq), violation);
        Some(Err(ReadError::Fault(fault)))
    }

    fn torn(&mut self, message: String) -> Option<Result<Event, ReadError>> {
        self.finished = true;
        let fault = Fault {
            line: self.line_no,
            offset_bytes: self.offset_bytes,
            seq: None,
            rule: Rule::TornTail,
            message,
        };
        match self.options.recovery {
            Recovery::Strict => Some(Err(ReadError::Fault(fault))),
            Recovery::Recoverable => {
                self.withheld = Some(fault);
                None
            }
        }
    }

    fn stop(&mut self, error: ReadError) -> Option<Result<Event, ReadError>> {
        self.finished = true;
        Some(Err(error))
    }

    fn fault(&self, seq: Option<u64>, violation: Violation) -> Fault {
        Fault {
            line: self.line_no,
            offset_bytes: self.offset_bytes,
            seq,
            rule: violation.rule,
            message: violation.message,
        }
    }

    fn fail(&mut self, fault: Fault) -> Option<Result<Event, ReadError>> {
        self.finished = true;
        self.pending.clear();
        if self.options.recovery == Recovery::Strict {
            return Some(Err(ReadError::Fault(fault)));
        }
        match self.later_turn_end() {
            Ok(Some(line)) => {
                let mut fault = fault;
                fault.message = format!(
                    "{} (fatal: the turn/end at line {line} proves the suffix was committed)",
                    fault.message
                );
                Some(Err(ReadError::Fault(fault)))
            }
            Ok(None) => {
                self.withheld = Some(fault);
                None
            }
            Err(error) => Some(Err(error)),
        }
    }

    /// Scans the rest of the input for a row that fully decodes as a `turn/end`.
    fn later_turn_end(&mut self) -> Result<Option<u64>, ReadError> {
        loop {
            match self.next_item() {
                RowKind::Row {
                    decoded: Ok(Decoded::One(event)),
                    ..
                } if event.kind == EventType::TurnEnd => return Ok(Some(self.line_no)),
                RowKind::Row { .. } | RowKind::TooLong => {}
                RowKind::End(_) | RowKind::Torn(_) => return Ok(None),
                RowKind::Failed(ReadError::Fault(_)) => return Ok(None),
                RowKind::Failed(error) => return Err(error),
            }
        }
    }

    fn process_row(
        &mut self,
        snapshot: bool,
        decoded: Result<Decoded, Violation>,
    ) -> Result<(), Fault> {
        self.snapshot.get_or_insert(snapshot);
        if self.admission.next_seq() == 0 {
            self.admission = Admission::new(RuleContext {
                version: self.version,
                snapshot,
            });
            self.admission.set_identity(Identity::of(&self.header));
        }
        match decoded.map_err(|v| self.fault(None, v))? {
            Decoded::One(event) => {
                self.admit(&event)?;
                self.pending.push_back(*event);
            }
            Decoded::Packed(events) => {
                for event in events {
                    self.admit(&event)?;
                    self.pending.push_back(event);
                }
            }
        }
        Ok(())
    }

    fn admit(&mut self, event: &Event) -> Result<(), Fault> {
        self.admission
            .admit(event)
            .map_err(|v| self.fault(Some(event.seq), v))
    }
}

fn header_fault(message: impl Into<String>) -> ReadError {
    ReadError::Fault(Fault {
        line: 1,
        offset_bytes: 0,
        seq: None,
        rule: Rule::Header,
        message: message.into(),
    })
}

/// Reads and checks the header line: the header, its version, and the snapshot mode when the
/// options or the header decide it (`None`: the first row decides).
fn read_header<R: Read>(
    rows: &mut Rows<R>,
    options: ReadOptions,
) -> Result<(SessionHeader, FormatVersion, Option<bool>), ReadError> {
    match rows.read_line()? {
        LineRead::Complete => {}
        LineRead::Eof => return Err(header_fault("the log is empty: no header line")),
        LineRead::Torn => return Err(header_fault("the header line is cut short")),
        LineRead::TooLong => return Err(header_fault("the header line is too large")),
    }
    crate::budget::check_values(rows.line()).map_err(header_fault)?;
    let value: Value = serde_json::from_slice(rows.line())
        .map_err(|e| header_fault(format!("header is not valid JSON: {e}")))?;
    let version = detect_version(&value)?;
    // `Value` keeps the last of two equal keys; the typed rows refuse duplicates, and so
    // does the header.
    serde_json::from_slice::<UniqueMembers>(rows.line())
        .map_err(|e| header_fault(format!("header {e}")))?;
    let header: SessionHeader =
        serde_json::from_value(value).map_err(|e| header_fault(format!("header {e}")))?;
    let placeholders = [
        Some(&header.id),
        header.cwd.as_ref(),
        header.parent_session.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|s| is_placeholder(s));
    let snapshot = match options.snapshot {
        SnapshotMode::On => Some(true),
        SnapshotMode::Off => Some(false),
        SnapshotMode::Auto if placeholders => Some(true),
        SnapshotMode::Auto => None,
    };
    header
        .check(version, snapshot.unwrap_or(false))
        .map_err(header_fault)?;
    Ok((header, version, snapshot))
}

/// The version check runs before any other header rule (spec 9).
fn detect_version(value: &Value) -> Result<FormatVersion, ReadError> {
    let Some(object) = value.as_object() else {
        return Err(header_fault("header must be a JSON object"));
    };
    let id = object.get("id").and_then(Value::as_str).unwrap_or("");
    let Some(raw) = object.get("version") else {
        return Err(header_fault(
            "header has no `version`: this is not a released dsh session log (legacy \
             protocol recordings carry no format version)",
        ));
    };
    let Some(number) = raw.as_u64() else {
        return Err(header_fault(format!(
            "header version must be a non-negative integer, found {raw}"
        )));
    };
    if number > FORMAT_VERSION_NEWEST {
        return Err(ReadError::NewerVersion {
            id: id.to_owned(),
            found: number,
            supported: FORMAT_VERSION_NEWEST,
            message: newer_version_refusal(id, number),
        });
    }
    Ok(FormatVersion::from_number(number).expect("numbers up to the newest version are known"))
}

/// A JSON object whose top-level member names are checked to be distinct (values skipped).
struct UniqueMembers;

impl<'de> serde::Deserialize<'de> for UniqueMembers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(UniqueMembersVisitor)
    }
}

struct UniqueMembersVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueMembersVisitor {
    type Value = UniqueMembers;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<UniqueMembers, A::Error> {
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if seen.iter().any(|k| *k == key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate member `{key}`"
                )));
            }
            seen.push(key.into_owned());
            map.next_value::<serde::de::IgnoredAny>()?;
        }
        Ok(UniqueMembers)
    }
}
