//! Errors of the engine.

use std::io;
use std::path::PathBuf;

use sessionlog_format::{ReadError, WriteError};

/// An engine operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A log named by path is not a regular file; it is refused before any read (a FIFO with
    /// no writer would block, a device may never end).
    #[error(
        "{path}: a {kind}, not a regular file: refused{}",
        not_a_file_hint(kind)
    )]
    NotAFile { path: PathBuf, kind: &'static str },
    /// A log could not be read; the message names the line and the rule.
    #[error("{path}:{}", read_error_place(.source))]
    Read {
        path: PathBuf,
        #[source]
        source: ReadError,
    },
    /// A log could not be written.
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: WriteError,
    },
    /// The output would overwrite the input, or another refused argument.
    #[error("{0}")]
    Refused(String),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] crate::embedded::StoreError),
}

impl Error {
    /// The error as the store's, for callers that answer in store terms (the server): a
    /// stored session that breaks a rule on replay is `Corrupt`.
    pub fn into_store_error(self) -> crate::embedded::StoreError {
        use crate::embedded::StoreError;
        match self {
            Error::Store(error) => error,
            Error::Refused(reason) => StoreError::Corrupt { reason },
            other => StoreError::Storage(crate::embedded::StorageFailure::caused_by(other)),
        }
    }
}

fn not_a_file_hint(kind: &str) -> &'static str {
    match kind {
        "directory" => "",
        _ => " (to read a pipe or a device, redirect it to standard input and name `-`)",
    }
}

/// Formats a read error as `LINE: message` (CLI.md's `FILE:LINE: message`).
fn read_error_place(error: &ReadError) -> String {
    match error {
        ReadError::Fault(fault) => format!("{}: {}", fault.line, fault_text(fault)),
        ReadError::NewerVersion { message, .. } => format!("1: {message}"),
        ReadError::Io(e) => format!(" read failed: {e}"),
        other => format!(" {other}"),
    }
}

/// A fault's message with its seq and rule, without the line.
pub fn fault_text(fault: &sessionlog_format::Fault) -> String {
    match fault.seq {
        Some(seq) => format!("seq {seq}: {} [{}]", fault.message, fault.rule),
        None => format!("{} [{}]", fault.message, fault.rule),
    }
}

impl Error {
    pub fn io(path: &std::path::Path, source: io::Error) -> Error {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}
