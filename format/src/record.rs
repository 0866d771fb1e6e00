//! The store's own records: one checksummed, hash-chained record per event (docs/format.md).
//!
//! ```text
//! offset  size  field
//!      0     4  crc32       u32 LE   CRC-32 (IEEE) of bytes [4, len)
//!      4    32  chain       [u8;32]  blake3(previous chain || bytes [36, len))
//!     36     8  seq         u64 LE
//!     44     1  kind        u8       RECORD_KIND_EVENT
//!     45     1  flags       u8       bit 0: body is zstd-compressed; other bits are 0
//!     46     2  reserved    u16      0
//!     48     4  body_len    u32 LE   stored body length, len - 56
//!     52     4  raw_len     u32 LE   body length before compression
//!     56        body                 the event row in the binary encoding of `crate::binary`
//! ```
//!
//! The crc catches a damaged record; the chain catches a record that was altered together with
//! its crc, dropped, or moved. The chain of seq 0 starts from [`genesis_chain`] of the session
//! header, so the header is covered too.

#[cfg(test)]
mod tests;

use crate::binary::{self, BinaryError};
use crate::error::Violation;
use crate::event::Event;
use crate::header::SessionHeader;
use crate::row::{Decoded, EventRow, RowContext, RowSeed};
use crate::version::FormatVersion;

/// A 32-byte blake3 chain hash.
pub type ChainHash = [u8; 32];

pub const RECORD_HEADER_BYTES: usize = 56;
const CRC_BYTES: usize = 4;
const CHAIN_END: usize = CRC_BYTES + 32;
const SEQ_OFFSET: usize = CHAIN_END;
const KIND_OFFSET: usize = SEQ_OFFSET + 8;
const FLAGS_OFFSET: usize = KIND_OFFSET + 1;
const RESERVED_OFFSET: usize = FLAGS_OFFSET + 1;
const BODY_LEN_OFFSET: usize = RESERVED_OFFSET + 2;
const RAW_LEN_OFFSET: usize = BODY_LEN_OFFSET + 4;
const _: () = assert!(RAW_LEN_OFFSET + 4 == RECORD_HEADER_BYTES);

/// The record kind of an event record.
pub const RECORD_KIND_EVENT: u8 = 1;
/// Flag bit: the body is one zstd frame.
pub const FLAG_ZSTD: u8 = 0b1;
/// Bodies at least this large were compressed by [`BodyEncoding::CompressLarge`].
pub const COMPRESS_BODY_BYTES_MIN: usize = 4096;
/// Largest body, compressed or not.
pub const BODY_BYTES_MAX: usize = 64 << 20;
/// zstd level of [`BodyEncoding::CompressLarge`] bodies.
const BODY_ZSTD_LEVEL: i32 = 1;

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("record is {size_bytes} bytes, shorter than its {RECORD_HEADER_BYTES}-byte header")]
    Truncated { size_bytes: usize },
    #[error("record checksum mismatch: stored {expected:#010x}, computed {got:#010x}")]
    ChecksumMismatch { expected: u32, got: u32 },
    #[error("record chain hash does not follow from the previous record")]
    ChainMismatch,
    #[error("record holds seq {got}, expected {expected}")]
    SeqMismatch { expected: u64, got: u64 },
    #[error("record header is invalid: {reason}")]
    Header { reason: String },
    #[error("record body is too large: {size_bytes} bytes, at most {BODY_BYTES_MAX}")]
    TooLarge { size_bytes: usize },
    #[error("record body cannot be compressed: {reason}")]
    Compress { reason: String },
    #[error("record body cannot be decompressed: {reason}")]
    Decompress { reason: String },
    #[error("record body is not a valid binary row: {0}")]
    Body(#[from] BinaryError),
    #[error("record body breaks an envelope rule: {0}")]
    Envelope(Violation),
}

/// The chain value that seq 0 follows: a hash of the session's canonical header line.
pub fn genesis_chain(header: &SessionHeader) -> ChainHash {
    let header_bytes = serde_json::to_vec(header).expect("a header always serializes");
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"sessionlog genesis v1\0");
    hasher.update(&header_bytes);
    *hasher.finalize().as_bytes()
}

/// Encodes `event` as a record following `prev_chain`; returns the record's own chain hash.
/// The body is stored as is (never compressed): the bytes a chain covers are then canonical,
/// the same on every build, and the store compresses sealed blocks of records instead.
pub fn encode_event(
    event: &Event,
    prev_chain: &ChainHash,
    out: &mut Vec<u8>,
) -> Result<ChainHash, RecordError> {
    encode_event_with(event, prev_chain, out, BodyEncoding::Plain)
}

/// How [`encode_event_with`] stores a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    /// As is: what this build writes.
    Plain,
    /// Bodies of [`COMPRESS_BODY_BYTES_MIN`] bytes or more as one zstd frame (level 1) when
    /// that is smaller: what store version 1 wrote, kept to check version 1 seals.
    CompressLarge,
}

/// Encodes `event` as a record following `prev_chain`, its body stored as `encoding` says.
pub fn encode_event_with(
    event: &Event,
    prev_chain: &ChainHash,
    out: &mut Vec<u8>,
    encoding: BodyEncoding,
) -> Result<ChainHash, RecordError> {
    let row = EventRow {
        event,
        version: FormatVersion::V3,
    };
    // The body is encoded in place after the header's room: no intermediate buffer.
    let start = out.len();
    out.resize(start + RECORD_HEADER_BYTES, 0);
    let body_start = start + RECORD_HEADER_BYTES;
    if let Err(error) = binary::to_vec(&row, out) {
        out.truncate(start);
        return Err(error.into());
    }
    let raw_len = out.len() - body_start;
    let (body_len, flags) = match encoding {
        BodyEncoding::Plain => (raw_len, 0),
        BodyEncoding::CompressLarge => match compress_if_smaller(&out[body_start..]) {
            Ok((std::borrow::Cow::Owned(compressed), flags)) => {
                out.truncate(body_start);
                out.extend_from_slice(&compressed);
                (compressed.len(), flags)
            }
            Ok((std::borrow::Cow::Borrowed(_), flags)) => (raw_len, flags),
            Err(error) => {
                out.truncate(start);
                return Err(error);
            }
        },
    };
    if body_len > BODY_BYTES_MAX || raw_len > BODY_BYTES_MAX {
        out.truncate(start);
        return Err(RecordError::TooLarge {
            size_bytes: raw_len.max(body_len),
        });
    }
    let record = &mut out[start..];
    record[SEQ_OFFSET..KIND_OFFSET].copy_from_slice(&event.seq.to_le_bytes());
    record[KIND_OFFSET] = RECORD_KIND_EVENT;
    record[FLAGS_OFFSET] = flags;
    record[BODY_LEN_OFFSET..RAW_LEN_OFFSET].copy_from_slice(&len_u32(body_len).to_le_bytes());
    record[RAW_LEN_OFFSET..RECORD_HEADER_BYTES].copy_from_slice(&len_u32(raw_len).to_le_bytes());
    let chain = chain_after(prev_chain, &record[CHAIN_END..]);
    record[CRC_BYTES..CHAIN_END].copy_from_slice(&chain);
    let crc = crc32fast::hash(&record[CRC_BYTES..]);
    record[..CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(
        check_record(record, prev_chain).map(|h| h.seq),
        Ok(event.seq)
    );
    Ok(chain)
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("bodies are bounded by BODY_BYTES_MAX, far below u32::MAX")
}

fn compress_if_smaller(raw: &[u8]) -> Result<(std::borrow::Cow<'_, [u8]>, u8), RecordError> {
    if raw.len() < COMPRESS_BODY_BYTES_MIN {
        return Ok((raw.into(), 0));
    }
    let compressed = compress_body(raw).map_err(|e| RecordError::Decompress {
        reason: e.to_string(),
    })?;
    if compressed.len() < raw.len() {
        Ok((compressed.into(), FLAG_ZSTD))
    } else {
        Ok((raw.into(), 0))
    }
}

thread_local! {
    // zstd contexts are expensive to create (hundreds of KiB each): each thread keeps one
    // compression context per level it compresses at (record bodies, sealed blocks) and one
    // decompression context for record bodies, each reused instead of one per call.
    static COMPRESSORS: std::cell::RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `compress` with the calling thread's zstd context at `level`, made on first use.
pub(crate) fn with_compressor<R>(
    level: i32,
    compress: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<R>,
) -> std::io::Result<R> {
    COMPRESSORS.with(|cell| {
        let mut kept = cell.borrow_mut();
        let index = match kept.iter().position(|(kept_level, _)| *kept_level == level) {
            Some(index) => index,
            None => {
                kept.push((level, zstd::bulk::Compressor::new(level)?));
                kept.len() - 1
            }
        };
        compress(&mut kept[index].1)
    })
}

fn compress_body(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    with_compressor(BODY_ZSTD_LEVEL, |compressor| compressor.compress(raw))
}

fn decompress_body(body: &[u8], raw_len: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let decompressor = match slot.as_mut() {
            Some(decompressor) => decompressor,
            None => slot.insert(zstd::bulk::Decompressor::new()?),
        };
        decompressor.decompress(body, raw_len)
    })
}

/// The chain hash of a record whose bytes `[36, len)` are `covered`, following `prev_chain`.
pub fn chain_after(prev_chain: &ChainHash, covered: &[u8]) -> ChainHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(prev_chain);
    hasher.update(covered);
    *hasher.finalize().as_bytes()
}

/// The fixed fields of a record whose crc and chain have been checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub seq: u64,
    pub chain: ChainHash,
    pub flags: u8,
    pub body_len: u32,
    pub raw_len: u32,
}

/// Checks a record's length, crc, header fields and chain link; does not decode the body.
pub fn check_record(record: &[u8], prev_chain: &ChainHash) -> Result<RecordHeader, RecordError> {
    let header = check_record_crc(record)?;
    check_chain(record, &header, prev_chain)?;
    Ok(header)
}

/// Checks that a record whose header was read already (`header`, from [`check_record_crc`]
/// or [`read_header`]) follows `prev_chain`: its chain is the hash of `prev_chain` and the
/// record's bytes after the chain.
pub fn check_chain(
    record: &[u8],
    header: &RecordHeader,
    prev_chain: &ChainHash,
) -> Result<(), RecordError> {
    if chain_after(prev_chain, &record[CHAIN_END..]) != header.chain {
        return Err(RecordError::ChainMismatch);
    }
    Ok(())
}

/// Checks a record's length, crc and header fields, without its chain link.
pub fn check_record_crc(record: &[u8]) -> Result<RecordHeader, RecordError> {
    if record.len() < RECORD_HEADER_BYTES {
        return Err(RecordError::Truncated {
            size_bytes: record.len(),
        });
    }
    let expected = u32::from_le_bytes(record[..CRC_BYTES].try_into().expect("4-byte field"));
    let got = crc32fast::hash(&record[CRC_BYTES..]);
    if expected != got {
        return Err(RecordError::ChecksumMismatch { expected, got });
    }
    read_header(record)
}

/// Checks a record's length and header fields, not its crc: for a record whose crc was
/// computed and checked where it was rebuilt (a sealed block's records, by
/// [`crate::block::BlockDecoder::decode`]), so that a reader does not hash it again.
pub fn read_header(record: &[u8]) -> Result<RecordHeader, RecordError> {
    if record.len() < RECORD_HEADER_BYTES {
        return Err(RecordError::Truncated {
            size_bytes: record.len(),
        });
    }
    let u32_at = |offset: usize| {
        u32::from_le_bytes(record[offset..offset + 4].try_into().expect("4-byte field"))
    };
    let header_error = |reason: String| Err(RecordError::Header { reason });
    if record[KIND_OFFSET] != RECORD_KIND_EVENT {
        return header_error(format!("unknown record kind {}", record[KIND_OFFSET]));
    }
    let flags = record[FLAGS_OFFSET];
    if flags & !FLAG_ZSTD != 0 || record[RESERVED_OFFSET..BODY_LEN_OFFSET] != [0, 0] {
        return header_error(format!("reserved bits are set (flags {flags:#04x})"));
    }
    let body_len = u32_at(BODY_LEN_OFFSET);
    let raw_len = u32_at(RAW_LEN_OFFSET);
    if body_len as usize != record.len() - RECORD_HEADER_BYTES {
        return header_error(format!("body length {body_len} does not match the record"));
    }
    if flags & FLAG_ZSTD == 0 && raw_len != body_len {
        return header_error("an uncompressed body must have raw_len == body_len".to_owned());
    }
    if raw_len as usize > BODY_BYTES_MAX {
        return Err(RecordError::TooLarge {
            size_bytes: raw_len as usize,
        });
    }
    let seq_bytes = record[SEQ_OFFSET..KIND_OFFSET]
        .try_into()
        .expect("8-byte field");
    let chain = record[CRC_BYTES..CHAIN_END]
        .try_into()
        .expect("32-byte field");
    Ok(RecordHeader {
        seq: u64::from_le_bytes(seq_bytes),
        chain,
        flags,
        body_len,
        raw_len,
    })
}

/// Checks a record against `prev_chain` and decodes its event, which must carry
/// `expected_seq`. Returns the event and the record's chain hash.
pub fn decode_event(
    record: &[u8],
    prev_chain: &ChainHash,
    expected_seq: u64,
) -> Result<(Event, ChainHash), RecordError> {
    let header = check_record(record, prev_chain)?;
    let event = decode_checked_body(record, &header, expected_seq)?;
    Ok((event, header.chain))
}

/// Decodes the body of a record whose header was checked by [`check_record`] or
/// [`check_record_crc`].
pub fn decode_checked_body(
    record: &[u8],
    header: &RecordHeader,
    expected_seq: u64,
) -> Result<Event, RecordError> {
    if record.len() < RECORD_HEADER_BYTES {
        return Err(RecordError::Truncated {
            size_bytes: record.len(),
        });
    }
    if header.seq != expected_seq {
        return Err(RecordError::SeqMismatch {
            expected: expected_seq,
            got: header.seq,
        });
    }
    let body = &record[RECORD_HEADER_BYTES..];
    let decompressed;
    let raw = if header.flags & FLAG_ZSTD != 0 {
        decompressed = decompress_body(body, header.raw_len as usize).map_err(|e| {
            RecordError::Decompress {
                reason: e.to_string(),
            }
        })?;
        if decompressed.len() != header.raw_len as usize {
            return Err(RecordError::Decompress {
                reason: format!("{} bytes, expected {}", decompressed.len(), header.raw_len),
            });
        }
        decompressed.as_slice()
    } else {
        body
    };
    let ctx = RowContext {
        version: FormatVersion::V3,
        snapshot: false,
        skim: false,
    };
    let decoded = binary::from_slice_seed(raw, RowSeed { ctx, expected_seq })?
        .map_err(RecordError::Envelope)?;
    match decoded {
        Decoded::One(event) if event.seq == expected_seq => Ok(*event),
        Decoded::One(event) => Err(RecordError::SeqMismatch {
            expected: expected_seq,
            got: event.seq,
        }),
        Decoded::Packed(_) => Err(RecordError::Header {
            reason: "a record holds one event, not a packed row".to_owned(),
        }),
    }
}
