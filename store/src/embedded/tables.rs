//! The redb tables of a store and the small records kept in them (docs/format.md, "Store").

use redb::TableDefinition;
use sessionlog_format::record::ChainHash;
use sessionlog_format::{FormatVersion, SessionHeader};

use crate::embedded::StoreError;
use crate::types::stored_version;

/// `"store"` -> the store's meta record (magic and versions).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Session id -> session record (numeric key and header).
pub(crate) const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
/// `(session key, seq)` -> event record (`sessionlog_format::record`).
pub(crate) const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
/// Session key -> the latest fold checkpoint record.
pub(crate) const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");
/// `(session key, next_seq)` -> a kept fold checkpoint record: one for each
/// [`crate::types::KEPT_CHECKPOINT_INTERVAL_EVENTS`] boundary the session crossed, never
/// rewritten, so that a read at any seq folds from the nearest one below it. Absent in stores
/// written by builds before it (they fold such reads from seq 0).
pub(crate) const KEPT_CHECKPOINTS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("kept_checkpoints");
/// `(session key, start offset)` -> a segment of the session's fact journal (the CRC-32 of
/// the bytes, then the bytes; `crate::facts`): written with the checkpoint that first names
/// them, read back by a resume up to the length the checkpoint names. Absent in stores written
/// by builds before fold checkpoint version 3.
pub(crate) const FACT_SEGMENTS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("fact_segments");

pub(crate) const META_KEY: &str = "store";

/// The store's magic, at the start of the meta record.
pub(crate) const STORE_MAGIC: [u8; 8] = *b"SESSLOG\0";
/// The newest version of this store layout (tables and records) this build reads and writes;
/// readers refuse newer ones.
pub const STORE_FORMAT_VERSION: u32 = STORE_VERSION_V4_SESSIONS;
/// The store version with sealed blocks: what a store holding only V3 sessions records.
pub const STORE_VERSION_BLOCKS: u32 = 2;
/// The first store version whose sessions may be V4 ones. A store records it from its first V4
/// session on, so that older builds, which would read a V4 session by the V3 rules, refuse the
/// store instead; a store without V4 sessions stays at [`STORE_VERSION_BLOCKS`] and opens in
/// them unchanged (docs/format.md, "Meta record").
pub const STORE_VERSION_V4_SESSIONS: u32 = 3;
const META_BYTES: usize = 8 + 4 + 4;

/// The store version a session of `version` needs.
pub(crate) fn store_version_for(version: FormatVersion) -> u32 {
    if version >= FormatVersion::V4 {
        STORE_VERSION_V4_SESSIONS
    } else {
        STORE_VERSION_BLOCKS
    }
}

/// Encodes the meta record: magic, store version, crc32 of the first 12 bytes.
pub(crate) fn encode_meta(version: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(META_BYTES);
    bytes.extend_from_slice(&STORE_MAGIC);
    bytes.extend_from_slice(&version.to_le_bytes());
    let crc = crc32(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(bytes.len(), META_BYTES);
    bytes
}

/// Checks the meta record and returns the store version it names.
pub(crate) fn check_meta(bytes: &[u8]) -> Result<u32, StoreError> {
    let invalid = |reason: &str| StoreError::Corrupt {
        reason: format!("meta record: {reason}"),
    };
    if bytes.len() != META_BYTES {
        return Err(invalid("wrong length"));
    }
    if bytes[..8] != STORE_MAGIC {
        return Err(invalid("not a sessionlog store (bad magic)"));
    }
    if crc32(&bytes[..12]) != u32_le(&bytes[12..16]) {
        return Err(invalid("checksum mismatch"));
    }
    let version = u32_le(&bytes[8..12]);
    if version > STORE_FORMAT_VERSION {
        return Err(StoreError::UpgradeRequired {
            found: version,
            supported: STORE_FORMAT_VERSION,
        });
    }
    Ok(version)
}

/// A session's record: its numeric key, its flags and its header line, whose `version` (3 or
/// 4) is the session's format version.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionRecord {
    pub(crate) key: u64,
    /// The session was imported from a normalized dsh recording (spec 18): its rules admit
    /// `{{placeholder}}` values.
    pub(crate) snapshot: bool,
    /// An import is filling the session and has not finished: it is not a normal session
    /// (hidden from listings, refused to reads and to every other writer) until the import,
    /// or a rerun of it, clears the flag (docs/format.md, "Session record").
    pub(crate) importing: bool,
    pub(crate) header: SessionHeader,
}

/// Session flag bit 0: a normalized recording.
const SESSION_FLAG_SNAPSHOT: u8 = 0b01;
/// Session flag bit 1: an import that has not finished.
const SESSION_FLAG_IMPORTING: u8 = 0b10;
const SESSION_FLAGS_KNOWN: u8 = SESSION_FLAG_SNAPSHOT | SESSION_FLAG_IMPORTING;
/// Offset of the flags byte: after the crc (4) and the key (8).
const SESSION_FLAGS_OFFSET: usize = 4 + 8;
const SESSION_HEADER_BYTES: usize = SESSION_FLAGS_OFFSET + 1;
const _: () = assert!(SESSION_HEADER_BYTES == 13);

/// `crc32 u32 LE | key u64 LE | flags u8 | header JSON`; the crc covers bytes [4, len).
pub(crate) fn encode_session(record: &SessionRecord) -> Vec<u8> {
    let mut bytes = vec![0; 4];
    bytes.extend_from_slice(&record.key.to_le_bytes());
    let mut flags = 0;
    if record.snapshot {
        flags |= SESSION_FLAG_SNAPSHOT;
    }
    if record.importing {
        flags |= SESSION_FLAG_IMPORTING;
    }
    bytes.push(flags);
    debug_assert_eq!(bytes.len(), SESSION_HEADER_BYTES);
    serde_json::to_writer(&mut bytes, &record.header).expect("a header always serializes");
    let crc = crc32(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Whether a session record that passes its crc carries the importing flag: a session an
/// import has not finished. A record failing its crc is not one (readers report it instead).
pub(crate) fn is_importing(record: &[u8]) -> bool {
    record.len() >= SESSION_HEADER_BYTES
        && crc32(&record[4..]) == u32_le(&record[..4])
        && record[SESSION_FLAGS_OFFSET] & SESSION_FLAG_IMPORTING != 0
}

/// The record a finished import leaves of `record`, the one a session creation logged in the
/// WAL: the same bytes with the importing flag cleared and the crc recomputed. `None` when
/// `record` is too short or has no importing flag (its crc is not checked here).
pub(crate) fn with_import_finished(record: &[u8]) -> Option<Vec<u8>> {
    let flags = *record.get(SESSION_FLAGS_OFFSET)?;
    if flags & SESSION_FLAG_IMPORTING == 0 {
        return None;
    }
    let mut bytes = record.to_vec();
    bytes[SESSION_FLAGS_OFFSET] = flags & !SESSION_FLAG_IMPORTING;
    let crc = crc32(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(bytes.len(), record.len());
    Some(bytes)
}

/// The session record a logged creation holds (its crc and header checked), for WAL replay.
pub(crate) fn logged_session_record(bytes: &[u8]) -> Result<SessionRecord, String> {
    if bytes.len() < SESSION_HEADER_BYTES {
        return Err("too short".to_owned());
    }
    if crc32(&bytes[4..]) != u32_le(&bytes[..4]) {
        return Err("checksum mismatch".to_owned());
    }
    let header: SessionHeader =
        serde_json::from_slice(&bytes[SESSION_HEADER_BYTES..]).map_err(|e| e.to_string())?;
    decode_session(&header.id, bytes).map_err(|e| e.to_string())
}

pub(crate) fn decode_session(id: &str, bytes: &[u8]) -> Result<SessionRecord, StoreError> {
    let invalid = |reason: String| StoreError::Corrupt {
        reason: format!("session {id} record: {reason}"),
    };
    if bytes.len() < SESSION_HEADER_BYTES {
        return Err(invalid("too short".to_owned()));
    }
    if crc32(&bytes[4..]) != u32_le(&bytes[..4]) {
        return Err(invalid("checksum mismatch".to_owned()));
    }
    let key = u64::from_le_bytes(
        bytes[4..SESSION_FLAGS_OFFSET]
            .try_into()
            .expect("8-byte field"),
    );
    let flags = bytes[SESSION_FLAGS_OFFSET];
    if flags & !SESSION_FLAGS_KNOWN != 0 {
        return Err(invalid(format!("unknown flags {flags:#04x}")));
    }
    let header: SessionHeader = serde_json::from_slice(&bytes[SESSION_HEADER_BYTES..])
        .map_err(|e| invalid(e.to_string()))?;
    if header.id != id {
        return Err(invalid(format!("names session {}", header.id)));
    }
    if stored_version(&header).is_none() {
        return Err(invalid(format!(
            "its header names format version {:?}, not 3 or 4",
            header.version
        )));
    }
    Ok(SessionRecord {
        key,
        snapshot: flags & SESSION_FLAG_SNAPSHOT != 0,
        importing: flags & SESSION_FLAG_IMPORTING != 0,
        header,
    })
}

/// A persisted fold checkpoint: `crc32 | checkpoint version u32 | next_seq u64 | chain [32] |
/// zstd(binary(FoldCheckpoint))`; the crc covers bytes [4, len).
pub(crate) struct CheckpointRecord {
    pub(crate) version: u32,
    pub(crate) next_seq: u64,
    pub(crate) chain: ChainHash,
    pub(crate) body: Vec<u8>,
}

const CHECKPOINT_HEADER_BYTES: usize = 4 + 4 + 8 + 32;

pub(crate) fn encode_checkpoint(record: &CheckpointRecord) -> Vec<u8> {
    let mut bytes = vec![0; 4];
    bytes.extend_from_slice(&record.version.to_le_bytes());
    bytes.extend_from_slice(&record.next_seq.to_le_bytes());
    bytes.extend_from_slice(&record.chain);
    bytes.extend_from_slice(&record.body);
    let crc = crc32(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

pub(crate) fn decode_checkpoint(bytes: &[u8]) -> Result<CheckpointRecord, String> {
    let header = decode_checkpoint_header(bytes)?;
    Ok(CheckpointRecord {
        version: header.version,
        next_seq: header.next_seq,
        chain: header.chain,
        body: bytes[CHECKPOINT_HEADER_BYTES..].to_vec(),
    })
}

/// A checkpoint record's fixed fields, its crc checked over the whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckpointHeader {
    pub(crate) version: u32,
    pub(crate) next_seq: u64,
    pub(crate) chain: ChainHash,
}

/// What [`decode_checkpoint`] gives but the body: for the readers that only need where a
/// checkpoint stands, without copying it.
pub(crate) fn decode_checkpoint_header(bytes: &[u8]) -> Result<CheckpointHeader, String> {
    if bytes.len() < CHECKPOINT_HEADER_BYTES {
        return Err("checkpoint record is too short".to_owned());
    }
    if crc32(&bytes[4..]) != u32_le(&bytes[..4]) {
        return Err("checkpoint record checksum mismatch".to_owned());
    }
    Ok(CheckpointHeader {
        version: u32_le(&bytes[4..8]),
        next_seq: u64::from_le_bytes(bytes[8..16].try_into().expect("8-byte field")),
        chain: bytes[16..48].try_into().expect("32-byte field"),
    })
}

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn u32_le(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4-byte field"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(id: &str) -> SessionHeader {
        let line = format!(
            r#"{{"type":"session","version":3,"id":"{id}","createdAt":1,"isSeeded":false,"delegationDepth":0}}"#
        );
        serde_json::from_str(&line).expect("a valid V3 header")
    }

    // Goal: both flag bits survive an encode and a decode, alone and together, and the byte
    // at offset 12 is exactly the documented bits (docs/format.md, "Session record").
    #[test]
    fn session_flags_round_trip() {
        for (snapshot, importing, byte) in [
            (false, false, 0u8),
            (true, false, 1),
            (false, true, 2),
            (true, true, 3),
        ] {
            let record = SessionRecord {
                key: 7,
                snapshot,
                importing,
                header: header("a"),
            };
            let bytes = encode_session(&record);
            assert_eq!(bytes[12], byte);
            assert_eq!(decode_session("a", &bytes).unwrap(), record);
            assert_eq!(logged_session_record(&bytes).unwrap(), record);
        }
    }

    // Goal: a session record keeps its session's version (the header's), V3 and V4 alike, and
    // a record naming any other version is corruption, so no reader folds it by the wrong
    // rules; a V4 session needs store version 3, a V3 one version 2.
    #[test]
    fn session_records_keep_their_version() {
        for (version, store_version) in [(3, STORE_VERSION_BLOCKS), (4, STORE_VERSION_V4_SESSIONS)]
        {
            let mut record = SessionRecord {
                key: 1,
                snapshot: false,
                importing: false,
                header: header("a"),
            };
            record.header.version = Some(version);
            let decoded = decode_session("a", &encode_session(&record)).unwrap();
            let found = stored_version(&decoded.header).unwrap();
            assert_eq!(found.number(), version);
            assert_eq!(store_version_for(found), store_version);
        }
        for version in [None, Some(2), Some(5)] {
            let mut record = SessionRecord {
                key: 1,
                snapshot: false,
                importing: false,
                header: header("a"),
            };
            record.header.version = version;
            let error = decode_session("a", &encode_session(&record)).unwrap_err();
            assert!(error.to_string().contains("not 3 or 4"), "{error}");
        }
    }

    // Goal: the meta record names the version it was encoded with, and a newer one than this
    // build's is refused as an upgrade, not misread.
    #[test]
    fn meta_records_name_their_version() {
        for version in [1, STORE_VERSION_BLOCKS, STORE_VERSION_V4_SESSIONS] {
            assert_eq!(check_meta(&encode_meta(version)).unwrap(), version);
        }
        let newer = check_meta(&encode_meta(STORE_FORMAT_VERSION + 1)).unwrap_err();
        assert!(
            matches!(newer, StoreError::UpgradeRequired { .. }),
            "{newer}"
        );
    }

    // Goal: an unknown flag bit is corruption, not ignored.
    // Method: set bit 2 and fix the crc, so only the flags can refuse it.
    #[test]
    fn unknown_session_flags_are_refused() {
        let record = SessionRecord {
            key: 0,
            snapshot: false,
            importing: false,
            header: header("a"),
        };
        let mut bytes = encode_session(&record);
        bytes[12] = 0b100;
        let crc = crc32(&bytes[4..]);
        bytes[..4].copy_from_slice(&crc.to_le_bytes());
        let error = decode_session("a", &bytes).unwrap_err().to_string();
        assert!(error.contains("unknown flags 0x04"), "{error}");
    }

    // Goal: the record a finished import leaves is the creation record with only the
    // importing bit cleared, so WAL replay can tell "the store is ahead" from any other
    // difference; a record without the bit has no finished form.
    #[test]
    fn a_finished_import_clears_only_its_bit() {
        let importing = SessionRecord {
            key: 3,
            snapshot: true,
            importing: true,
            header: header("s"),
        };
        let finished = SessionRecord {
            importing: false,
            ..importing.clone()
        };
        let created = encode_session(&importing);
        assert_eq!(
            with_import_finished(&created),
            Some(encode_session(&finished))
        );
        assert_eq!(with_import_finished(&encode_session(&finished)), None);
        assert!(is_importing(&created));
        assert!(!is_importing(&encode_session(&finished)));
        let mut damaged = created.clone();
        damaged[20] ^= 1;
        assert!(
            !is_importing(&damaged),
            "a record failing its crc is not hidden"
        );
        assert_eq!(with_import_finished(&created[..12]), None);
    }
}
