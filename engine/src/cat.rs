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
/// JSONL; returns the number of events written.
pub fn cat_file_as_v3(
    path: &Path,
    snapshot: sessionlog_format::SnapshotMode,
    out: &mut dyn Write,
) -> Result<u64, Error> {
    let (header, events, _) = crate::migrate::read_as_v3(path, snapshot)?;
    let out_error = |e| Error::io(Path::new("<output>"), e);
    let mut line = serde_json::to_vec(&header).expect("a header always serializes");
    line.push(b'\n');
    out.write_all(&line).map_err(out_error)?;
    for event in &events {
        line.clear();
        encode_row(event, sessionlog_format::FormatVersion::V3, &mut line);
        line.push(b'\n');
        out.write_all(&line).map_err(out_error)?;
    }
    out.flush().map_err(out_error)?;
    Ok(events.len() as u64)
}
