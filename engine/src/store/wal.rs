//! The store's write-ahead log: what makes an append durable with one `fdatasync` of an
//! append-only file instead of a full B-tree commit.
//!
//! An append group is staged in a redb write transaction, written to the WAL as one frame and
//! synced, then committed to redb without durability (in memory). Every
//! [`DURABLE_BYTES_MAX`] of WAL (and on close) redb makes everything durable with one
//! `Durability::Immediate` commit, after which the WAL is emptied. Opening a store replays the
//! WAL frames into redb: records already present must be identical, missing ones are inserted.
//!
//! ```text
//! file    := header frame*
//! header  := magic "SLWAL\0\0\0" (8) | version u32 | crc32 of the previous 12 bytes u32
//! frame   := len u32 | crc32 of payload u32 | payload (len bytes)
//! payload := n_entries u32 | entry*
//! entry   := tag u8 = 1 | session key u64 | seq u64 | record_len u32 | event record
//!          | tag u8 = 2 | record_len u32 | session record        (version 2)
//! entry   := session key u64 | seq u64 | record_len u32 | event record    (version 1)
//! ```
//!
//! A session creation is logged like an append (version 2), so that it is durable once its
//! frame is synced and never depends on redb's own sync. A version 1 WAL (events only) is still
//! replayed; its header is rewritten as version 2 once it is emptied.
//!
//! Only the tail may be torn: a last frame that is cut short, or whose checksum fails with
//! nothing after it, is an append that was never acknowledged and is dropped. A damaged frame
//! followed by more bytes is corruption, reported with its offset.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::StoreError;

const WAL_MAGIC: [u8; 8] = *b"SLWAL\0\0\0";
/// The version this build writes: 2 added tagged entries and session creations.
const WAL_VERSION: u32 = 2;
/// The version before tags: every entry is an event.
const WAL_VERSION_EVENTS_ONLY: u32 = 1;
const ENTRY_TAG_EVENT: u8 = 1;
const ENTRY_TAG_SESSION: u8 = 2;
pub(crate) const HEADER_BYTES: u64 = 16;
const FRAME_HEADER_BYTES: usize = 8;
const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4;
/// Largest frame: one append group.
pub(crate) const FRAME_BYTES_MAX: usize = 1 << 30;
/// WAL bytes after which redb is made durable and the WAL emptied.
pub(crate) const DURABLE_BYTES_MAX: u64 = 64 << 20;

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

    /// The frame bytes: length, checksum, payload.
    fn finish(mut self) -> Vec<u8> {
        assert!(self.n_entries > 0, "an empty group writes no frame");
        self.payload[..4].copy_from_slice(&self.n_entries.to_le_bytes());
        let len = u32::try_from(self.payload.len()).expect("frames are bounded by FRAME_BYTES_MAX");
        let mut frame = Vec::with_capacity(self.payload.len() + FRAME_HEADER_BYTES);
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&self.payload).to_le_bytes());
        frame.extend_from_slice(&self.payload);
        frame
    }
}

/// The file under a WAL: a `std::fs::File`, or a double that injects faults (the fault
/// position suite, RELIABILITY.md). Every method is one I/O operation.
pub trait WalFile: Send {
    /// The whole file.
    fn read_all(&mut self) -> io::Result<Vec<u8>>;
    /// Writes `bytes` at `offset`, extending the file.
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
    len_bytes: u64,
    /// The version of the file's header; an older one is rewritten when the WAL is emptied.
    version: u32,
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
    /// Opens (or creates) the WAL and returns the entries to replay, in order. A torn tail is
    /// cut off the file.
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
            len_bytes: bytes.len() as u64,
            version: WAL_VERSION,
        };
        if bytes.is_empty() {
            wal.write_header()?;
            return Ok((wal, Vec::new()));
        }
        wal.version = check_header(path, &bytes)?;
        let (entries, valid_len) = parse_frames(path, &bytes, wal.version)?;
        if valid_len < wal.len_bytes {
            wal.truncate_to(valid_len).map_err(|e| storage(path, e))?;
        }
        Ok((wal, entries))
    }

    fn write_header(&mut self) -> Result<(), StoreError> {
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(&WAL_MAGIC);
        header.extend_from_slice(&WAL_VERSION.to_le_bytes());
        header.extend_from_slice(&crc32fast::hash(&header).to_le_bytes());
        self.file.set_len(0).map_err(|e| storage(&self.path, e))?;
        self.file
            .write_all_at(0, &header)
            .map_err(|e| storage(&self.path, e))?;
        self.file.sync_all().map_err(|e| storage(&self.path, e))?;
        self.len_bytes = HEADER_BYTES;
        self.version = WAL_VERSION;
        Ok(())
    }

    /// Bytes of frames since the WAL was last emptied.
    pub(crate) fn frames_len_bytes(&self) -> u64 {
        self.len_bytes.saturating_sub(HEADER_BYTES)
    }

    /// Appends a group's frame and syncs it. On failure the file is cut back to where it was,
    /// so that a failed append can never be replayed.
    pub(crate) fn append(&mut self, frame: FrameBuilder) -> Result<(), StoreError> {
        assert_eq!(self.version, WAL_VERSION, "an older WAL is emptied on open");
        if frame.len_bytes() > FRAME_BYTES_MAX {
            return Err(StoreError::Storage(format!(
                "an append group of {} bytes exceeds the WAL frame limit of {FRAME_BYTES_MAX}",
                frame.len_bytes()
            )));
        }
        let bytes = frame.finish();
        let before = self.len_bytes;
        let written = self
            .file
            .write_all_at(before, &bytes)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len_bytes += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                // Best effort: the store is poisoned either way.
                let _ = self.truncate_to(before);
                Err(storage(&self.path, error))
            }
        }
    }

    /// Cuts the WAL back to `len_bytes` and syncs.
    pub(crate) fn truncate_to(&mut self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)?;
        self.file.sync_all()?;
        self.len_bytes = len_bytes;
        Ok(())
    }

    /// Empties the WAL after redb made everything in it durable.
    pub(crate) fn reset(&mut self) -> Result<(), StoreError> {
        if self.version != WAL_VERSION {
            // An older WAL, now replayed: frames are written in this build's version only.
            return self.write_header();
        }
        self.truncate_to(HEADER_BYTES)
            .map_err(|e| storage(&self.path, e))
    }
}

/// Checks the header and returns the WAL's version (1 or 2).
fn check_header(path: &Path, bytes: &[u8]) -> Result<u32, StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        reason: format!("{}: WAL header: {reason}", path.display()),
    };
    if bytes.len() < HEADER_BYTES as usize {
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
    Ok(version)
}

/// Parses every valid frame; returns the entries and the length of the valid prefix.
fn parse_frames(
    path: &Path,
    bytes: &[u8],
    version: u32,
) -> Result<(Vec<WalEntry>, u64), StoreError> {
    let mut entries = Vec::new();
    let mut offset = HEADER_BYTES as usize;
    while offset < bytes.len() {
        let Some((stored_crc, payload)) = frame_at(&bytes[offset..]) else {
            // Cut short: the tail of an append that was never acknowledged.
            return Ok((entries, offset as u64));
        };
        let frame_end = offset + FRAME_HEADER_BYTES + payload.len();
        match parse_entries(stored_crc, payload, version) {
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

/// The stored checksum and payload of the frame at the start of `bytes`, if it is complete.
fn frame_at(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let payload = bytes.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES.checked_add(len)?)?;
    Some((crc, payload))
}

/// The entries of a frame whose checksum holds and whose layout is whole; `None` otherwise.
fn parse_entries(stored_crc: u32, payload: &[u8], version: u32) -> Option<Vec<WalEntry>> {
    if crc32fast::hash(payload) != stored_crc {
        return None;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(entries: &[(u64, u64, &[u8])]) -> FrameBuilder {
        let mut builder = FrameBuilder::default();
        for (key, seq, record) in entries {
            builder.push(*key, *seq, record);
        }
        builder
    }

    // Goal: frames written are the entries replayed, in order, across a reopen.
    #[test]
    fn frames_replay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        let (mut wal, replay) = Wal::open(&path).unwrap();
        assert!(replay.is_empty());
        wal.append(frame(&[(0, 0, b"a"), (0, 1, b"bb")])).unwrap();
        wal.append(frame(&[(1, 0, b"ccc")])).unwrap();
        drop(wal);
        let (_, replay) = Wal::open(&path).unwrap();
        let got: Vec<(u64, u64, Vec<u8>)> = replay
            .into_iter()
            .map(|e| match e {
                WalEntry::Event { key, seq, record } => (key, seq, record),
                WalEntry::Session { .. } => panic!("no session was logged"),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 0, b"a".to_vec()),
                (0, 1, b"bb".to_vec()),
                (1, 0, b"ccc".to_vec())
            ]
        );
    }

    // Goal: a torn last frame, cut at every byte, is dropped (and cut off the file); the frames
    // before it replay.
    #[test]
    fn torn_tail_is_dropped_at_every_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        let (mut wal, _) = Wal::open(&path).unwrap();
        wal.append(frame(&[(0, 0, b"first")])).unwrap();
        let first_end = wal.len_bytes;
        wal.append(frame(&[(0, 1, b"second"), (0, 2, b"third")]))
            .unwrap();
        let full = std::fs::read(&path).unwrap();
        drop(wal);
        for cut in first_end as usize..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let (wal, replay) = Wal::open(&path).unwrap();
            assert_eq!(replay.len(), 1, "cut at {cut}");
            assert_eq!(wal.len_bytes, first_end, "the torn tail is cut off");
        }
    }

    // Goal: a damaged frame with more frames after it is corruption, never silently skipped;
    // the same damage in the last frame is a torn tail.
    #[test]
    fn damage_before_the_tail_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        let (mut wal, _) = Wal::open(&path).unwrap();
        wal.append(frame(&[(0, 0, b"first")])).unwrap();
        wal.append(frame(&[(0, 1, b"second")])).unwrap();
        drop(wal);
        let mut bytes = std::fs::read(&path).unwrap();
        let in_first = HEADER_BYTES as usize + FRAME_HEADER_BYTES + 2;
        bytes[in_first] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(Wal::open(&path), Err(StoreError::Corrupt { .. })));
        bytes[in_first] ^= 1;
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(replay.len(), 1);
    }

    /// A version 1 WAL (no entry tags) holding one frame of `entries`.
    fn v1_wal(entries: &[(u64, u64, &[u8])]) -> Vec<u8> {
        let mut bytes = WAL_MAGIC.to_vec();
        bytes.extend_from_slice(&WAL_VERSION_EVENTS_ONLY.to_le_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let mut payload = (entries.len() as u32).to_le_bytes().to_vec();
        for (key, seq, record) in entries {
            payload.extend_from_slice(&key.to_le_bytes());
            payload.extend_from_slice(&seq.to_le_bytes());
            payload.extend_from_slice(&(record.len() as u32).to_le_bytes());
            payload.extend_from_slice(record);
        }
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        bytes
    }

    // Goal: a WAL written by a version 1 build (events only, no tags) still replays, and once
    // emptied its header is rewritten as this build's version, so new frames are never
    // written under an old header.
    #[test]
    fn version_1_wal_replays_and_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        std::fs::write(&path, v1_wal(&[(3, 0, b"a"), (3, 1, b"bb")])).unwrap();
        let (mut wal, replay) = Wal::open(&path).unwrap();
        assert_eq!(
            replay,
            vec![
                WalEntry::Event {
                    key: 3,
                    seq: 0,
                    record: b"a".to_vec()
                },
                WalEntry::Event {
                    key: 3,
                    seq: 1,
                    record: b"bb".to_vec()
                }
            ]
        );
        assert_eq!(wal.version, WAL_VERSION_EVENTS_ONLY);
        wal.reset().unwrap();
        let mut session = FrameBuilder::default();
        session.push_session(b"session record");
        wal.append(session).unwrap();
        drop(wal);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[8..12], WAL_VERSION.to_le_bytes());
        let (_, replay) = Wal::open(&path).unwrap();
        assert_eq!(
            replay,
            vec![WalEntry::Session {
                record: b"session record".to_vec()
            }]
        );
    }

    // Goal: a WAL of a newer version is refused with UpgradeRequired, and an unknown entry
    // tag makes its frame invalid (a torn tail when last, corruption otherwise).
    #[test]
    fn newer_version_and_unknown_tags_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        let mut bytes = WAL_MAGIC.to_vec();
        bytes.extend_from_slice(&(WAL_VERSION + 1).to_le_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            Wal::open(&path),
            Err(StoreError::UpgradeRequired {
                found: 3,
                supported: 2
            })
        ));
        let unknown_tag = b"\x01\0\0\0\x07";
        assert_eq!(
            parse_entries(crc32fast::hash(unknown_tag), unknown_tag, WAL_VERSION),
            None
        );
    }

    // Goal: reset empties the WAL down to its header.
    #[test]
    fn reset_empties() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wal");
        let (mut wal, _) = Wal::open(&path).unwrap();
        wal.append(frame(&[(0, 0, b"x")])).unwrap();
        assert!(wal.frames_len_bytes() > 0);
        wal.reset().unwrap();
        assert_eq!(wal.frames_len_bytes(), 0);
        drop(wal);
        assert!(Wal::open(&path).unwrap().1.is_empty());
    }
}
