//! Opening dsh session-log files for reading.
//!
//! Compression is detected from the zstd magic, not the suffix, so a misnamed file still
//! reads; inputs are only ever opened read-only. Only regular files are read by name: a FIFO,
//! socket or device is refused before any read (it is opened non-blocking, so a FIFO without a
//! writer cannot hang the open), and a directory is refused too. `-` names standard input
//! ([`crate::stdin`]), which is how a pipe or a device is read on purpose. A `.jsonl.zstd` file is decompressed on a
//! second thread while the caller's thread decodes rows, so that a compressed log reads
//! nearly as fast as a raw one on a machine with two cores.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread;

use sessionlog_format::frame::{is_zstd, FrameCorruption, FrameReader, TornFrame, ZSTD_MAGIC};
use sessionlog_format::{FrameSource, LogReader, ReadOptions};

use crate::error::Error;
use crate::stdin::StdinInput;
use crate::walk::special_kind;

/// The path that names standard input.
pub const STDIN_PATH: &str = "-";

/// Whether `path` names standard input (`-`).
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == STDIN_PATH
}

/// Whether a command argument names a log to read rather than a stored session: `-`, or an
/// existing entry that is not a directory (a FIFO or device counts, so that opening it gives
/// its clear refusal instead of a lookup in the store).
pub fn names_a_file(path: &Path) -> bool {
    is_stdin(path) || std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

/// Bytes of decompressed content per message from the decompressing thread.
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks in flight between the threads; bounds the memory at about 1 MiB.
const CHUNKS_IN_FLIGHT_MAX: usize = 4;

/// A log file as the reader sees it: raw bytes of a file or of standard input, or content
/// decompressed on another thread.
pub enum LogInput {
    Raw(File),
    Stdin(StdinInput),
    Zstd(ThreadedFrames),
}

impl Read for LogInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            LogInput::Raw(file) => file.read(buf),
            LogInput::Stdin(input) => input.read(buf),
            LogInput::Zstd(frames) => frames.read(buf),
        }
    }
}

impl FrameSource for LogInput {
    fn torn(&self) -> Option<TornFrame> {
        match self {
            LogInput::Raw(_) | LogInput::Stdin(_) => None,
            LogInput::Zstd(frames) => frames.torn,
        }
    }
}

/// `reader` with its rows decoded ahead of the admission, for a caller that migrates what it
/// reads: its own thread then has about as much work as the decoding. Where the log's rows
/// decode independently the caller's thread and a helper share the decoding
/// ([`LogReader::parallel`]: the caller's thread decodes a chunk only when the helper has not
/// taken it, so a busy caller leaves most of it to the helper); else the row stage runs on a
/// thread of its own ([`LogReader::pipelined`]), except for standard input, read inline so
/// that a reader dropped early never waits on a read that may block. A caller that appends to
/// the embedded store gains nothing from either, its sealer already taking the second core
/// (BENCHMARKS.md, optimisation logs).
pub fn read_ahead(reader: LogReader<LogInput>, path: &Path) -> LogReader<LogInput> {
    let reader = reader.parallel();
    if reader.is_parallel() || is_stdin(path) {
        reader
    } else {
        reader.pipelined()
    }
}

/// Opens `path` read-only (`-`: standard input) and reads its header.
pub fn open_log(path: &Path, options: ReadOptions) -> Result<LogReader<LogInput>, Error> {
    let read = if is_stdin(path) {
        let mut probe = StdinInput::from_start();
        let mut magic = [0u8; ZSTD_MAGIC.len()];
        let n_read = read_prefix(&mut probe, &mut magic).map_err(|e| Error::io(path, e))?;
        let input = StdinInput::from_start();
        if is_zstd(&magic[..n_read]) {
            let frames = ThreadedFrames::spawn(Box::new(input));
            LogReader::from_frames(LogInput::Zstd(frames), options)
        } else {
            LogReader::new(LogInput::Stdin(input), options)
        }
    } else {
        let mut file = open_regular(path)?;
        let mut magic = [0u8; ZSTD_MAGIC.len()];
        let n_read = read_prefix(&mut file, &mut magic).map_err(|e| Error::io(path, e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(path, e))?;
        if is_zstd(&magic[..n_read]) {
            let frames = ThreadedFrames::spawn(Box::new(file));
            LogReader::from_frames(LogInput::Zstd(frames), options)
        } else {
            LogReader::new(LogInput::Raw(file), options)
        }
    };
    read.map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

/// Opens `path` read-only if it is a regular file (a link is followed), and refuses anything
/// else before reading a byte. `O_NONBLOCK` makes the open of a FIFO return at once even with
/// no writer; reads of a regular file ignore the flag.
fn open_regular(path: &Path) -> Result<File, Error> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let file_type = file.metadata().map_err(|e| Error::io(path, e))?.file_type();
    let kind = match special_kind(file_type) {
        Some(kind) => kind,
        None if file_type.is_dir() => "directory",
        None => return Ok(file),
    };
    Err(Error::NotAFile {
        path: path.to_owned(),
        kind,
    })
}

fn read_prefix(file: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

enum Message {
    Chunk(Vec<u8>),
    End(Option<TornFrame>),
    Failed(io::Error),
}

/// Decompressed content produced by a [`FrameReader`] on its own thread.
pub struct ThreadedFrames {
    receiver: Receiver<Message>,
    chunk: Vec<u8>,
    chunk_pos: usize,
    torn: Option<TornFrame>,
    /// A failure, repeated to every later read (as `FrameReader` does).
    failure: Option<(io::ErrorKind, Option<FrameCorruption>, String)>,
    ended: bool,
}

impl ThreadedFrames {
    fn spawn(file: Box<dyn Read + Send>) -> ThreadedFrames {
        let (sender, receiver) = sync_channel(CHUNKS_IN_FLIGHT_MAX);
        thread::spawn(move || {
            let mut frames = FrameReader::new(BufReader::with_capacity(1 << 16, file));
            loop {
                let mut chunk = vec![0; CHUNK_BYTES];
                let message = match read_prefix_frames(&mut frames, &mut chunk) {
                    Ok(0) => Message::End(frames.torn()),
                    Ok(n) => {
                        chunk.truncate(n);
                        Message::Chunk(chunk)
                    }
                    Err(error) => Message::Failed(error),
                };
                let last = !matches!(message, Message::Chunk(_));
                // The reader hung up: nobody wants the rest.
                if sender.send(message).is_err() || last {
                    return;
                }
            }
        });
        ThreadedFrames {
            receiver,
            chunk: Vec::new(),
            chunk_pos: 0,
            torn: None,
            failure: None,
            ended: false,
        }
    }

    fn repeat_failure(&self) -> Option<io::Error> {
        let (kind, corruption, message) = self.failure.as_ref()?;
        Some(match corruption {
            Some(corruption) => io::Error::new(*kind, corruption.clone()),
            None => io::Error::new(*kind, message.clone()),
        })
    }
}

/// Fills `chunk` as far as the frames go (short only at the end).
fn read_prefix_frames<R: Read>(frames: &mut FrameReader<R>, chunk: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < chunk.len() {
        match frames.read(&mut chunk[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Content before a failure is delivered first: the frame reader repeats the failure
            // on the next call.
            Err(_) if filled > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl Read for ThreadedFrames {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(error) = self.repeat_failure() {
                return Err(error);
            }
            if self.chunk_pos < self.chunk.len() {
                let n = buf.len().min(self.chunk.len() - self.chunk_pos);
                buf[..n].copy_from_slice(&self.chunk[self.chunk_pos..self.chunk_pos + n]);
                self.chunk_pos += n;
                return Ok(n);
            }
            if self.ended {
                return Ok(0);
            }
            match self.receiver.recv() {
                Ok(Message::Chunk(chunk)) => {
                    self.chunk = chunk;
                    self.chunk_pos = 0;
                }
                Ok(Message::End(torn)) => {
                    self.torn = torn;
                    self.ended = true;
                }
                Ok(Message::Failed(error)) => {
                    let corruption = error
                        .get_ref()
                        .and_then(|e| e.downcast_ref::<FrameCorruption>())
                        .cloned();
                    self.failure = Some((error.kind(), corruption, error.to_string()));
                }
                Err(_) => {
                    let message = "the decompressing thread stopped".to_owned();
                    self.failure = Some((io::ErrorKind::BrokenPipe, None, message));
                }
            }
        }
    }
}
