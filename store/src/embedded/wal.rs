//! The store's write-ahead log: what makes an append durable with one `fdatasync` of a
//! preallocated file, overwritten in place, instead of a full B-tree commit.
//!
//! An append group is staged in a redb write transaction, written to the WAL as one frame and
//! synced, then committed to redb without durability (in memory). Every
//! [`DURABLE_BYTES_MAX`] of WAL (and on close) redb makes everything durable with one
//! `Durability::Immediate` commit, after which the WAL restarts: its header takes a new
//! generation and the next frame is written just after it again, over the old frames. Opening
//! a store replays the WAL frames into redb: records already present must be identical,
//! missing ones are inserted.
//!
//! ```text
//! file    := header (block 0) frame* (zeros or stale blocks up to the end of the file)
//! header  := magic "SLWAL\0\0\0" (8) | version u32 = 4 | crc32 of bytes 0..12 u32
//!          | slot | slot                                 (40 bytes, the rest of block 0 unused)
//! slot    := generation u64 | crc32 of the generation u32
//! frame   := block+ (whole 512-byte blocks, starting on a block boundary)
//! block   := generation u64 (the tag) | 504 bytes of the frame's stream
//! stream  := len u32 (> 0) | crc32 of payload u32 | crc32 of len, payload crc, generation u32
//!          | payload (len bytes) | zeros to the end of the last block
//! payload := n_entries u32 | entry*
//! entry   := tag u8 = 1 | session key u64 | seq u64 | record_len u32 | event record
//!          | tag u8 = 2 | record_len u32 | session record
//! ```
//!
//! Why blocks: the medium is assumed to persist an aligned 512-byte block whole or not at all
//! (docs/format.md, "Assumptions about the storage medium"), and every block of a frame
//! carries the generation. A block of the frame being written when the power went that did not
//! reach the medium still holds what was there before: zeros, or a block of an older
//! generation, whose tag is not the current one. A block whose tag is the current generation
//! was written whole by this generation. So the end of the log is told apart exactly:
//!
//! - **torn** (an append never acknowledged, dropped): the frame's first block is not tagged
//!   with the current generation, or one of its blocks is not, or its blocks pass the end of
//!   the file;
//! - **damaged** (reported, never dropped silently): every block of the frame is tagged with
//!   the current generation but a checksum fails or the payload does not parse, or a tag
//!   differs from the generation in at most [`TAG_NEAR_BYTES_MAX`] bytes (a flipped byte of a
//!   tag, not a stale block: generations are chosen so that zeros and the previous generation
//!   differ from the current one in every byte).
//!
//! A damaged frame does not end the log: the frames after it are still read (a valid frame of
//! the current generation after the end is also damage, at the end). A store whose WAL holds a
//! damaged frame opens only read-only (see `Store::open_read_only`), for salvage.
//!
//! Why in place: a frame that only overwrites bytes the file already holds makes its
//! `fdatasync` carry no change of size or allocation. So the file grows by whole steps of
//! written zeros ([`EXTEND_BYTES_MIN`] up to [`EXTEND_BYTES_MAX`], as long as the file so far),
//! and after a restart old frames are overwritten. A restart writes the next generation into
//! the slot of the previous one, so a torn slot leaves the other, whose frames are intact
//! (nothing of the new generation is written before the slot is synced) and already durable
//! in redb.
//!
//! Versions 1 to 3 are still replayed (the `legacy` module), and the header is rewritten as
//! version 4 when the WAL restarts.

mod legacy;
#[cfg(test)]
mod tests;

use crate::types::DamagedFrame;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::StoreError;

const WAL_MAGIC: [u8; 8] = *b"SLWAL\0\0\0";
/// The version this build writes: 4 writes frames as tagged 512-byte blocks.
const WAL_VERSION: u32 = 4;
/// Frames overwritten in place, each carrying the generation in its header.
const WAL_VERSION_V3: u32 = 3;
/// Tagged entries and session creations, frames appended at the end of the file.
const WAL_VERSION_APPENDED: u32 = 2;
/// The version before tags: every entry is an event.
const WAL_VERSION_EVENTS_ONLY: u32 = 1;
const ENTRY_TAG_EVENT: u8 = 1;
const ENTRY_TAG_SESSION: u8 = 2;
/// Magic, version and the crc of both: the whole header up to version 2, and the prefix that
/// a version 2 build reads of a later header (so it answers `UpgradeRequired`).
const HEADER_PREFIX_BYTES: u64 = 8 + 4 + 4;
/// A generation slot: the generation and its crc.
const SLOT_BYTES: u64 = 8 + 4;
/// The header of versions 3 and 4: the prefix and two generation slots; the current
/// generation is the one whose slot holds the other's successor.
pub(crate) const HEADER_BYTES: u64 = HEADER_PREFIX_BYTES + 2 * SLOT_BYTES;
const _: () = assert!(HEADER_PREFIX_BYTES == 16 && HEADER_BYTES == 40);
/// The unit the medium persists whole (version 4).
pub(crate) const BLOCK_BYTES: u64 = 512;
/// Each block's tag: the generation.
const TAG_BYTES: usize = 8;
/// The frame's stream each block carries.
const BLOCK_BODY_BYTES: usize = BLOCK_BYTES as usize - TAG_BYTES;
/// Where the first frame starts: block 1 (block 0 holds the header).
pub(crate) const FRAMES_START_BYTES: u64 = BLOCK_BYTES;
const _: () = assert!(HEADER_BYTES <= FRAMES_START_BYTES && BLOCK_BODY_BYTES == 504);
/// A version 4 frame's stream header: len, payload crc, header crc.
const FRAME_HEADER_BYTES: usize = 4 + 4 + 4;
/// A tag differing from the current generation in at most this many of its 8 bytes is a
/// damaged tag; more, a block never written in this generation.
const TAG_NEAR_BYTES_MAX: usize = 4;
/// Length, crc, generation (version 3).
const FRAME_HEADER_BYTES_V3: usize = 4 + 4 + 8;
/// Length, crc (versions 1 and 2).
const FRAME_HEADER_APPENDED_BYTES: usize = 4 + 4;
/// Where a version 3 frame's generation sits: after its length and crc.
const FRAME_GENERATION_OFFSET_V3: usize = 8;
const _: () = assert!(FRAME_GENERATION_OFFSET_V3 + 8 == FRAME_HEADER_BYTES_V3);
const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4;
/// Largest frame payload: one append group.
pub(crate) const FRAME_BYTES_MAX: usize = 1 << 30;
/// WAL bytes after which redb is made durable and the WAL restarted.
pub(crate) const DURABLE_BYTES_MAX: u64 = 64 << 20;
/// The smallest step the file grows by, so that a tiny store keeps a tiny WAL.
pub(crate) const EXTEND_BYTES_MIN: u64 = 64 << 10;
/// The largest step the file grows by: one zero-filling write and one size change per step.
pub(crate) const EXTEND_BYTES_MAX: u64 = 1 << 20;
const _: () = assert!(EXTEND_BYTES_MIN <= EXTEND_BYTES_MAX && EXTEND_BYTES_MAX < DURABLE_BYTES_MAX);
const _: () = assert!(
    EXTEND_BYTES_MIN.is_multiple_of(BLOCK_BYTES) && EXTEND_BYTES_MAX.is_multiple_of(BLOCK_BYTES)
);
/// What a restart adds to the generation (wrapping), until no byte of it is zero: odd, so that
/// the sequence repeats only after 2^64 restarts, and with every byte set and none 0xff, so
/// that consecutive generations differ in every byte (a stale block of the previous
/// generation is never near the current one) and a generation is not a small number that
/// records are full of (the version 3 corruption scan searches for it).
const GENERATION_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// One record to (re)insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalEntry {
    /// An event record of session `key`.
    Event { key: u64, seq: u64, record: Vec<u8> },
    /// A session record (its key and id are inside it), written on creation.
    Session { record: Vec<u8> },
}

/// What a WAL holds: the entries of its valid frames, in order, and its damaged frames.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    pub(crate) entries: Vec<WalEntry>,
    pub(crate) damaged: Vec<DamagedFrame>,
}

/// An append group's frame, built while the group is staged.
#[derive(Debug, Default)]
pub(crate) struct FrameBuilder {
    payload: Vec<u8>,
    n_entries: u32,
}

impl FrameBuilder {
    /// Logs an event record of session `key` (how the tests build frames).
    #[cfg(test)]
    pub(crate) fn push(&mut self, key: u64, seq: u64, record: &[u8]) {
        let pushed = self.push_with(key, seq, |out| {
            out.extend_from_slice(record);
            Ok::<(), std::convert::Infallible>(())
        });
        let Ok(((), _)) = pushed;
    }

    /// Logs an event record of session `key` that `encode` appends to the payload in place
    /// (no copy of it is made); returns what `encode` returned and the record. When `encode`
    /// fails, the frame is left as it was.
    pub(crate) fn push_with<T, E>(
        &mut self,
        key: u64,
        seq: u64,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<T, E>,
    ) -> Result<(T, &[u8]), E> {
        let entry_start = self.payload.len();
        if self.payload.is_empty() {
            self.payload.extend_from_slice(&0u32.to_le_bytes());
        }
        self.payload.push(ENTRY_TAG_EVENT);
        self.payload.extend_from_slice(&key.to_le_bytes());
        self.payload.extend_from_slice(&seq.to_le_bytes());
        self.payload.extend_from_slice(&0u32.to_le_bytes());
        let record_start = self.payload.len();
        let encoded = match encode(&mut self.payload) {
            Ok(encoded) => encoded,
            Err(error) => {
                self.payload.truncate(entry_start);
                return Err(error);
            }
        };
        let record_len =
            u32::try_from(self.payload.len() - record_start).expect("records are at most 64 MiB");
        self.payload[record_start - 4..record_start].copy_from_slice(&record_len.to_le_bytes());
        self.n_entries += 1;
        Ok((encoded, &self.payload[record_start..]))
    }

    /// Logs a session creation: its session record.
    pub(crate) fn push_session(&mut self, record: &[u8]) {
        if self.payload.is_empty() {
            self.payload.extend_from_slice(&0u32.to_le_bytes());
        }
        let record_len = u32::try_from(record.len()).expect("session records are small");
        self.payload.push(ENTRY_TAG_SESSION);
        self.payload.extend_from_slice(&record_len.to_le_bytes());
        self.payload.extend_from_slice(record);
        self.n_entries += 1;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n_entries == 0
    }

    /// The payload's length so far: where the next entry starts.
    pub(crate) fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// The payload from `start` (a length [`FrameBuilder::payload_len`] gave) to its end.
    pub(crate) fn payload_from(&self, start: usize) -> &[u8] {
        &self.payload[start..]
    }

    pub(crate) fn len_bytes(&self) -> usize {
        self.payload.len() + FRAME_HEADER_BYTES
    }

    /// The frame's blocks under `generation`, written over `blocks`: the stream (header and
    /// payload) cut into block bodies, each after the generation's tag, the last padded with
    /// zeros.
    fn finish_into(&mut self, generation: u64, blocks: &mut Vec<u8>) {
        assert!(self.n_entries > 0, "an empty group writes no frame");
        self.payload[..4].copy_from_slice(&self.n_entries.to_le_bytes());
        let len = u32::try_from(self.payload.len()).expect("frames are bounded by FRAME_BYTES_MAX");
        assert!(len > 0, "a zero len is never a frame");
        let header = frame_header(len, crc32fast::hash(&self.payload), generation);
        let stream_len = FRAME_HEADER_BYTES + self.payload.len();
        let n_blocks = stream_len.div_ceil(BLOCK_BODY_BYTES);
        blocks.clear();
        blocks.reserve(n_blocks * BLOCK_BYTES as usize);
        for block_idx in 0..n_blocks {
            blocks.extend_from_slice(&generation.to_le_bytes());
            let body_start = blocks.len();
            // The block's part of the stream, `from..to`: the header's bytes, then the
            // payload's.
            let from = block_idx * BLOCK_BODY_BYTES;
            let to = (from + BLOCK_BODY_BYTES).min(stream_len);
            if from < FRAME_HEADER_BYTES {
                blocks.extend_from_slice(&header[from..to.min(FRAME_HEADER_BYTES)]);
            }
            let payload_from = from.max(FRAME_HEADER_BYTES) - FRAME_HEADER_BYTES;
            blocks.extend_from_slice(&self.payload[payload_from..to - FRAME_HEADER_BYTES]);
            blocks.resize(body_start + BLOCK_BODY_BYTES, 0);
        }
        assert_eq!(blocks.len() as u64 % BLOCK_BYTES, 0);
    }
}

/// A frame's stream header: `len | crc32 of payload | crc32 of (len, payload crc, generation)`.
fn frame_header(len: u32, payload_crc: u32, generation: u64) -> [u8; FRAME_HEADER_BYTES] {
    let mut header = [0; FRAME_HEADER_BYTES];
    header[..4].copy_from_slice(&len.to_le_bytes());
    header[4..8].copy_from_slice(&payload_crc.to_le_bytes());
    let mut covered = [0; 16];
    covered[..8].copy_from_slice(&header[..8]);
    covered[8..].copy_from_slice(&generation.to_le_bytes());
    header[8..].copy_from_slice(&crc32fast::hash(&covered).to_le_bytes());
    header
}

/// The generation after `generation`: plus [`GENERATION_STEP`] (wrapping) until no byte is
/// zero, so that a zeroed block is never near a tag.
fn next_generation(generation: u64) -> u64 {
    let mut next = generation.wrapping_add(GENERATION_STEP);
    while next.to_le_bytes().contains(&0) {
        next = next.wrapping_add(GENERATION_STEP);
    }
    next
}

/// The file under a WAL: a `std::fs::File`, or a double that injects faults (the fault
/// position suite, RELIABILITY.md). Every method is one I/O operation.
pub trait WalFile: Send {
    /// The whole file.
    fn read_all(&mut self) -> io::Result<Vec<u8>>;
    /// Writes `bytes` at `offset`, over what the file holds there and extending it past its end.
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Makes the data durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Makes the data and the length durable (`fsync`).
    fn sync_all(&mut self) -> io::Result<()>;
}

impl WalFile for File {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.seek(SeekFrom::Start(0))?;
        self.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.seek(SeekFrom::Start(offset))?;
        self.write_all(bytes)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&mut self) -> io::Result<()> {
        File::sync_all(self)
    }
}

/// The open WAL file.
pub(crate) struct Wal {
    file: Box<dyn WalFile>,
    path: PathBuf,
    /// The version of the file's header; an older one is rewritten when the WAL restarts.
    version: u32,
    /// The header's generation (versions 3 and 4): a block of another generation is stale.
    generation: u64,
    /// The header slot (0 or 1) that holds `generation`; a restart writes the other.
    slot_idx: u64,
    /// The end of the log, where the next frame goes.
    end_bytes: u64,
    /// The file's length; past `end_bytes` it holds zeros and stale blocks.
    file_len_bytes: u64,
    /// The frame the last append wrote, while redb may still refuse it (a session creation's
    /// commit; an append group's records take no redb commit on its path).
    last_frame: Option<WrittenFrame>,
    /// The buffers of the last frame, kept for the next one ([`Wal::frame`]) so that an
    /// append's frame is built in memory already mapped (up to [`SPARE_BYTES_MAX`] each).
    spare_payload: Vec<u8>,
    spare_blocks: Vec<u8>,
}

/// The largest frame buffer a WAL keeps for the next frame.
const SPARE_BYTES_MAX: usize = 8 << 20;

/// Where a frame was written, and what is needed to take it back.
#[derive(Debug, Clone, Copy)]
struct WrittenFrame {
    offset_bytes: u64,
    /// The frame and the zeros after it that grew the file.
    written_end_bytes: u64,
    file_len_before_bytes: u64,
}

/// The WAL path of a store file: `<store>.wal`.
pub fn wal_path(store_path: &Path) -> PathBuf {
    let mut name = store_path.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

fn storage(path: &Path, error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    let message = format!("{}: {error}", path.display());
    StoreError::Storage(super::StorageFailure::with_source(message, error))
}

/// Reads the WAL at `path` without changing or creating anything: what a read-only open
/// replays in memory. A missing file holds nothing.
pub(crate) fn read(path: &Path) -> Result<Replay, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Replay::default()),
        Err(e) => return Err(storage(path, e)),
    };
    if bytes.is_empty() {
        return Ok(Replay::default());
    }
    let header = check_header(path, &bytes)?;
    let (replay, _) = parse_log(path, &bytes, header)?;
    Ok(replay)
}

/// Parses the log of any version this build reads: the replay and the end of the log.
fn parse_log(path: &Path, bytes: &[u8], header: Header) -> Result<(Replay, u64), StoreError> {
    match header.version {
        WAL_VERSION => Ok(parse_frames(bytes, header.generation)),
        WAL_VERSION_V3 => {
            let (entries, end) = legacy::parse_frames_v3(path, bytes, header.generation)?;
            Ok((
                Replay {
                    entries,
                    damaged: Vec::new(),
                },
                end,
            ))
        }
        version => {
            let (entries, end) = legacy::parse_frames_appended(path, bytes, version)?;
            Ok((
                Replay {
                    entries,
                    damaged: Vec::new(),
                },
                end,
            ))
        }
    }
}

impl Wal {
    /// Opens (or creates) the WAL and returns what to replay. The file is not changed: the
    /// restart after the replay makes the rest of it stale. A WAL with a damaged frame is
    /// opened too; the store then refuses to write (and never restarts it).
    pub(crate) fn open(path: &Path) -> Result<(Wal, Replay), StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| storage(path, e))?;
        Wal::open_file(path, Box::new(file))
    }

    /// Opens the WAL held by `file`; `path` names it in errors.
    pub(crate) fn open_file(
        path: &Path,
        mut file: Box<dyn WalFile>,
    ) -> Result<(Wal, Replay), StoreError> {
        let bytes = file.read_all().map_err(|e| storage(path, e))?;
        let mut wal = Wal {
            file,
            path: path.to_owned(),
            version: WAL_VERSION,
            generation: 0,
            slot_idx: 1,
            end_bytes: 0,
            file_len_bytes: bytes.len() as u64,
            last_frame: None,
            spare_payload: Vec::new(),
            spare_blocks: Vec::new(),
        };
        if bytes.is_empty() {
            wal.write_new_header(GENERATION_STEP)?;
            return Ok((wal, Replay::default()));
        }
        let header = check_header(path, &bytes)?;
        let (replay, end_bytes) = parse_log(path, &bytes, header)?;
        wal.version = header.version;
        wal.generation = header.generation;
        wal.slot_idx = header.slot_idx;
        wal.end_bytes = end_bytes.min(wal.file_len_bytes);
        Ok((wal, replay))
    }

    /// Writes a version 4 header of `generation` (in slot 1) over an emptied file.
    fn write_new_header(&mut self, generation: u64) -> Result<(), StoreError> {
        let header = encode_new_header(generation);
        self.file.set_len(0).map_err(|e| storage(&self.path, e))?;
        self.file_len_bytes = 0;
        self.file
            .write_all_at(0, &header)
            .map_err(|e| storage(&self.path, e))?;
        self.file.sync_all().map_err(|e| storage(&self.path, e))?;
        self.file_len_bytes = HEADER_BYTES;
        self.end_bytes = FRAMES_START_BYTES;
        self.version = WAL_VERSION;
        self.generation = generation;
        self.slot_idx = 1;
        Ok(())
    }

    /// Bytes of frames since the WAL last restarted.
    pub(crate) fn frames_len_bytes(&self) -> u64 {
        let start = match self.version {
            WAL_VERSION => FRAMES_START_BYTES,
            WAL_VERSION_V3 => HEADER_BYTES,
            _ => HEADER_PREFIX_BYTES,
        };
        self.end_bytes.saturating_sub(start)
    }

    /// Writes a group's frame at the end of the log and syncs it; when it passes the end of
    /// the file, zeros after it grow the file by whole steps in the same write. On failure
    /// the frame is invalidated (and the file cut back), so that a failed append can never be
    /// replayed.
    /// An empty frame, in the buffer the last one was built in.
    pub(crate) fn frame(&mut self) -> FrameBuilder {
        let mut payload = std::mem::take(&mut self.spare_payload);
        payload.clear();
        FrameBuilder {
            payload,
            n_entries: 0,
        }
    }

    pub(crate) fn append(&mut self, mut frame: FrameBuilder) -> Result<(), StoreError> {
        assert_eq!(self.version, WAL_VERSION, "an older WAL restarts on open");
        assert!(
            self.end_bytes.is_multiple_of(BLOCK_BYTES),
            "frames start on a block"
        );
        if frame.len_bytes() > FRAME_BYTES_MAX {
            return Err(StoreError::storage_message(format!(
                "an append group of {} bytes exceeds the WAL frame limit of {FRAME_BYTES_MAX}",
                frame.len_bytes()
            )));
        }
        let mut bytes = std::mem::take(&mut self.spare_blocks);
        frame.finish_into(self.generation, &mut bytes);
        if frame.payload.capacity() <= SPARE_BYTES_MAX {
            self.spare_payload = frame.payload;
        }
        let offset_bytes = self.end_bytes;
        let frame_end_bytes = offset_bytes + bytes.len() as u64;
        if frame_end_bytes > self.file_len_bytes {
            let len_bytes = extended_len_bytes(frame_end_bytes, self.file_len_bytes);
            let padded = usize::try_from(len_bytes - offset_bytes).expect("frames are bounded");
            bytes.resize(padded, 0);
        }
        let written = WrittenFrame {
            offset_bytes,
            written_end_bytes: offset_bytes + bytes.len() as u64,
            file_len_before_bytes: self.file_len_bytes,
        };
        let result = self
            .file
            .write_all_at(offset_bytes, &bytes)
            .and_then(|()| self.file.sync_data());
        if bytes.capacity() <= SPARE_BYTES_MAX {
            self.spare_blocks = bytes;
        }
        if let Err(error) = result {
            // Best effort: the store is poisoned either way.
            let _ = self.invalidate(written);
            return Err(storage(&self.path, error));
        }
        self.end_bytes = frame_end_bytes;
        self.file_len_bytes = self.file_len_bytes.max(written.written_end_bytes);
        self.last_frame = Some(written);
        assert!(self.end_bytes <= self.file_len_bytes);
        Ok(())
    }

    /// Invalidates the frame of the last append, a session creation that redb refused to
    /// commit (so it was never acknowledged): it is never replayed.
    pub(crate) fn invalidate_last_frame(&mut self) -> io::Result<()> {
        let written = self
            .last_frame
            .take()
            .expect("a frame is invalidated right after its append");
        self.invalidate(written)
    }

    /// Zeroes a frame that was (or may have been) written, which ends the log there and leaves
    /// no block of it tagged (so a later frame torn over it is still a torn tail), and cuts
    /// the file back if the write grew it; then syncs.
    fn invalidate(&mut self, written: WrittenFrame) -> io::Result<()> {
        self.end_bytes = written.offset_bytes;
        self.last_frame = None;
        let zeroed_end = written.written_end_bytes.min(written.file_len_before_bytes);
        let zeroed = if written.offset_bytes < zeroed_end {
            let len = usize::try_from(zeroed_end - written.offset_bytes).expect("bounded frames");
            self.file.write_all_at(written.offset_bytes, &vec![0; len])
        } else {
            // The frame began at the old end of the file: the cut removes all of it.
            Ok(())
        };
        let cut = if written.written_end_bytes > written.file_len_before_bytes {
            let cut = self.file.set_len(written.file_len_before_bytes);
            if cut.is_ok() {
                self.file_len_bytes = written.file_len_before_bytes;
            }
            cut
        } else {
            Ok(())
        };
        zeroed.and(cut).and_then(|()| self.file.sync_all())
    }

    /// Empties the WAL after redb made everything in it durable: a new generation makes every
    /// block in the file stale, and the next frame goes just after the header again. The new
    /// generation goes into the previous one's slot and is synced before any frame of it is
    /// written, so a torn slot leaves the current one and its intact frames.
    pub(crate) fn restart(&mut self) -> Result<(), StoreError> {
        self.last_frame = None;
        if self.version != WAL_VERSION {
            // An older WAL, now replayed: frames are written in this build's version only.
            return self.write_new_header(GENERATION_STEP);
        }
        let generation = next_generation(self.generation);
        let slot_idx = 1 - self.slot_idx;
        self.file
            .write_all_at(slot_offset_bytes(slot_idx), &encode_slot(generation))
            .and_then(|()| self.file.sync_data())
            .map_err(|e| storage(&self.path, e))?;
        self.generation = generation;
        self.slot_idx = slot_idx;
        self.end_bytes = FRAMES_START_BYTES;
        Ok(())
    }

    /// Whether the file is this build's header and nothing else, as a clean close leaves it
    /// ([`Wal::cut_to_header`]): no frame of any generation, so a restart would make nothing
    /// stale.
    pub(crate) fn holds_only_its_header(&self) -> bool {
        self.version == WAL_VERSION && self.file_len_bytes == HEADER_BYTES
    }

    /// Takes up a WAL that holds only its header as it is, without the restart's write: the
    /// next frame goes where a restart would put it, in the header's generation, which no
    /// frame in the file carries.
    pub(crate) fn resume_empty(&mut self) {
        assert!(
            self.holds_only_its_header(),
            "only a WAL without frames resumes"
        );
        self.last_frame = None;
        self.end_bytes = FRAMES_START_BYTES;
    }

    /// Cuts an empty WAL (right after a restart) back to its header, so that a closed store
    /// keeps no preallocated zeros on disk.
    pub(crate) fn cut_to_header(&mut self) -> Result<(), StoreError> {
        assert_eq!(
            self.end_bytes, FRAMES_START_BYTES,
            "only an empty WAL is cut"
        );
        self.file
            .set_len(HEADER_BYTES)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| storage(&self.path, e))?;
        self.file_len_bytes = HEADER_BYTES;
        Ok(())
    }
}

/// The length to grow the file to so that a frame ending at `frame_end_bytes` fits: a whole
/// number of steps, each as long as the file so far within [`EXTEND_BYTES_MIN`] and
/// [`EXTEND_BYTES_MAX`].
fn extended_len_bytes(frame_end_bytes: u64, file_len_bytes: u64) -> u64 {
    let step_bytes = file_len_bytes.clamp(EXTEND_BYTES_MIN, EXTEND_BYTES_MAX);
    let len_bytes = frame_end_bytes.div_ceil(step_bytes) * step_bytes;
    assert!(len_bytes >= frame_end_bytes);
    assert!(len_bytes > file_len_bytes);
    len_bytes
}

/// A new version 4 header: `generation` in slot 1, a generation it succeeds in slot 0.
fn encode_new_header(generation: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_BYTES as usize);
    header.extend_from_slice(&WAL_MAGIC);
    header.extend_from_slice(&WAL_VERSION.to_le_bytes());
    header.extend_from_slice(&crc32fast::hash(&header).to_le_bytes());
    header.extend_from_slice(&encode_slot(generation.wrapping_sub(GENERATION_STEP)));
    header.extend_from_slice(&encode_slot(generation));
    assert_eq!(header.len() as u64, HEADER_BYTES);
    header
}

/// A generation slot: `generation u64 | crc32 of it u32`.
fn encode_slot(generation: u64) -> [u8; SLOT_BYTES as usize] {
    let mut slot = [0; SLOT_BYTES as usize];
    slot[..8].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32fast::hash(&slot[..8]);
    slot[8..].copy_from_slice(&crc.to_le_bytes());
    slot
}

/// Where slot 0 or 1 sits in the header.
fn slot_offset_bytes(slot_idx: u64) -> u64 {
    assert!(slot_idx < 2);
    HEADER_PREFIX_BYTES + slot_idx * SLOT_BYTES
}

/// The generation in slot `slot_idx` of a whole header, if its crc holds.
fn decode_slot(header: &[u8], slot_idx: u64) -> Option<u64> {
    let start = slot_offset_bytes(slot_idx) as usize;
    let slot = header.get(start..start + SLOT_BYTES as usize)?;
    let stored_crc = u32::from_le_bytes(slot[8..].try_into().ok()?);
    (crc32fast::hash(&slot[..8]) == stored_crc)
        .then(|| u64::from_le_bytes(slot[..8].try_into().expect("8 bytes")))
}

/// What a header says.
#[derive(Debug, Clone, Copy)]
struct Header {
    version: u32,
    /// Zero before version 3.
    generation: u64,
    /// The slot that holds `generation` (versions 3 and 4).
    slot_idx: u64,
}

/// Whether `next` succeeds `generation` in a header of `version`: version 3 added the step
/// once; version 4 also skips generations with a zero byte. A new header's slot 0 holds the
/// generation minus one step.
fn follows(version: u32, generation: u64, next: u64) -> bool {
    next == generation.wrapping_add(GENERATION_STEP)
        || (version == WAL_VERSION && next == next_generation(generation))
}

/// Checks the header and returns the WAL's version (1 to 4) and generation.
fn check_header(path: &Path, bytes: &[u8]) -> Result<Header, StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        reason: format!("{}: WAL header: {reason}", path.display()),
    };
    if bytes.len() < HEADER_PREFIX_BYTES as usize {
        return Err(corrupt("too short"));
    }
    if bytes[..8] != WAL_MAGIC {
        return Err(corrupt("bad magic"));
    }
    let stored_crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4-byte field"));
    if crc32fast::hash(&bytes[..12]) != stored_crc {
        return Err(corrupt("checksum mismatch"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4-byte field"));
    if version > WAL_VERSION {
        return Err(StoreError::UpgradeRequired {
            found: version,
            supported: WAL_VERSION,
        });
    }
    if version < WAL_VERSION_EVENTS_ONLY {
        return Err(corrupt(&format!("unknown version {version}")));
    }
    if version < WAL_VERSION_V3 {
        return Ok(Header {
            version,
            generation: 0,
            slot_idx: 1,
        });
    }
    let header = bytes
        .get(..HEADER_BYTES as usize)
        .ok_or_else(|| corrupt("too short for its generation slots"))?;
    let (generation, slot_idx) = match (decode_slot(header, 0), decode_slot(header, 1)) {
        (Some(zero), Some(one)) if follows(version, zero, one) => (one, 1),
        (Some(zero), Some(one)) if follows(version, one, zero) => (zero, 0),
        (Some(_), Some(_)) => return Err(corrupt("the generation slots disagree")),
        (Some(zero), None) => (zero, 0),
        (None, Some(one)) => (one, 1),
        (None, None) => return Err(corrupt("both generation slots fail their checksum")),
    };
    // One slot failing its crc is a restart torn before its sync, when nothing of the next
    // generation was written yet; a frame of it where the log starts means the slot was
    // damaged afterwards.
    let one_slot_failed = decode_slot(header, 1 - slot_idx).is_none();
    let next_written = if version == WAL_VERSION {
        let next = next_generation(generation);
        block_tag(bytes, FRAMES_START_BYTES as usize) == Some(next)
    } else {
        let next = generation.wrapping_add(GENERATION_STEP);
        legacy::frame_v3_at(bytes, HEADER_BYTES as usize, next).is_some()
    };
    if one_slot_failed && next_written {
        return Err(corrupt("the slot of the current generation is damaged"));
    }
    Ok(Header {
        version,
        generation,
        slot_idx,
    })
}

/// The tag of the block at `offset`, if the file holds the whole block.
fn block_tag(bytes: &[u8], offset: usize) -> Option<u64> {
    let block = bytes.get(offset..offset.checked_add(BLOCK_BYTES as usize)?)?;
    Some(u64::from_le_bytes(block[..TAG_BYTES].try_into().ok()?))
}

/// How a block's tag stands to the current generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Current,
    /// A damaged tag: near the generation.
    Near,
    /// A block not written in this generation.
    Foreign,
}

fn classify_tag(tag: u64, generation: u64) -> Tag {
    if tag == generation {
        return Tag::Current;
    }
    let differing = tag
        .to_le_bytes()
        .iter()
        .zip(generation.to_le_bytes())
        .filter(|(a, b)| **a != *b)
        .count();
    if differing <= TAG_NEAR_BYTES_MAX {
        Tag::Near
    } else {
        Tag::Foreign
    }
}

/// What the WAL holds at a frame's start.
#[derive(Debug)]
enum FrameAt {
    Valid {
        entries: Vec<WalEntry>,
        end: usize,
    },
    /// Written in this generation, and damaged; `end` is where the next frame starts, when the
    /// damaged frame's length can be trusted.
    Damaged {
        end: Option<usize>,
        reason: String,
        payload: Option<Vec<u8>>,
    },
    /// A torn frame, or bytes never written in this generation: the end of the log.
    End,
}

/// Reads the version 4 frame at `offset` (a block boundary).
fn frame_at(bytes: &[u8], offset: usize, generation: u64) -> FrameAt {
    let damaged = |end, reason: &str, payload| FrameAt::Damaged {
        end,
        reason: reason.to_owned(),
        payload,
    };
    let Some(tag) = block_tag(bytes, offset) else {
        return FrameAt::End;
    };
    if classify_tag(tag, generation) == Tag::Foreign {
        return FrameAt::End;
    }
    // A near tag is read on as current: the header's crc covers the generation itself.
    let body = &bytes[offset + TAG_BYTES..offset + BLOCK_BYTES as usize];
    let len = u32::from_le_bytes(body[..4].try_into().expect("4 bytes"));
    let payload_crc = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes"));
    if frame_header(len, payload_crc, generation) != body[..FRAME_HEADER_BYTES] || len == 0 {
        let payload = stream_after_damaged_header(bytes, offset, generation);
        return damaged(None, "its header fails its checksum", Some(payload));
    }
    let len = len as usize;
    if len > FRAME_BYTES_MAX {
        return damaged(None, "its length passes the frame limit", None);
    }
    let n_blocks = (FRAME_HEADER_BYTES + len).div_ceil(BLOCK_BODY_BYTES);
    let end = offset + n_blocks * BLOCK_BYTES as usize;
    if end > bytes.len() {
        // Cut short by the end of the file: the write that grew the file was torn.
        return FrameAt::End;
    }
    let mut stream = Vec::with_capacity(n_blocks * BLOCK_BODY_BYTES);
    let mut near_tag = false;
    for block in bytes[offset..end].chunks_exact(BLOCK_BYTES as usize) {
        let tag = u64::from_le_bytes(block[..TAG_BYTES].try_into().expect("8 bytes"));
        match classify_tag(tag, generation) {
            Tag::Current => {}
            Tag::Near => near_tag = true,
            // A block of the frame never reached the medium.
            Tag::Foreign => return FrameAt::End,
        }
        stream.extend_from_slice(&block[TAG_BYTES..]);
    }
    let payload = stream[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len].to_vec();
    if near_tag {
        return damaged(
            Some(end),
            "a block's generation tag is damaged",
            Some(payload),
        );
    }
    if crc32fast::hash(&payload) != payload_crc {
        return damaged(Some(end), "its payload fails its checksum", Some(payload));
    }
    match parse_entries(&payload, WAL_VERSION) {
        Some(entries) => FrameAt::Valid { entries, end },
        None => damaged(Some(end), "its payload does not parse", Some(payload)),
    }
}

/// The payload of a frame whose header is damaged, as far as it can be told: the stream of the
/// blocks from `offset` on that were written in this generation, after the header's bytes
/// (its entries' own layout then says where they end).
fn stream_after_damaged_header(bytes: &[u8], offset: usize, generation: u64) -> Vec<u8> {
    /// The longest stretch read: the payloads of append groups are far smaller.
    const GUESS_BYTES_MAX: usize = 8 << 20;
    let mut stream = Vec::new();
    let mut at = offset;
    while stream.len() < GUESS_BYTES_MAX {
        match block_tag(bytes, at).map(|tag| classify_tag(tag, generation)) {
            Some(Tag::Current | Tag::Near) => {}
            _ => break,
        }
        stream.extend_from_slice(&bytes[at + TAG_BYTES..at + BLOCK_BYTES as usize]);
        at += BLOCK_BYTES as usize;
    }
    stream.split_off(FRAME_HEADER_BYTES.min(stream.len()))
}

/// Parses a version 4 log: the entries of every valid frame of `generation` from block 1 on,
/// the damaged frames, and the end of the log (where the next frame goes).
fn parse_frames(bytes: &[u8], generation: u64) -> (Replay, u64) {
    let mut replay = Replay::default();
    let mut offset = FRAMES_START_BYTES as usize;
    let mut frame_idx = 0;
    loop {
        let (next, damage) = match frame_at(bytes, offset, generation) {
            FrameAt::Valid { entries, end } => {
                replay.entries.extend(entries);
                (Some(end), None)
            }
            FrameAt::Damaged {
                end,
                reason,
                payload,
            } => {
                let next = end.or_else(|| find_frame_after(bytes, offset, generation));
                (next, Some((reason, payload)))
            }
            FrameAt::End => match find_frame_after(bytes, offset, generation) {
                // Frames are written in order: a valid frame later means this was one too.
                Some(later) => (
                    Some(later),
                    Some((
                        format!(
                            "it is not a frame, but a valid frame follows at byte offset {later}"
                        ),
                        None,
                    )),
                ),
                None => (None, None),
            },
        };
        if let Some((reason, payload)) = damage {
            replay
                .damaged
                .push(damaged_frame(offset, frame_idx, reason, payload));
        }
        let Some(next) = next else {
            return (replay, offset as u64);
        };
        assert!(next > offset);
        offset = next;
        frame_idx += 1;
    }
}

/// The offset of the next valid frame of `generation` after the frame start `offset`, if any.
fn find_frame_after(bytes: &[u8], offset: usize, generation: u64) -> Option<usize> {
    let mut start = offset + BLOCK_BYTES as usize;
    while start + BLOCK_BYTES as usize <= bytes.len() {
        if block_tag(bytes, start) == Some(generation) {
            if let FrameAt::Valid { .. } = frame_at(bytes, start, generation) {
                return Some(start);
            }
        }
        start += BLOCK_BYTES as usize;
    }
    None
}

/// A damaged frame and what its payload still shows.
fn damaged_frame(
    offset: usize,
    frame_idx: u64,
    reason: String,
    payload: Option<Vec<u8>>,
) -> DamagedFrame {
    let mut frame = DamagedFrame {
        offset_bytes: offset as u64,
        frame_idx,
        reason,
        events: Vec::new(),
        session_records: Vec::new(),
        entries_complete: false,
    };
    if let Some(payload) = payload {
        sketch_entries(&payload, &mut frame);
    }
    frame
}

/// Reads a damaged payload's entries as far as their layout holds: which events and session
/// records the frame held (a damaged byte may sit in a key or seq, so this is a best guess
/// that the store checks against what it knows).
fn sketch_entries(payload: &[u8], frame: &mut DamagedFrame) {
    let Some(n_entries) = payload
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    else {
        return;
    };
    let mut rest = &payload[4..];
    // One session's events in one frame are dense (a group's batches of one session follow
    // each other), so a seq that breaks its session's run is damage, not a seq the frame held.
    let mut last_seq: HashMap<u64, u64> = HashMap::new();
    for _ in 0..n_entries {
        let Some((tag, after)) = rest.split_first() else {
            return;
        };
        let parsed = match *tag {
            ENTRY_TAG_EVENT => parse_event_entry(after),
            ENTRY_TAG_SESSION => parse_session_entry(after),
            _ => None,
        };
        let Some((entry, after)) = parsed else {
            return;
        };
        match entry {
            WalEntry::Event { key, seq, .. } => {
                if let Some(previous) = last_seq.insert(key, seq) {
                    if previous.checked_add(1) != Some(seq) {
                        return;
                    }
                }
                frame.events.push((key, seq));
            }
            WalEntry::Session { record } => frame.session_records.push(record),
        }
        rest = after;
    }
    frame.entries_complete = true;
}

/// The entries of a payload whose checksum held, if its layout is whole; `None` otherwise.
fn parse_entries(payload: &[u8], version: u32) -> Option<Vec<WalEntry>> {
    let n_entries = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?);
    let mut entries =
        Vec::with_capacity((n_entries as usize).min(payload.len() / ENTRY_HEADER_BYTES));
    let mut rest = &payload[4..];
    for _ in 0..n_entries {
        let tag = if version == WAL_VERSION_EVENTS_ONLY {
            ENTRY_TAG_EVENT
        } else {
            let (tag, after) = rest.split_first()?;
            rest = after;
            *tag
        };
        let (entry, after) = match tag {
            ENTRY_TAG_EVENT => parse_event_entry(rest)?,
            ENTRY_TAG_SESSION => parse_session_entry(rest)?,
            _ => return None,
        };
        entries.push(entry);
        rest = after;
    }
    rest.is_empty().then_some(entries)
}

/// `session key u64 | seq u64 | record_len u32 | record`, and the bytes after it.
fn parse_event_entry(bytes: &[u8]) -> Option<(WalEntry, &[u8])> {
    let header = bytes.get(..ENTRY_HEADER_BYTES)?;
    let key = u64::from_le_bytes(header[..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let record_len = u32::from_le_bytes(header[16..20].try_into().ok()?) as usize;
    let end = ENTRY_HEADER_BYTES.checked_add(record_len)?;
    let record = bytes.get(ENTRY_HEADER_BYTES..end)?.to_vec();
    Some((WalEntry::Event { key, seq, record }, &bytes[end..]))
}

/// `record_len u32 | session record`, and the bytes after it.
fn parse_session_entry(bytes: &[u8]) -> Option<(WalEntry, &[u8])> {
    let record_len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(record_len)?;
    let record = bytes.get(4..end)?.to_vec();
    Some((WalEntry::Session { record }, &bytes[end..]))
}
