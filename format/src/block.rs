//! Sealed blocks: a run of consecutive event records of one session, compressed together
//! (docs/format.md, "Block record").
//!
//! ```text
//! offset  size  field
//!      0     4  crc32       u32 LE   CRC-32 (IEEE) of bytes [4, len)
//!      4     4  len         u32 LE   the block record's whole length
//!      8     8  first_seq   u64 LE   seq of the first record
//!     16     4  count       u32 LE   records in the block, 1..=BLOCK_EVENTS_MAX
//!     20     4  raw_len     u32 LE   payload length before compression
//!     24    32  chain_in    [u8;32]  the chain hash before the first record
//!     56    32  chain_out   [u8;32]  the chain hash of the last record
//!     88        payload              one zstd frame
//! payload := (tail_len u32 LE | record bytes [36, len))^count
//! ```
//!
//! A record keeps its exact bytes through sealing: the payload holds each record without its
//! crc and chain (36 bytes no compressor can shrink), and [`decode_block`] rebuilds both by
//! walking the chain from `chain_in`, so every rebuilt record is byte-identical to the one that
//! was appended and its chain link is checked by construction. `chain_out` must equal the
//! rebuilt chain of the last record, which ties the block to the records after it.

use crate::record::{self, ChainHash, RecordError, RECORD_HEADER_BYTES};

pub const BLOCK_HEADER_BYTES: usize = 88;
/// Most records in one block.
pub const BLOCK_EVENTS_MAX: usize = 1024;
/// A block is closed once its records reach this many bytes.
pub const BLOCK_RAW_BYTES_TARGET: usize = 1 << 20;
/// Largest payload: the target plus one record of the largest size.
pub const BLOCK_RAW_BYTES_MAX: usize = BLOCK_RAW_BYTES_TARGET + (80 << 20);
/// zstd level of block payloads. Measured on sealed payloads of a generated session (100k
/// events, 1 MiB blocks), against the `.jsonl.zstd` of the same events at level 3: level 1
/// 1.19x the size at 450 MB/s, level 2 1.08x at 389 MB/s, level 3 1.03x at 315 MB/s.
pub const BLOCK_ZSTD_LEVEL: i32 = 2;

const CRC_BYTES: usize = 4;
const CHAIN_END: usize = CRC_BYTES + 32;
const TAIL_LEN_BYTES: usize = 4;

/// Why a block could not be read or written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    #[error("block is {size_bytes} bytes, its header says {declared}")]
    Truncated { size_bytes: usize, declared: usize },
    #[error("block checksum mismatch: stored {expected:#010x}, computed {got:#010x}")]
    ChecksumMismatch { expected: u32, got: u32 },
    #[error("block header: {reason}")]
    Header { reason: String },
    #[error("block payload: {reason}")]
    Payload { reason: String },
    #[error("block record {index} (seq {seq}): {source}")]
    Record {
        index: usize,
        seq: u64,
        source: RecordError,
    },
    #[error("block chain: the last record's chain is not the stored chain_out")]
    ChainOut,
}

/// The fixed fields of a block, read from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub len: u32,
    pub first_seq: u64,
    pub count: u32,
    pub raw_len: u32,
    pub chain_in: ChainHash,
    pub chain_out: ChainHash,
}

impl BlockHeader {
    /// The seq after the block's last record.
    pub fn end_seq(&self) -> u64 {
        self.first_seq + u64::from(self.count)
    }
}

/// A decoded block: its records rebuilt byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub header: BlockHeader,
    records: Vec<u8>,
    ends: Vec<usize>,
}

impl Block {
    /// The record of `seq`, when the block holds it.
    pub fn record(&self, seq: u64) -> Option<&[u8]> {
        let index = usize::try_from(seq.checked_sub(self.header.first_seq)?).ok()?;
        let end = *self.ends.get(index)?;
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        Some(&self.records[start..end])
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the block holds no record.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Every record with its seq, in order.
    pub fn records(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        (self.header.first_seq..)
            .zip(starts.zip(self.ends.iter().copied()))
            .map(|(seq, (start, end))| (seq, &self.records[start..end]))
    }
}

fn u32_le(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4-byte field"))
}

fn len_u32(len: usize, what: &str) -> Result<u32, BlockError> {
    u32::try_from(len).map_err(|_| BlockError::Header {
        reason: format!("{what} of {len} bytes does not fit in u32"),
    })
}

/// How [`encode_block_with`] knows a record's chain link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Recomputed: `blake3(previous chain || tail)` must equal the chain the record holds.
    Check,
    /// Made by the writer of this process in one pass with the record before it (the sealer's
    /// records of one staged append request, encoded in one loop from one head): the record's
    /// crc and header are checked and its chain is taken as written, so that sealing does not
    /// hash every record a second time. A wrong link still cannot pass unseen: `chain_out` is
    /// the last chain as written, and every reader rebuilds the chain from `chain_in` and
    /// compares. A block's first record is always checked, whatever its link says.
    Written,
}

/// Encodes records `first_seq..` (consecutive, each following the previous one's chain,
/// the first following `chain_in`) as one block record. The records are checked on the way
/// in: their seqs must be dense and each chain link must hold.
///
/// The payload is sized once from the records (no growth copies), and the zstd frame is
/// written straight after the header by a compression context the thread keeps (the sealer
/// seals one block after another).
pub fn encode_block<'r, I>(
    first_seq: u64,
    chain_in: &ChainHash,
    records: I,
) -> Result<Vec<u8>, BlockError>
where
    I: IntoIterator<Item = &'r [u8]>,
    I::IntoIter: Clone,
{
    encode_block_with(
        first_seq,
        chain_in,
        records.into_iter().map(|record| (record, Link::Check)),
    )
}

/// [`encode_block`] for records whose links the caller may know already ([`Link::Written`]):
/// their crcs, headers and seqs are checked, and the chain is recomputed for every
/// [`Link::Check`] record and for the first one.
pub fn encode_block_with<'r, I>(
    first_seq: u64,
    chain_in: &ChainHash,
    records: I,
) -> Result<Vec<u8>, BlockError>
where
    I: IntoIterator<Item = (&'r [u8], Link)>,
    I::IntoIter: Clone,
{
    let records = records.into_iter();
    let payload_bytes: usize = records
        .clone()
        .map(|(record, _)| 4 + record.len().saturating_sub(CHAIN_END))
        .sum();
    let mut payload = Vec::with_capacity(payload_bytes);
    let mut chain = *chain_in;
    let mut count = 0usize;
    for (index, (record, link)) in records.enumerate() {
        let seq = first_seq + index as u64;
        let wrap = |source| BlockError::Record { index, seq, source };
        let header = match link {
            Link::Written if index > 0 => record::check_record_crc(record),
            _ => record::check_record(record, &chain),
        }
        .map_err(wrap)?;
        if header.seq != seq {
            return Err(wrap(RecordError::SeqMismatch {
                expected: seq,
                got: header.seq,
            }));
        }
        chain = header.chain;
        let tail = &record[CHAIN_END..];
        payload.extend_from_slice(&len_u32(tail.len(), "a record")?.to_le_bytes());
        payload.extend_from_slice(tail);
        count += 1;
    }
    if count == 0 || count > BLOCK_EVENTS_MAX {
        return Err(BlockError::Header {
            reason: format!("a block holds 1 to {BLOCK_EVENTS_MAX} records, not {count}"),
        });
    }
    if payload.len() > BLOCK_RAW_BYTES_MAX {
        return Err(BlockError::Header {
            reason: format!(
                "a payload of {} bytes is over {BLOCK_RAW_BYTES_MAX}",
                payload.len()
            ),
        });
    }
    let mut out =
        Vec::with_capacity(BLOCK_HEADER_BYTES + zstd::zstd_safe::compress_bound(payload.len()));
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&len_u32(count, "a count")?.to_le_bytes());
    out.extend_from_slice(&len_u32(payload.len(), "a payload")?.to_le_bytes());
    out.extend_from_slice(chain_in);
    out.extend_from_slice(&chain);
    debug_assert_eq!(out.len(), BLOCK_HEADER_BYTES);
    compress_payload(&payload, &mut out).map_err(|e| BlockError::Payload {
        reason: e.to_string(),
    })?;
    let len = len_u32(out.len(), "a block")?;
    out[CRC_BYTES..CRC_BYTES + 4].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&out[CRC_BYTES..]);
    out[..CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Appends `payload` as one zstd frame to `out`, which has room for the largest frame, with
/// the thread's context at the block level (the sealer seals one block after another).
fn compress_payload(payload: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    record::with_compressor(BLOCK_ZSTD_LEVEL, |compressor| {
        let mut after_header = std::io::Cursor::new(out);
        after_header.set_position(BLOCK_HEADER_BYTES as u64);
        compressor.compress_to_buffer(payload, &mut after_header)?;
        Ok(())
    })
}

/// Reads a block's fixed fields from its first [`BLOCK_HEADER_BYTES`] (no crc check: the
/// crc covers the whole block). Used to find where a block ends before reading all of it.
pub fn block_header(bytes: &[u8]) -> Result<BlockHeader, BlockError> {
    if bytes.len() < BLOCK_HEADER_BYTES {
        return Err(BlockError::Truncated {
            size_bytes: bytes.len(),
            declared: BLOCK_HEADER_BYTES,
        });
    }
    let chain = |offset: usize| -> ChainHash {
        bytes[offset..offset + 32]
            .try_into()
            .expect("32-byte field")
    };
    let header = BlockHeader {
        len: u32_le(bytes, 4),
        first_seq: u64::from_le_bytes(bytes[8..16].try_into().expect("8-byte field")),
        count: u32_le(bytes, 16),
        raw_len: u32_le(bytes, 20),
        chain_in: chain(24),
        chain_out: chain(56),
    };
    let count = header.count as usize;
    if count == 0 || count > BLOCK_EVENTS_MAX {
        return Err(BlockError::Header {
            reason: format!("count {count} is not within 1..={BLOCK_EVENTS_MAX}"),
        });
    }
    if header.raw_len as usize > BLOCK_RAW_BYTES_MAX {
        return Err(BlockError::Header {
            reason: format!("raw_len {} is over {BLOCK_RAW_BYTES_MAX}", header.raw_len),
        });
    }
    if (header.len as usize) < BLOCK_HEADER_BYTES {
        return Err(BlockError::Header {
            reason: format!("len {} is shorter than the header", header.len),
        });
    }
    if header
        .first_seq
        .checked_add(u64::from(header.count))
        .is_none()
    {
        return Err(BlockError::Header {
            reason: "the block's seqs overflow u64".to_owned(),
        });
    }
    Ok(header)
}

/// Checks a block record's length, header and crc, without decompressing it.
pub fn check_block_crc(bytes: &[u8]) -> Result<BlockHeader, BlockError> {
    let header = block_header(bytes)?;
    if bytes.len() != header.len as usize {
        return Err(BlockError::Truncated {
            size_bytes: bytes.len(),
            declared: header.len as usize,
        });
    }
    let expected = u32_le(bytes, 0);
    let got = crc32fast::hash(&bytes[CRC_BYTES..]);
    if expected != got {
        return Err(BlockError::ChecksumMismatch { expected, got });
    }
    Ok(header)
}

/// Checks a block record (length, crc, header, payload) and rebuilds its records, checking
/// each one's header, its seq and the chain through to `chain_out`.
pub fn decode_block(bytes: &[u8]) -> Result<Block, BlockError> {
    BlockDecoder::default().decode(bytes)
}

/// Buffers of each kind a [`BlockDecoder`] keeps for its next blocks: two, so that a block
/// whose rebuild another thread finishes (and whose buffers come back later) does not make
/// the next one allocate afresh.
const SPARES_MAX: usize = 2;

/// Decodes blocks one after another reusing its buffers: the decompressed payload, the zstd
/// context, and the record buffers of a block handed back with [`BlockDecoder::recycle`]. A
/// walk over a session's blocks then allocates about once instead of about 2 MiB per block,
/// which the allocator would otherwise keep resident for a while after each block is freed.
/// It decodes exactly as [`decode_block`] does, with the same errors.
///
/// A decode is two steps, which [`BlockDecoder::decode`] runs one after the other:
/// [`BlockDecoder::start`] checks the block's crc and header and decompresses its payload,
/// and the [`Rebuild`] it returns rebuilds the records one by one. A rebuild may be carried to
/// another thread and finished there (`verify`'s block reader hands a block part way rebuilt
/// to a walk that waits for it).
#[derive(Default)]
pub struct BlockDecoder {
    /// Payload buffers handed back, at most [`SPARES_MAX`].
    payloads: Vec<Vec<u8>>,
    context: Option<zstd::bulk::Decompressor<'static>>,
    /// Record buffers handed back, at most [`SPARES_MAX`].
    spares: Vec<(Vec<u8>, Vec<usize>)>,
    /// Rebuilt records get a zero crc instead of their own ([`BlockDecoder::without_record_crcs`]).
    zero_crcs: bool,
}

impl std::fmt::Debug for BlockDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDecoder")
            .field("payloads", &self.payloads.len())
            .field("zero_crcs", &self.zero_crcs)
            .finish_non_exhaustive()
    }
}

impl BlockDecoder {
    /// A decoder whose rebuilt records carry a zero crc instead of their own, for a reader
    /// that checks every record through its block and never writes or hands out the record
    /// bytes (`verify`): a rebuilt record's crc is computed from the record, never checked
    /// against anything stored (the block's own crc covers the stored bytes, the chain
    /// through to `chain_out` every record), so computing it checks nothing.
    pub fn without_record_crcs() -> BlockDecoder {
        BlockDecoder {
            zero_crcs: true,
            ..BlockDecoder::default()
        }
    }

    /// Hands back a decoded block whose buffers the next [`BlockDecoder::decode`] reuses.
    pub fn recycle(&mut self, block: Block) {
        if self.spares.len() < SPARES_MAX {
            self.spares.push((block.records, block.ends));
        }
    }

    /// Hands back the payload buffer a finished rebuild gave back ([`Rebuild::finish`]), for
    /// the next decode.
    pub fn recycle_payload(&mut self, payload: Vec<u8>) {
        if self.payloads.len() < SPARES_MAX {
            self.payloads.push(payload);
        }
    }

    /// [`decode_block`] into this decoder's buffers.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Block, BlockError> {
        let (block, payload) = self.start(bytes)?.finish();
        self.recycle_payload(payload);
        block
    }

    /// The first step of [`BlockDecoder::decode`]: the block's length, header and crc
    /// checked, its payload decompressed and checked for length. The records are rebuilt by
    /// the [`Rebuild`] returned.
    pub fn start(&mut self, bytes: &[u8]) -> Result<Rebuild, BlockError> {
        let header = check_block_crc(bytes)?;
        let payload_fault = |e: std::io::Error| BlockError::Payload {
            reason: e.to_string(),
        };
        let context = match &mut self.context {
            Some(context) => context,
            slot => slot.insert(zstd::bulk::Decompressor::new().map_err(payload_fault)?),
        };
        // Exactly the room `zstd::bulk::decompress` gives, so that a payload too large for
        // its header fails the same way.
        let source = &bytes[BLOCK_HEADER_BYTES..];
        let raw_len = header.raw_len as usize;
        let room = zstd::bulk::Decompressor::upper_bound(source)
            .unwrap_or(raw_len)
            .min(raw_len);
        let mut payload = self.payloads.pop().unwrap_or_default();
        payload.resize(room, 0);
        let written = match context.decompress_to_buffer(source, payload.as_mut_slice()) {
            Ok(written) => written,
            Err(e) => {
                self.payloads.push(payload);
                return Err(payload_fault(e));
            }
        };
        payload.truncate(written);
        if payload.len() != header.raw_len as usize {
            let reason = format!("{} bytes, expected {}", payload.len(), header.raw_len);
            self.payloads.push(payload);
            return Err(BlockError::Payload { reason });
        }
        let count = header.count as usize;
        let (mut records, mut ends) = self.spares.pop().unwrap_or_default();
        records.clear();
        ends.clear();
        records.reserve(payload.len() + count * CHAIN_END);
        ends.reserve(count);
        Ok(Rebuild {
            header,
            chain: header.chain_in,
            payload,
            at: 0,
            records,
            ends,
            zero_crcs: self.zero_crcs,
            outcome: None,
        })
    }
}

/// A block whose payload is decompressed and whose records are being rebuilt, one
/// [`Rebuild::step`] at a time, by walking the chain from `chain_in`
/// ([`BlockDecoder::start`]). However the steps are split, and on whichever thread they run,
/// [`Rebuild::finish`] gives what [`decode_block`] gives.
pub struct Rebuild {
    header: BlockHeader,
    /// The chain of the last record rebuilt (`chain_in` before the first).
    chain: ChainHash,
    payload: Vec<u8>,
    /// Where the next record's tail length starts in `payload`.
    at: usize,
    records: Vec<u8>,
    ends: Vec<usize>,
    zero_crcs: bool,
    /// Set once the rebuild failed or every record is rebuilt and checked.
    outcome: Option<Result<(), BlockError>>,
}

impl std::fmt::Debug for Rebuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebuild")
            .field("first_seq", &self.header.first_seq)
            .field("rebuilt", &self.ends.len())
            .field("count", &self.header.count)
            .finish_non_exhaustive()
    }
}

impl Rebuild {
    /// Rebuilds the next record; false once there is none left to rebuild (every record
    /// rebuilt and the block's end checked, or the rebuild failed: [`Rebuild::finish`] says
    /// which).
    pub fn step(&mut self) -> bool {
        if self.outcome.is_some() {
            return false;
        }
        let index = self.ends.len();
        let result = if index == self.header.count as usize {
            self.check_end()
        } else {
            match self.rebuild_one(index) {
                Ok(()) => return true,
                Err(error) => Err(error),
            }
        };
        self.outcome = Some(result);
        false
    }

    /// Rebuilds what is left and gives the block, or why it does not decode, with the payload
    /// buffer for [`BlockDecoder::recycle_payload`].
    pub fn finish(mut self) -> (Result<Block, BlockError>, Vec<u8>) {
        while self.step() {}
        let block = match self.outcome {
            Some(Err(error)) => Err(error),
            // `step` returns false only once it has set the outcome.
            Some(Ok(())) | None => Ok(Block {
                header: self.header,
                records: self.records,
                ends: self.ends,
            }),
        };
        (block, self.payload)
    }

    fn rebuild_one(&mut self, index: usize) -> Result<(), BlockError> {
        let seq = self.header.first_seq + index as u64;
        let payload_error = |reason: String| BlockError::Payload {
            reason: format!("record {index} (seq {seq}): {reason}"),
        };
        let rest = &self.payload[self.at..];
        if rest.len() < TAIL_LEN_BYTES {
            return Err(payload_error("the payload ends early".to_owned()));
        }
        let tail_len = u32_le(rest, 0) as usize;
        let rest = &rest[TAIL_LEN_BYTES..];
        if tail_len > rest.len() || tail_len < RECORD_HEADER_BYTES - CHAIN_END {
            return Err(payload_error(format!("a record tail of {tail_len} bytes")));
        }
        let tail = &rest[..tail_len];
        self.at += TAIL_LEN_BYTES + tail_len;
        let records = &mut self.records;
        let start = records.len();
        self.chain = record::chain_after(&self.chain, tail);
        records.extend_from_slice(&[0; CRC_BYTES]);
        records.extend_from_slice(&self.chain);
        records.extend_from_slice(tail);
        if !self.zero_crcs {
            let crc = crc32fast::hash(&records[start + CRC_BYTES..]);
            records[start..start + CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
        }
        let rebuilt = &records[start..];
        let wrap = |source| BlockError::Record { index, seq, source };
        // The crc was computed just above (or is not kept): only the header fields are left
        // to check.
        let record_header = record::read_header(rebuilt).map_err(wrap)?;
        if record_header.seq != seq {
            return Err(wrap(RecordError::SeqMismatch {
                expected: seq,
                got: record_header.seq,
            }));
        }
        self.ends.push(records.len());
        Ok(())
    }

    /// After the last record: nothing left in the payload, and the chain ends at `chain_out`.
    fn check_end(&self) -> Result<(), BlockError> {
        let left = self.payload.len() - self.at;
        if left != 0 {
            return Err(BlockError::Payload {
                reason: format!("{left} bytes after the last record"),
            });
        }
        if self.chain != self.header.chain_out {
            return Err(BlockError::ChainOut);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
