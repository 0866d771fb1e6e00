//! The log writer: a header, then one batch of rows per append, raw or one zstd frame per
//! batch (spec 3.2, 19 writer checklist).
//!
//! Every event passes the stateless rules and the stateful admission before any byte of its
//! batch is written, so a rejected batch writes nothing.

use std::io::{self, Write};

use crate::admission::Admission;
use crate::error::Violation;
use crate::event::Event;
use crate::frame::FrameWriter;
use crate::header::SessionHeader;
use crate::relations::Identity;
use crate::row::encode_row;
use crate::rules::RuleContext;
use crate::version::FormatVersion;

/// Whether a log is written as raw JSONL or as `.jsonl.zstd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    Zstd,
}

/// How a log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterOptions {
    pub compression: Compression,
    /// A normalized recording: placeholders are admitted where the spec allows them.
    pub snapshot: bool,
}

/// Why an append was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// An event broke a rule; nothing of the batch was written.
    #[error("seq {seq}: {violation}")]
    Rejected { seq: u64, violation: Violation },
    #[error("write failed")]
    Io(#[from] io::Error),
    /// An earlier write failed, so the output's end is unknown; no further batch is taken.
    #[error("the writer stopped after an earlier write failure")]
    Poisoned,
}

enum Output<W: Write> {
    Raw(W),
    Zstd(FrameWriter<W>),
}

/// Writes one log.
pub struct LogWriter<W: Write> {
    output: Output<W>,
    version: FormatVersion,
    admission: Admission,
    batch: Vec<u8>,
    poisoned: bool,
}

impl<W: Write> LogWriter<W> {
    /// Writes `header` as the first record (its own frame when compressed).
    pub fn new(out: W, header: &SessionHeader, compression: Compression) -> io::Result<Self> {
        LogWriter::with_options(
            out,
            header,
            WriterOptions {
                compression,
                snapshot: false,
            },
        )
    }

    /// Like [`LogWriter::new`]; `options.snapshot` writes a normalized recording, whose rules
    /// admit `{{placeholder}}` values (spec 18).
    pub fn with_options(
        out: W,
        header: &SessionHeader,
        options: WriterOptions,
    ) -> io::Result<Self> {
        let WriterOptions {
            compression,
            snapshot,
        } = options;
        let number = header
            .version
            .unwrap_or(crate::version::FORMAT_VERSION_CURRENT);
        let version = FormatVersion::from_number(number).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot write format v{number}"),
            )
        })?;
        header
            .check(version, snapshot)
            .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, format!("header: {m}")))?;
        let mut writer = LogWriter {
            output: match compression {
                Compression::None => Output::Raw(out),
                Compression::Zstd => Output::Zstd(FrameWriter::new(out)),
            },
            version,
            admission: {
                let mut admission = Admission::new(RuleContext { version, snapshot });
                admission.set_identity(Identity::of(header));
                admission
            },
            batch: Vec::new(),
            poisoned: false,
        };
        serde_json::to_writer(&mut writer.batch, header)?;
        writer.batch.push(b'\n');
        writer.flush_batch()?;
        Ok(writer)
    }

    /// The seq the next appended event must carry.
    pub fn next_seq(&self) -> u64 {
        self.admission.next_seq()
    }

    /// Appends one batch: all its events are admitted first, then written together.
    pub fn append_batch(&mut self, events: &[Event]) -> Result<(), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        self.admission
            .admit_batch(events)
            .map_err(|(event_idx, violation)| WriteError::Rejected {
                seq: events[event_idx].seq,
                violation,
            })?;
        self.batch.clear();
        for event in events {
            encode_row(event, self.version, &mut self.batch);
            self.batch.push(b'\n');
        }
        self.flush_batch()?;
        Ok(())
    }

    fn flush_batch(&mut self) -> io::Result<()> {
        let written = match &mut self.output {
            Output::Raw(out) => out.write_all(&self.batch),
            Output::Zstd(frames) => frames.write_frame(&self.batch).map(|_| ()),
        };
        self.poisoned |= written.is_err();
        written
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(self) -> io::Result<W> {
        let mut out = match self.output {
            Output::Raw(out) => out,
            Output::Zstd(frames) => frames.into_inner(),
        };
        out.flush()?;
        Ok(out)
    }
}
