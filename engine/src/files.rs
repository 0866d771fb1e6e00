//! Opening dsh session-log files for reading.
//!
//! Compression is detected from the zstd magic, not the suffix, so a misnamed file still
//! reads; inputs are only ever opened read-only.

use std::fs::File;
use std::path::Path;

use sessionlog_format::{LogReader, ReadOptions};

use crate::error::Error;

/// Opens `path` read-only and reads its header.
pub fn open_log(path: &Path, options: ReadOptions) -> Result<LogReader<File>, Error> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    LogReader::new(file, options).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}
