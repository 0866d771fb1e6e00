//! Opening dsh session-log files for reading.
//!
//! Compression is detected from the zstd magic, not the suffix, so a misnamed file still
//! reads; inputs are only ever opened read-only. A `.jsonl.zstd` file is decompressed on a
//! second thread while the caller's thread decodes rows, so that a compressed log reads
//! nearly as fast as a raw one on a machine with two cores.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread;

use sessionlog_format::frame::{is_zstd, FrameCorruption, FrameReader, TornFrame, ZSTD_MAGIC};
use sessionlog_format::{FrameSource, LogReader, ReadOptions};

use crate::error::Error;

/// Bytes of decompressed content per message from the decompressing thread.
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks in flight between the threads; bounds the memory at about 1 MiB.
const CHUNKS_IN_FLIGHT_MAX: usize = 4;

/// A log file as the reader sees it: raw bytes, or content decompressed on another thread.
pub enum LogInput {
    Raw(File),
    Zstd(ThreadedFrames),
}

impl Read for LogInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            LogInput::Raw(file) => file.read(buf),
            LogInput::Zstd(frames) => frames.read(buf),
        }
    }
}

impl FrameSource for LogInput {
    fn torn(&self) -> Option<TornFrame> {
        match self {
            LogInput::Raw(_) => None,
            LogInput::Zstd(frames) => frames.torn,
        }
    }
}

/// Opens `path` read-only and reads its header.
pub fn open_log(path: &Path, options: ReadOptions) -> Result<LogReader<LogInput>, Error> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; ZSTD_MAGIC.len()];
    let n_read = read_prefix(&mut file, &mut magic).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(path, e))?;
    let read = if is_zstd(&magic[..n_read]) {
        LogReader::from_frames(LogInput::Zstd(ThreadedFrames::spawn(file)), options)
    } else {
        LogReader::new(LogInput::Raw(file), options)
    };
    read.map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_prefix(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
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
    fn spawn(file: File) -> ThreadedFrames {
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
