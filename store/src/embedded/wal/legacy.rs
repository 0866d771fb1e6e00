//! Reading the WAL versions this build replays but no longer writes: 1 and 2 (frames appended
//! at the end of the file) and 3 (frames overwritten in place, each carrying the generation).

use std::path::Path;

use super::{
    parse_entries, WalEntry, FRAME_GENERATION_OFFSET_V3, FRAME_HEADER_APPENDED_BYTES,
    FRAME_HEADER_BYTES_V3, HEADER_BYTES, HEADER_PREFIX_BYTES, WAL_VERSION_APPENDED, WAL_VERSION_V3,
};
use crate::embedded::StoreError;

/// Parses a version 3 log: every valid frame of `generation` from the header on. Returns the
/// entries and the end of the log; a valid frame of `generation` after the end is corruption.
pub(super) fn parse_frames_v3(
    path: &Path,
    bytes: &[u8],
    generation: u64,
) -> Result<(Vec<WalEntry>, u64), StoreError> {
    let mut entries = Vec::new();
    let mut offset = HEADER_BYTES as usize;
    while let Some((parsed, frame_end)) = frame_v3_at(bytes, offset, generation) {
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
pub(super) fn frame_v3_at(
    bytes: &[u8],
    offset: usize,
    generation: u64,
) -> Option<(Vec<WalEntry>, usize)> {
    let frame = bytes.get(offset..)?;
    let len = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?) as usize;
    if len == 0 {
        return None;
    }
    let stored_crc = u32::from_le_bytes(frame.get(4..8)?.try_into().ok()?);
    let frame_len = FRAME_HEADER_BYTES_V3.checked_add(len)?;
    let covered = frame.get(FRAME_GENERATION_OFFSET_V3..frame_len)?;
    if covered[..8] != generation.to_le_bytes() || crc32fast::hash(covered) != stored_crc {
        return None;
    }
    let parsed = parse_entries(&covered[8..], WAL_VERSION_V3)?;
    Some((parsed, offset + frame_len))
}

/// The offset of a valid frame of `generation` that starts after `offset`, if any: the scan
/// looks for the generation's bytes where a frame carries them and checks each hit whole.
fn find_frame_after(bytes: &[u8], offset: usize, generation: u64) -> Option<usize> {
    let first_start = offset + 1;
    let first_hit = first_start + FRAME_GENERATION_OFFSET_V3;
    let windows = bytes.get(first_hit..)?.windows(8).enumerate();
    windows
        .filter(|(_, window)| {
            u64::from_le_bytes((*window).try_into().expect("8-byte window")) == generation
        })
        .map(|(idx, _)| first_start + idx)
        .find(|&start| frame_v3_at(bytes, start, generation).is_some())
}

/// Parses a version 1 or 2 log, whose frames were appended: returns the entries and the
/// length of the valid prefix. A damaged frame with bytes after it is corruption.
pub(super) fn parse_frames_appended(
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
