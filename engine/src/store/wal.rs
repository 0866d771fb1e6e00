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
//! file    := header frame* (zeros or stale frames up to the end of the file)
//! header  := magic "SLWAL\0\0\0" (8) | version u32 = 3 | crc32 of bytes 0..12 u32
//!          | slot | slot                                                         (40 bytes)
//! slot    := generation u64 | crc32 of the generation u32
//! frame   := len u32 (> 0) | crc32 of generation and payload u32 | generation u64
//!          | payload (len bytes)
//! payload := n_entries u32 | entry*
//! entry   := tag u8 = 1 | session key u64 | seq u64 | record_len u32 | event record
//!          | tag u8 = 2 | record_len u32 | session record
//! ```
//!
//! Versions 1 and 2 had a 16-byte header (no generation), frames of `len | crc32 of payload |
//! payload` appended at the end of the file, and (version 1) untagged event entries. Both are
//! still replayed, and the header is rewritten as version 3 when the WAL restarts.
//!
//! Why in place: a frame that only overwrites bytes the file already holds makes its
//! `fdatasync` carry no change of size or allocation. So the file grows by whole steps of
//! written zeros ([`EXTEND_BYTES_MIN`] up to [`EXTEND_BYTES_MAX`], as long as the file so far),
//! and after a restart old frames are overwritten. The generation makes those old frames
//! stale: a frame counts only when it carries the header's generation under its crc. A restart
//! writes the next generation into the slot of the previous one, so a torn slot leaves the
//! other, whose frames are intact (nothing of the new generation is written before the slot
//! is synced) and already durable in redb.
//!
//! The log is every valid frame from the header on; the first frame that is not valid (zero
//! `len`, cut short by the end of the file, another generation, a crc mismatch or a malformed
//! payload) ends it: a torn, never acknowledged tail, or stale bytes. It is corruption,
//! reported with its offset, when a valid frame of the current generation starts anywhere
//! after that point, since frames are written in order and a restart changes the generation.

#[cfg(test)]
mod tests;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::StoreError;

const WAL_MAGIC: [u8; 8] = *b"SLWAL\0\0\0";
/// The version this build writes: 3 overwrites a preallocated file, under generations.
const WAL_VERSION: u32 = 3;
/// Tagged entries and session creations, frames appended at the end of the file.
const WAL_VERSION_APPENDED: u32 = 2;
/// The version before tags: every entry is an event.
const WAL_VERSION_EVENTS_ONLY: u32 = 1;
const ENTRY_TAG_EVENT: u8 = 1;
const ENTRY_TAG_SESSION: u8 = 2;
/// Magic, version and the crc of both: the whole header up to version 2, and the prefix that
/// a version 2 build reads of a version 3 header (so it answers `UpgradeRequired`).
const HEADER_PREFIX_BYTES: u64 = 8 + 4 + 4;
/// A generation slot: the generation and its crc.
const SLOT_BYTES: u64 = 8 + 4;
/// The version 3 header: the prefix and two generation slots; the current generation is the
/// one whose slot holds the other's successor.
pub(crate) const HEADER_BYTES: u64 = HEADER_PREFIX_BYTES + 2 * SLOT_BYTES;
const _: () = assert!(HEADER_PREFIX_BYTES == 16 && HEADER_BYTES == 40);
/// Length, crc, generation.
const FRAME_HEADER_BYTES: usize = 4 + 4 + 8;
/// Length, crc (versions 1 and 2).
const FRAME_HEADER_APPENDED_BYTES: usize = 4 + 4;
/// Where a frame's generation sits: after its length and crc.
const FRAME_GENERATION_OFFSET: usize = 8;
const _: () = assert!(FRAME_GENERATION_OFFSET + 8 == FRAME_HEADER_BYTES);
const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4;
/// Largest frame: one append group.
pub(crate) const FRAME_BYTES_MAX: usize = 1 << 30;
/// WAL bytes after which redb is made durable and the WAL restarted.
pub(crate) const DURABLE_BYTES_MAX: u64 = 64 << 20;
/// The smallest step the file grows by, so that a tiny store keeps a tiny WAL.
pub(crate) const EXTEND_BYTES_MIN: u64 = 64 << 10;
/// The largest step the file grows by: one zero-filling write and one size change per step.
pub(crate) const EXTEND_BYTES_MAX: u64 = 1 << 20;
const _: () = assert!(EXTEND_BYTES_MIN <= EXTEND_BYTES_MAX && EXTEND_BYTES_MAX < DURABLE_BYTES_MAX);
/// What a restart adds to the generation (wrapping): odd, so that the sequence repeats only
/// after 2^64 restarts, and with every byte set, so that a generation is not a small number
/// that records are full of (the corruption scan searches for it).
const GENERATION_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// One record to (re)insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalEntry {
    /// An event record of session `key`.
    Event { key: u64, seq: u64, record: Vec<u8> },
    /// A session record (its key and id are inside it), written on creation.
    Session { record: Vec<u8> },
}

/// An append group's frame, built while the group is staged.
#[derive(Debug, Default)]
pub(crate) struct FrameBuilder {
    payload: Vec<u8>,
    n_entries: u32,
}

impl FrameBuilder {
    pub(crate) fn push(&mut self, key: u64, seq: u64, record: &[u8]) {
        if self.payload.is_empty() {
            self.payload.extend_from_slice(&0u32.to_le_bytes());
        }
        let record_len = u32::try_from(record.len()).expect("records are at most 64 MiB");
        self.payload.push(ENTRY_TAG_EVENT);
        self.payload.extend_from_slice(&key.to_le_bytes());
        self.payload.extend_from_slice(&seq.to_le_bytes());
        self.payload.extend_from_slice(&record_len.to_le_bytes());
        self.payload.extend_from_slice(record);
        self.n_entries += 1;
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

    pub(crate) fn len_bytes(&self) -> usize {
        self.payload.len() + FRAME_HEADER_BYTES
    }

    /// The frame bytes: length, checksum, generation, payload.
    fn finish(mut self, generation: u64) -> Vec<u8> {
        assert!(self.n_entries > 0, "an empty group writes no frame");
        self.payload[..4].copy_from_slice(&self.n_entries.to_le_bytes());
        let len = u32::try_from(self.payload.len()).expect("frames are bounded by FRAME_BYTES_MAX");
        let mut frame = Vec::with_capacity(self.payload.len() + FRAME_HEADER_BYTES);
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.extend_from_slice(&generation.to_le_bytes());
        frame.extend_from_slice(&self.payload);
        let crc = crc32fast::hash(&frame[FRAME_GENERATION_OFFSET..]);
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(len > 0, "a zero len ends the log");
        assert_eq!(frame.len(), self.payload.len() + FRAME_HEADER_BYTES);
        frame
    }
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
    /// The header's generation (version 3): a frame of another generation is stale.
    generation: u64,
    /// The header slot (0 or 1) that holds `generation`; a restart writes the other.
    slot_idx: u64,
    /// The end of the log, where the next frame goes.
    end_bytes: u64,
    /// The file's length; past `end_bytes` it holds zeros and stale frames.
    file_len_bytes: u64,
    /// The frame the last append wrote, while its group may still be refused by redb.
    last_frame: Option<WrittenFrame>,
}

/// Where a frame was written, and what is needed to take it back.
#[derive(Debug, Clone, Copy)]
struct WrittenFrame {
    offset_bytes: u64,
    /// The frame and the zeros after it that grew the file.
    written_end_bytes: u64,
    file_len_before_bytes: u64,
}

/// The WAL path of a store file: `<store>.wal`.
pub(crate) fn wal_path(store_path: &Path) -> PathBuf {
    let mut name = store_path.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

fn storage(path: &Path, error: impl std::fmt::Display) -> StoreError {
    StoreError::Storage(format!("{}: {error}", path.display()))
}

impl Wal {
    /// Opens (or creates) the WAL and returns the entries to replay, in order. The file is not
    /// changed: the restart after the replay makes the rest of it stale.
    pub(crate) fn open(path: &Path) -> Result<(Wal, Vec<WalEntry>), StoreError> {
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
    ) -> Result<(Wal, Vec<WalEntry>), StoreError> {
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
        };
        if bytes.is_empty() {
            wal.write_new_header(GENERATION_STEP)?;
            return Ok((wal, Vec::new()));
        }
        let header = check_header(path, &bytes)?;
        let (entries, end_bytes) = if header.version == WAL_VERSION {
            parse_frames(path, &bytes, header.generation)?
        } else {
            parse_frames_appended(path, &bytes, header.version)?
        };
        assert!(
            end_bytes <= wal.file_len_bytes,
            "the log lies inside the file"
        );
        wal.version = header.version;
        wal.generation = header.generation;
        wal.slot_idx = header.slot_idx;
        wal.end_bytes = end_bytes;
        Ok((wal, entries))
    }

    /// Writes a version 3 header of `generation` (in slot 1) over an emptied file.
    fn write_new_header(&mut self, generation: u64) -> Result<(), StoreError> {
        let header = encode_new_header(generation);
        self.file.set_len(0).map_err(|e| storage(&self.path, e))?;
        self.file_len_bytes = 0;
        self.file
            .write_all_at(0, &header)
            .map_err(|e| storage(&self.path, e))?;
        self.file.sync_all().map_err(|e| storage(&self.path, e))?;
        self.file_len_bytes = HEADER_BYTES;
        self.end_bytes = HEADER_BYTES;
        self.version = WAL_VERSION;
        self.generation = generation;
        self.slot_idx = 1;
        Ok(())
    }

    /// Bytes of frames since the WAL last restarted.
    pub(crate) fn frames_len_bytes(&self) -> u64 {
        let header_bytes = if self.version == WAL_VERSION {
            HEADER_BYTES
        } else {
            HEADER_PREFIX_BYTES
        };
        self.end_bytes.saturating_sub(header_bytes)
    }

    /// Writes a group's frame at the end of the log and syncs it; when it passes the end of
    /// the file, zeros after it grow the file by whole steps in the same write. On failure
    /// the frame is invalidated (and the file cut back), so that a failed append can never be
    /// replayed.
    pub(crate) fn append(&mut self, frame: FrameBuilder) -> Result<(), StoreError> {
        assert_eq!(self.version, WAL_VERSION, "an older WAL restarts on open");
        assert!(self.end_bytes <= self.file_len_bytes);
        if frame.len_bytes() > FRAME_BYTES_MAX {
            return Err(StoreError::Storage(format!(
                "an append group of {} bytes exceeds the WAL frame limit of {FRAME_BYTES_MAX}",
                frame.len_bytes()
            )));
        }
        let mut bytes = frame.finish(self.generation);
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

    /// Invalidates the frame of the last append, whose group redb refused to commit (so it
    /// was never acknowledged): it is never replayed.
    pub(crate) fn invalidate_last_frame(&mut self) -> io::Result<()> {
        let written = self
            .last_frame
            .take()
            .expect("a frame is invalidated right after its append");
        self.invalidate(written)
    }

    /// Zeroes the `len` of a frame that was (or may have been) written, which ends the log
    /// there, and cuts the file back if the write grew it; then syncs.
    fn invalidate(&mut self, written: WrittenFrame) -> io::Result<()> {
        self.end_bytes = written.offset_bytes;
        self.last_frame = None;
        let zeroed = if written.offset_bytes < written.file_len_before_bytes {
            self.file.write_all_at(written.offset_bytes, &[0; 4])
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
    /// frame in the file stale, and the next frame goes just after the header again. The new
    /// generation goes into the previous one's slot and is synced before any frame of it is
    /// written, so a torn slot leaves the current one and its intact frames.
    pub(crate) fn restart(&mut self) -> Result<(), StoreError> {
        self.last_frame = None;
        if self.version != WAL_VERSION {
            // An older WAL, now replayed: frames are written in this build's version only.
            return self.write_new_header(GENERATION_STEP);
        }
        let generation = self.generation.wrapping_add(GENERATION_STEP);
        let slot_idx = 1 - self.slot_idx;
        self.file
            .write_all_at(slot_offset_bytes(slot_idx), &encode_slot(generation))
            .and_then(|()| self.file.sync_data())
            .map_err(|e| storage(&self.path, e))?;
        self.generation = generation;
        self.slot_idx = slot_idx;
        self.end_bytes = HEADER_BYTES;
        Ok(())
    }

    /// Cuts an empty WAL (right after a restart) back to its header, so that a closed store
    /// keeps no preallocated zeros on disk.
    pub(crate) fn cut_to_header(&mut self) -> Result<(), StoreError> {
        assert_eq!(self.end_bytes, HEADER_BYTES, "only an empty WAL is cut");
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

/// A new version 3 header: `generation` in slot 1, its predecessor in slot 0.
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
    /// The slot that holds `generation` (version 3).
    slot_idx: u64,
}

/// Checks the header and returns the WAL's version (1 to 3) and generation.
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
    if version < WAL_VERSION {
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
        (Some(zero), Some(one)) if one == zero.wrapping_add(GENERATION_STEP) => (one, 1),
        (Some(zero), Some(one)) if zero == one.wrapping_add(GENERATION_STEP) => (zero, 0),
        (Some(_), Some(_)) => return Err(corrupt("the generation slots disagree")),
        (Some(zero), None) => (zero, 0),
        (None, Some(one)) => (one, 1),
        (None, None) => return Err(corrupt("both generation slots fail their checksum")),
    };
    // One slot failing its crc is a restart torn before its sync, when nothing of the next
    // generation was written yet; a frame of it where the log starts means the slot was
    // damaged afterwards.
    let next = generation.wrapping_add(GENERATION_STEP);
    let one_slot_failed = decode_slot(header, 1 - slot_idx).is_none();
    if one_slot_failed && frame_at(bytes, HEADER_BYTES as usize, next).is_some() {
        return Err(corrupt("the slot of the current generation is damaged"));
    }
    Ok(Header {
        version,
        generation,
        slot_idx,
    })
}

/// Parses a version 3 log: every valid frame of `generation` from the header on. Returns the
/// entries and the end of the log; a valid frame of `generation` after the end is corruption.
fn parse_frames(
    path: &Path,
    bytes: &[u8],
    generation: u64,
) -> Result<(Vec<WalEntry>, u64), StoreError> {
    let mut entries = Vec::new();
    let mut offset = HEADER_BYTES as usize;
    while let Some((parsed, frame_end)) = frame_at(bytes, offset, generation) {
        assert!(frame_end > offset);
        entries.extend(parsed);
        offset = frame_end;
    }
    if let Some(later) = find_frame_after(bytes, offset, generation) {
        return Err(StoreError::Corrupt {
            reason: format!(
                "{}: WAL frame at byte offset {offset} is damaged and is not the last (a valid \
                 frame follows at byte offset {later})",
                path.display()
            ),
        });
    }
    Ok((entries, offset as u64))
}

/// The entries and the end of the valid frame of `generation` at `offset`; `None` for a zero
/// `len`, a frame cut short by the end of the file, another generation, a crc mismatch or a
/// malformed payload.
fn frame_at(bytes: &[u8], offset: usize, generation: u64) -> Option<(Vec<WalEntry>, usize)> {
    let frame = bytes.get(offset..)?;
    let len = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?) as usize;
    if len == 0 {
        return None;
    }
    let stored_crc = u32::from_le_bytes(frame.get(4..8)?.try_into().ok()?);
    let frame_len = FRAME_HEADER_BYTES.checked_add(len)?;
    let covered = frame.get(FRAME_GENERATION_OFFSET..frame_len)?;
    if covered[..8] != generation.to_le_bytes() || crc32fast::hash(covered) != stored_crc {
        return None;
    }
    let parsed = parse_entries(&covered[8..], WAL_VERSION)?;
    Some((parsed, offset + frame_len))
}

/// The offset of a valid frame of `generation` that starts after `offset`, if any: the scan
/// looks for the generation's bytes where a frame carries them and checks each hit whole.
fn find_frame_after(bytes: &[u8], offset: usize, generation: u64) -> Option<usize> {
    let first_start = offset + 1;
    let first_hit = first_start + FRAME_GENERATION_OFFSET;
    let windows = bytes.get(first_hit..)?.windows(8).enumerate();
    windows
        .filter(|(_, window)| {
            u64::from_le_bytes((*window).try_into().expect("8-byte window")) == generation
        })
        .map(|(idx, _)| first_start + idx)
        .find(|&start| frame_at(bytes, start, generation).is_some())
}

/// Parses a version 1 or 2 log, whose frames were appended: returns the entries and the
/// length of the valid prefix. A damaged frame with bytes after it is corruption.
fn parse_frames_appended(
    path: &Path,
    bytes: &[u8],
    version: u32,
) -> Result<(Vec<WalEntry>, u64), StoreError> {
    assert!(version <= WAL_VERSION_APPENDED);
    let mut entries = Vec::new();
    let mut offset = HEADER_PREFIX_BYTES as usize;
    while offset < bytes.len() {
        let Some((stored_crc, payload)) = frame_appended_at(&bytes[offset..]) else {
            // Cut short: the tail of an append that was never acknowledged.
            return Ok((entries, offset as u64));
        };
        let frame_end = offset + FRAME_HEADER_APPENDED_BYTES + payload.len();
        let parsed = if crc32fast::hash(payload) == stored_crc {
            parse_entries(payload, version)
        } else {
            None
        };
        match parsed {
            Some(parsed) => entries.extend(parsed),
            None if frame_end >= bytes.len() => return Ok((entries, offset as u64)),
            None => {
                return Err(StoreError::Corrupt {
                    reason: format!(
                        "{}: WAL frame at byte offset {offset} is damaged and is not the last",
                        path.display()
                    ),
                })
            }
        }
        offset = frame_end;
    }
    Ok((entries, offset as u64))
}

/// The stored checksum and payload of the version 1 or 2 frame at the start of `bytes`, if it
/// is complete.
fn frame_appended_at(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let end = FRAME_HEADER_APPENDED_BYTES.checked_add(len)?;
    let payload = bytes.get(FRAME_HEADER_APPENDED_BYTES..end)?;
    Some((crc, payload))
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
