//! The redb tables of a store and the small records kept in them (docs/format.md, "Store").

use redb::TableDefinition;
use sessionlog_format::record::ChainHash;
use sessionlog_format::SessionHeader;

use crate::store::StoreError;

/// `"store"` -> the store's meta record (magic and versions).
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Session id -> session record (numeric key and header).
pub(crate) const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
/// `(session key, seq)` -> event record (`sessionlog_format::record`).
pub(crate) const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("events");
/// Session key -> the latest fold checkpoint record.
pub(crate) const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");

pub(crate) const META_KEY: &str = "store";

/// The store's magic, at the start of the meta record.
pub(crate) const STORE_MAGIC: [u8; 8] = *b"SESSLOG\0";
/// The version of this store layout (tables and records); readers refuse newer ones.
pub const STORE_FORMAT_VERSION: u32 = 2;
const META_BYTES: usize = 8 + 4 + 4;

/// Encodes the meta record: magic, store version, crc32 of the first 12 bytes.
pub(crate) fn encode_meta() -> Vec<u8> {
    let mut bytes = Vec::with_capacity(META_BYTES);
    bytes.extend_from_slice(&STORE_MAGIC);
    bytes.extend_from_slice(&STORE_FORMAT_VERSION.to_le_bytes());
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

/// A session's record: its numeric key, its flags and its V3 header line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionRecord {
    pub(crate) key: u64,
    /// The session was imported from a normalized dsh recording (spec 18): its rules admit
    /// `{{placeholder}}` values.
    pub(crate) snapshot: bool,
    pub(crate) header: SessionHeader,
}

/// Session flag bit: a normalized recording.
const SESSION_FLAG_SNAPSHOT: u8 = 0b1;
const SESSION_HEADER_BYTES: usize = 4 + 8 + 1;

/// `crc32 u32 LE | key u64 LE | flags u8 | header JSON`; the crc covers bytes [4, len).
pub(crate) fn encode_session(record: &SessionRecord) -> Vec<u8> {
    let mut bytes = vec![0; 4];
    bytes.extend_from_slice(&record.key.to_le_bytes());
    bytes.push(if record.snapshot {
        SESSION_FLAG_SNAPSHOT
    } else {
        0
    });
    serde_json::to_writer(&mut bytes, &record.header).expect("a header always serializes");
    let crc = crc32(&bytes[4..]);
    bytes[..4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The session id a session record names (its crc checked), for WAL replay.
pub(crate) fn session_record_id(bytes: &[u8]) -> Result<String, String> {
    if bytes.len() < SESSION_HEADER_BYTES {
        return Err("too short".to_owned());
    }
    if crc32(&bytes[4..]) != u32_le(&bytes[..4]) {
        return Err("checksum mismatch".to_owned());
    }
    let header: SessionHeader =
        serde_json::from_slice(&bytes[SESSION_HEADER_BYTES..]).map_err(|e| e.to_string())?;
    decode_session(&header.id, bytes).map_err(|e| e.to_string())?;
    Ok(header.id)
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
    let key = u64::from_le_bytes(bytes[4..12].try_into().expect("8-byte field"));
    let flags = bytes[12];
    if flags & !SESSION_FLAG_SNAPSHOT != 0 {
        return Err(invalid(format!("unknown flags {flags:#04x}")));
    }
    let header: SessionHeader = serde_json::from_slice(&bytes[SESSION_HEADER_BYTES..])
        .map_err(|e| invalid(e.to_string()))?;
    if header.id != id {
        return Err(invalid(format!("names session {}", header.id)));
    }
    Ok(SessionRecord {
        key,
        snapshot: flags & SESSION_FLAG_SNAPSHOT != 0,
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
    if bytes.len() < CHECKPOINT_HEADER_BYTES {
        return Err("checkpoint record is too short".to_owned());
    }
    if crc32(&bytes[4..]) != u32_le(&bytes[..4]) {
        return Err("checkpoint record checksum mismatch".to_owned());
    }
    Ok(CheckpointRecord {
        version: u32_le(&bytes[4..8]),
        next_seq: u64::from_le_bytes(bytes[8..16].try_into().expect("8-byte field")),
        chain: bytes[16..48].try_into().expect("32-byte field"),
        body: bytes[CHECKPOINT_HEADER_BYTES..].to_vec(),
    })
}

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn u32_le(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4-byte field"))
}
