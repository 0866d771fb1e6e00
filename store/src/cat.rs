//! `cat`: print a log's events as canonical JSONL of its own version.
//!
//! The header comes first, then one row per logical event: V0/V1 packed rows print expanded,
//! provenance prints range-encoded, and unknown members print after the known ones. Reading
//! the output back yields the same events.

use std::io::Write;
use std::path::Path;

use sessionlog_format::row::encode_row;
use sessionlog_format::ReadOptions;

use crate::error::Error;
use crate::files::open_log;

/// Writes `path`'s header and events to `out`; returns the number of events written.
pub fn cat_file(path: &Path, options: ReadOptions, out: &mut dyn Write) -> Result<u64, Error> {
    let mut reader = open_log(path, options)?;
    let version = reader.version();
    let out_error = |e| Error::io(Path::new("<output>"), e);
    let mut line = serde_json::to_vec(reader.header()).expect("a header always serializes");
    line.push(b'\n');
    out.write_all(&line).map_err(out_error)?;
    let mut n_events = 0;
    while let Some(next) = reader.next_event() {
        let event = next.map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        line.clear();
        encode_row(&event, version, &mut line);
        line.push(b'\n');
        out.write_all(&line).map_err(out_error)?;
        n_events += 1;
    }
    out.flush().map_err(out_error)?;
    Ok(n_events)
}

/// Writes `path` migrated to V3 (in memory; nothing is written beside it) as canonical V3
/// JSONL; returns the number of events written. The events stream out batch by batch as the
/// migrator releases them, so memory stays one batch plus the migration's state; a refusal
/// found late therefore comes after the rows before it were printed (as a damaged row does
/// for [`cat_file`]), and is the command's error.
pub fn cat_file_as_v3(
    path: &Path,
    snapshot: sessionlog_format::SnapshotMode,
    out: &mut dyn Write,
) -> Result<u64, Error> {
    let options = ReadOptions {
        recovery: sessionlog_format::Recovery::Strict,
        snapshot,
    };
    let reader = open_log(path, options)?;
    // There is no downgrade edge: a V4 log has no V3 form.
    if reader.version() > sessionlog_format::FormatVersion::V3 {
        return Err(Error::Refused(format!(
            "{}: a {} log has no v3 form (migrations only go up)",
            path.display(),
            reader.version()
        )));
    }
    let open = row_sink(out);
    match crate::migrate::stream(reader, path, true, &mut |_| {}, open)? {
        Ok((_, sink)) => {
            let n_events = sink.n_events;
            sink.out.flush().map_err(out_error)?;
            Ok(n_events)
        }
        Err(refused) => Err(refused.into_error(path)),
    }
}

/// Writes the header once the migration knows it, and makes the sink for the rows.
fn row_sink<'a>(
    out: &'a mut dyn Write,
) -> impl FnOnce(&sessionlog_format::SessionHeader) -> Result<RowSink<'a>, Error> + 'a {
    move |header| {
        let mut line = serde_json::to_vec(header).expect("a header always serializes");
        line.push(b'\n');
        out.write_all(&line).map_err(out_error)?;
        Ok(RowSink {
            out,
            line,
            n_events: 0,
        })
    }
}

fn out_error(e: std::io::Error) -> Error {
    Error::io(Path::new("<output>"), e)
}

/// Writes migrated events as canonical V3 rows.
struct RowSink<'a> {
    out: &'a mut dyn Write,
    line: Vec<u8>,
    n_events: u64,
}

impl crate::migrate::Sink for RowSink<'_> {
    fn take(
        &mut self,
        events: &mut Vec<sessionlog_format::Event>,
        _path: &Path,
    ) -> Result<(), Error> {
        for event in events.drain(..) {
            self.line.clear();
            encode_row(&event, sessionlog_format::FormatVersion::V3, &mut self.line);
            self.line.push(b'\n');
            self.out.write_all(&self.line).map_err(out_error)?;
            self.n_events += 1;
        }
        Ok(())
    }
}
