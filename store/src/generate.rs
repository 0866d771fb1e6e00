//! `gen`: write a synthetic V3 (or V2) session to a file (see `sessionlog_format::gen`).

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{Compression, FormatVersion, LogWriter};

use crate::error::Error;

/// What [`generate_file`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generated {
    pub events: u64,
    pub batches: u64,
    pub size_bytes: u64,
}

/// Writes a deterministic, valid session of `version` (V3 or V2) and `options.events` events
/// to `path`, calling `progress` with the number of events written after each batch. The file
/// is created new; an existing file is refused rather than overwritten.
pub fn generate_file(
    path: &Path,
    options: GenOptions,
    version: FormatVersion,
    compression: Compression,
    progress: &mut dyn FnMut(u64),
) -> Result<Generated, Error> {
    let mut generator = Generator::for_version(options, version).map_err(Error::Refused)?;
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let out = BufWriter::with_capacity(1 << 20, file);
    let mut writer =
        LogWriter::new(out, &generator.header(), compression).map_err(|e| Error::io(path, e))?;
    let mut written = Generated {
        events: 0,
        batches: 0,
        size_bytes: 0,
    };
    while let Some(batch) = generator.next_batch() {
        writer.append_batch(&batch).map_err(|source| Error::Write {
            path: path.to_owned(),
            source,
        })?;
        written.events += batch.len() as u64;
        written.batches += 1;
        progress(written.events);
    }
    let out = writer.into_inner().map_err(|e| Error::io(path, e))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(path, e))?;
    written.size_bytes = file.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok(written)
}
