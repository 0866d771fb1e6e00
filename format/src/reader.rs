//! The log reader: header, rows, recovery policy and snapshot mode (spec 3, 9, 18).
//!
//! [`LogReader`] streams events one at a time, so memory stays bounded by one row plus the
//! surface. Every event it yields has passed the stateless rules and the stateful admission of
//! the log's version. Raw `.jsonl` and `.jsonl.zstd` are told apart by the zstd magic, not by
//! the file name.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};

use serde_json::Value;

use crate::admission::Admission;
use crate::error::{Fault, ReadError, Rule, Violation};
use crate::event::{Event, EventType};
use crate::frame::{is_zstd, FrameCorruption, FrameReader, TornFrame};
use crate::header::{is_placeholder, SessionHeader};
use crate::relations::Identity;
use crate::row::{decode_row, Decoded, RowContext};
use crate::rules::RuleContext;
use crate::version::{newer_version_refusal, FormatVersion, FORMAT_VERSION_NEWEST};

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

enum Source<R: Read> {
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

enum LineRead {
    Complete,
    Torn,
    Eof,
    TooLong,
}

/// Streams the events of one log.
pub struct LogReader<R: Read> {
    source: Source<R>,
    header: SessionHeader,
    version: FormatVersion,
    options: ReadOptions,
    /// Decided from the header, or from the first row in `Auto` mode.
    snapshot: Option<bool>,
    admission: Admission,
    line_no: u64,
    offset_bytes: u64,
    line: Vec<u8>,
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
    /// as `InvalidData` errors holding a [`FrameCorruption`], as [`FrameReader`] reports it.
    pub fn from_frames(frames: R, options: ReadOptions) -> Result<LogReader<R>, ReadError>
    where
        R: FrameSource,
    {
        let source = Source::Frames(BufReader::with_capacity(1 << 16, frames), R::torn);
        LogReader::with_source(source, options)
    }

    fn with_source(source: Source<R>, options: ReadOptions) -> Result<LogReader<R>, ReadError> {
        let mut reader = LogReader {
            source,
            header: SessionHeader::new_v3("", 0),
            version: FormatVersion::V3,
            options,
            snapshot: None,
            admission: Admission::default(),
            line_no: 0,
            offset_bytes: 0,
            line: Vec::new(),
            pending: VecDeque::new(),
            withheld: None,
            finished: false,
        };
        reader.read_header()?;
        Ok(reader)
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
        !matches!(self.source, Source::Raw(_))
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

    fn header_fault(&self, message: impl Into<String>) -> ReadError {
        ReadError::Fault(Fault {
            line: 1,
            offset_bytes: 0,
            seq: None,
            rule: Rule::Header,
            message: message.into(),
        })
    }

    fn read_header(&mut self) -> Result<(), ReadError> {
        match self.read_line()? {
            LineRead::Complete => {}
            LineRead::Eof => return Err(self.header_fault("the log is empty: no header line")),
            LineRead::Torn => return Err(self.header_fault("the header line is cut short")),
            LineRead::TooLong => return Err(self.header_fault("the header line is too large")),
        }
        crate::budget::check_values(&self.line).map_err(|m| self.header_fault(m))?;
        let value: Value = serde_json::from_slice(&self.line)
            .map_err(|e| self.header_fault(format!("header is not valid JSON: {e}")))?;
        let version = self.detect_version(&value)?;
        // `Value` keeps the last of two equal keys; the typed rows refuse duplicates, and so
        // does the header.
        serde_json::from_slice::<UniqueMembers>(&self.line)
            .map_err(|e| self.header_fault(format!("header {e}")))?;
        let header: SessionHeader =
            serde_json::from_value(value).map_err(|e| self.header_fault(format!("header {e}")))?;
        let placeholders = [
            Some(&header.id),
            header.cwd.as_ref(),
            header.parent_session.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|s| is_placeholder(s));
        self.snapshot = match self.options.snapshot {
            SnapshotMode::On => Some(true),
            SnapshotMode::Off => Some(false),
            SnapshotMode::Auto if placeholders => Some(true),
            SnapshotMode::Auto => None,
        };
        header
            .check(version, self.snapshot())
            .map_err(|m| self.header_fault(m))?;
        self.header = header;
        self.version = version;
        Ok(())
    }

    /// The version check runs before any other header rule (spec 9).
    fn detect_version(&self, value: &Value) -> Result<FormatVersion, ReadError> {
        let Some(object) = value.as_object() else {
            return Err(self.header_fault("header must be a JSON object"));
        };
        let id = object.get("id").and_then(Value::as_str).unwrap_or("");
        let Some(raw) = object.get("version") else {
            return Err(self.header_fault(
                "header has no `version`: this is not a released dsh session log (legacy \
                 protocol recordings carry no format version)",
            ));
        };
        let Some(number) = raw.as_u64() else {
            return Err(self.header_fault(format!(
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

    fn read_line(&mut self) -> Result<LineRead, ReadError> {
        self.offset_bytes += self.line_len_consumed();
        self.line.clear();
        let outcome = read_bounded_line(self.source.buf_read(), &mut self.line);
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
            self.line.len() as u64 + 1
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

    /// The next event, `None` at the end (or when the recoverable policy withheld the rest).
    pub fn next_event(&mut self) -> Option<Result<Event, ReadError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.finished {
                return None;
            }
            let read = match self.read_line() {
                Ok(read) => read,
                Err(error) => return self.stop(error),
            };
            match read {
                LineRead::Complete => {}
                LineRead::Eof => return self.end_of_input(),
                LineRead::Torn => {
                    let message = match self.torn_frame_message() {
                        Some(message) => message,
                        None => format!(
                            "the last line is cut short at byte offset {} (no newline)",
                            self.offset_bytes + self.line.len() as u64
                        ),
                    };
                    return self.torn(message);
                }
                LineRead::TooLong => {
                    let message = format!("row exceeds {ROW_SIZE_BYTES_MAX} bytes");
                    let fault = self.fault(None, Violation::new(Rule::TooLarge, message));
                    return self.fail(fault);
                }
            }
            if let Err(fault) = self.process_line() {
                return self.fail(fault);
            }
        }
    }

    fn end_of_input(&mut self) -> Option<Result<Event, ReadError>> {
        self.finished = true;
        if let Some(message) = self.torn_frame_message() {
            return self.torn(message);
        }
        // The relationships that only the end of a whole log decides (spec 12.2).
        let (seq, violation) = self.admission.finish().err()?;
        let fault = self.fault(Some(seq), violation);
        Some(Err(ReadError::Fault(fault)))
    }

    /// Names the zstd frame that ended early, when the input is compressed and did.
    fn torn_frame_message(&self) -> Option<String> {
        let torn = self.source.torn()?;
        Some(format!(
            "end of file inside zstd frame {} (at byte offset {})",
            torn.frame_index, torn.frame_offset_bytes
        ))
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

    /// Scans the rest of the input for a decodable `turn/end` row.
    fn later_turn_end(&mut self) -> Result<Option<u64>, ReadError> {
        loop {
            match self.read_line() {
                Ok(LineRead::Complete) => {
                    if self.is_decodable_turn_end() {
                        return Ok(Some(self.line_no));
                    }
                }
                Ok(LineRead::TooLong) => {}
                Ok(LineRead::Eof | LineRead::Torn) => return Ok(None),
                Err(ReadError::Fault(_)) => return Ok(None),
                Err(error) => return Err(error),
            }
        }
    }

    /// A later row proves the suffix committed only when it fully decodes as a `turn/end`.
    fn is_decodable_turn_end(&self) -> bool {
        let ctx = RowContext {
            version: self.version,
            snapshot: self.snapshot(),
        };
        match decode_row(&self.line, ctx, 0) {
            Ok(Decoded::One(event)) => event.kind == EventType::TurnEnd,
            _ => false,
        }
    }

    fn process_line(&mut self) -> Result<(), Fault> {
        let snapshot = match self.snapshot {
            Some(snapshot) => snapshot,
            None => {
                let detected = first_row_lacks_seq(&self.line);
                self.snapshot = Some(detected);
                detected
            }
        };
        if self.admission.next_seq() == 0 {
            self.admission = Admission::new(RuleContext {
                version: self.version,
                snapshot,
            });
            self.admission.set_identity(Identity::of(&self.header));
        }
        let ctx = RowContext {
            version: self.version,
            snapshot,
        };
        let decoded = decode_row(&self.line, ctx, self.admission.next_seq())
            .map_err(|v| self.fault(None, v))?;
        match decoded {
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

fn read_bounded_line(source: &mut dyn BufRead, line: &mut Vec<u8>) -> io::Result<LineRead> {
    loop {
        let available = match source.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if line.is_empty() {
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
                if line.len() > ROW_SIZE_BYTES_MAX {
                    return Ok(LineRead::TooLong);
                }
                return Ok(LineRead::Complete);
            }
            None => {
                let n = available.len();
                line.extend_from_slice(available);
                source.consume(n);
                if line.len() > ROW_SIZE_BYTES_MAX {
                    return Ok(LineRead::TooLong);
                }
            }
        }
    }
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
