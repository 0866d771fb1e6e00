//! The relationship validator's fact journal as the stores keep it (docs/format.md, "Fact
//! segments"): beside the checkpoints, as segments keyed by the journal offset they start at,
//! so that a checkpoint names the journal by length and BLAKE3 hash instead of carrying it, and
//! writing one costs the facts added since the last one (amortized over the merges of runs
//! that keep the segments few, see [`FactsWritten`]).
//!
//! Every backend uses this module: [`FactsWritten`] is a session's writer side (what it has
//! stored, its runs, and the running hash), [`assemble`] the reader side (the journal's first `len`
//! bytes from the rows in offset order), [`encode_segment`] and [`decode_segment`] the row value.

use sessionlog_format::relations::FactJournal;

/// A fact segment to store: the journal offset it starts at, and its journal bytes.
pub(crate) type Segment = (u64, Vec<u8>);

/// Bytes of a segment row before the journal bytes: the CRC-32 of the bytes.
const SEGMENT_HEADER_BYTES: usize = 4;

/// The row value of a segment: the CRC-32 of `bytes`, then `bytes`.
pub(crate) fn encode_segment(bytes: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(SEGMENT_HEADER_BYTES + bytes.len());
    value.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
    value.extend_from_slice(bytes);
    value
}

/// The journal bytes of a segment row value, checked against its CRC.
pub(crate) fn decode_segment(value: &[u8]) -> Result<&[u8], String> {
    if value.len() < SEGMENT_HEADER_BYTES {
        return Err("a fact segment is too short".to_owned());
    }
    let (crc, bytes) = value.split_at(SEGMENT_HEADER_BYTES);
    if crc32fast::hash(bytes).to_le_bytes() != crc {
        return Err("a fact segment fails its checksum".to_owned());
    }
    Ok(bytes)
}

/// The first `len` bytes of a session's journal from its segment rows `(start, value)` in
/// ascending `start` order. Segments may overlap (writers that raced wrote the same bytes from
/// different offsets; the checkpoint's hash decides), but may not leave a gap. Reads no row
/// past the one that reaches `len`.
pub(crate) fn assemble<V: AsRef<[u8]>, E: std::fmt::Display>(
    len: u64,
    rows: impl IntoIterator<Item = Result<(u64, V), E>>,
) -> Result<Vec<u8>, String> {
    let mut journal = Vec::new();
    each_piece(len, rows, |piece| journal.extend_from_slice(piece))?;
    Ok(journal)
}

/// The BLAKE3 hash of the first `len` bytes of a session's journal, from its segment rows as
/// [`assemble`] reads them and with the same refusals, without holding the journal: a reader
/// that only checks a checkpoint's reference (`verify`) holds one row at a time.
pub(crate) fn journal_hash<V: AsRef<[u8]>, E: std::fmt::Display>(
    len: u64,
    rows: impl IntoIterator<Item = Result<(u64, V), E>>,
) -> Result<[u8; 32], String> {
    let mut hasher = blake3::Hasher::new();
    each_piece(len, rows, |piece| {
        hasher.update(piece);
    })?;
    Ok(*hasher.finalize().as_bytes())
}

/// Hands `take` the first `len` bytes of a journal from its segment rows, in order and each
/// byte once: what [`assemble`] collects and [`journal_hash`] hashes.
fn each_piece<V: AsRef<[u8]>, E: std::fmt::Display>(
    len: u64,
    rows: impl IntoIterator<Item = Result<(u64, V), E>>,
    mut take: impl FnMut(&[u8]),
) -> Result<(), String> {
    let mut at = 0_u64;
    for row in rows {
        if at >= len {
            break;
        }
        let (start, value) = row.map_err(|e| e.to_string())?;
        let bytes =
            decode_segment(value.as_ref()).map_err(|e| format!("{e} (at offset {start})"))?;
        if start > at {
            return Err(format!(
                "the fact segments leave a gap at offset {at} (the next starts at {start})"
            ));
        }
        let skip = usize::try_from(at - start).unwrap_or(usize::MAX);
        let wanted = usize::try_from(len - at).unwrap_or(usize::MAX);
        if let Some(new) = bytes.get(skip..) {
            let piece = &new[..new.len().min(wanted)];
            take(piece);
            at += piece.len() as u64;
        }
    }
    if at < len {
        return Err(format!(
            "the fact segments end at offset {at} before the checkpoint's {len}"
        ));
    }
    Ok(())
}

/// A session's fact journal as its writer has stored it: the length written, the running
/// hash of those bytes (computed from the fold's journal when first needed, so that opening a
/// session does not hash a journal it may never write to), and the runs it was stored in.
///
/// **Runs.** The stored journal is `runs`, `(start, len)` in offset order from offset 0: what
/// was stored before the writer resumed counts as one run, and each checkpoint adds the run of
/// the facts since the last one. A run at least half as long as the run before it is merged
/// into it, and the merged run is stored as one segment that replaces the segments from its
/// start on. Each run is then over twice as long as the next, so a session keeps about log2 of
/// its journal's length in segments (not one per checkpoint: a 10M-event session had 9,765,
/// and opening it read them all), and a byte is rewritten each time the bytes after it grow
/// to half of its run, about as many times.
///
/// **The cap.** Two runs are not merged when together they would pass [`SEGMENT_BYTES_MAX`]:
/// a row is read and written whole (redb reads a large value into one buffer of its size), so
/// without the cap the first segment held half the journal or more, and each read of it (a
/// `verify`, which hashes the journal a row at a time) and each merge into it (one
/// checkpoint's write) cost memory and time that grew with the log. With it a session keeps
/// a few segments per `SEGMENT_BYTES_MAX` of journal (test
/// `the_cap_bounds_every_segment_a_merge_makes`), and a byte is no longer rewritten once its
/// run has reached the cap.
#[derive(Debug, Clone)]
pub(crate) struct FactsWritten {
    len: u64,
    hasher: Option<blake3::Hasher>,
    runs: Vec<(u64, u64)>,
    /// The longest run a merge may make ([`SEGMENT_BYTES_MAX`]; smaller in tests).
    cap: u64,
}

/// The longest segment a writer makes by merging runs (a resumed journal may be stored as one
/// longer run, which is not merged into).
pub(crate) const SEGMENT_BYTES_MAX: u64 = 1 << 20;

impl FactsWritten {
    /// Nothing stored yet: the next segment starts the journal at offset 0, and replaces
    /// whatever segments the session had.
    pub(crate) fn new() -> FactsWritten {
        FactsWritten {
            len: 0,
            hasher: Some(blake3::Hasher::new()),
            runs: Vec::new(),
            cap: SEGMENT_BYTES_MAX,
        }
    }

    /// `journal` is stored (the journal a checkpoint named, as a resume read it), as one run.
    pub(crate) fn stored(journal: &[u8]) -> FactsWritten {
        let len = journal.len() as u64;
        FactsWritten {
            len,
            hasher: None,
            runs: if len == 0 { Vec::new() } else { vec![(0, len)] },
            cap: SEGMENT_BYTES_MAX,
        }
    }

    /// Moves on to `journal` (which extends what was stored): the reference a checkpoint of
    /// it holds, and the segment `(start, bytes)` to store with that checkpoint (none when the
    /// journal did not grow), which replaces the session's segments from `start` on.
    pub(crate) fn advance(&mut self, journal: &[u8]) -> (FactJournal, Option<Segment>) {
        let start = self.len;
        let new = usize::try_from(start)
            .ok()
            .and_then(|start| journal.get(start..))
            .expect("a fold's journal only grows past what its writer stored");
        let hasher = self.hasher.get_or_insert_with(|| {
            let mut hasher = blake3::Hasher::new();
            hasher.update(&journal[..journal.len() - new.len()]);
            hasher
        });
        hasher.update(new);
        self.len = journal.len() as u64;
        let reference = FactJournal::Stored {
            len: self.len,
            blake3: *hasher.finalize().as_bytes(),
        };
        if new.is_empty() {
            return (reference, None);
        }
        self.runs.push((start, new.len() as u64));
        while let [.., (_, before), (_, last)] = self.runs[..] {
            if last.saturating_mul(2) < before || before.saturating_add(last) > self.cap {
                break;
            }
            self.runs.pop();
            self.runs.last_mut().expect("two runs").1 += last;
        }
        let (from, _) = *self.runs.last().expect("a run");
        let segment = (from, journal[from as usize..].to_vec());
        (reference, Some(segment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(segments: &[(u64, &[u8])]) -> Vec<Result<(u64, Vec<u8>), String>> {
        let rows = segments.iter();
        rows.map(|(start, bytes)| Ok((*start, encode_segment(bytes))))
            .collect()
    }

    // Goal: a journal read back from its segments is the bytes written, to any length a
    // checkpoint named, whether segments abut or overlap; a gap, a short journal or a damaged
    // row is an error. The writer's references hash exactly the bytes before them.
    #[test]
    fn segments_assemble_to_the_journal_a_checkpoint_names() {
        let journal = b"abcdefghij";
        let mut written = FactsWritten::new();
        let (first, segment) = written.advance(&journal[..4]);
        assert_eq!(segment, Some((0, b"abcd".to_vec())));
        assert_eq!(first, FactJournal::stored(b"abcd"));
        let (same, none) = written.advance(&journal[..4]);
        assert_eq!((same, none), (first, None));
        let (second, segment) = written.advance(&journal[..5]);
        assert_eq!(
            segment,
            Some((4, b"e".to_vec())),
            "a run under half stays its own"
        );
        assert_eq!(second, FactJournal::stored(&journal[..5]));
        let (third, segment) = written.advance(journal);
        assert_eq!(segment, Some((0, journal.to_vec())), "longer runs merge");
        assert_eq!(third, FactJournal::stored(journal));
        let (resumed, _) = FactsWritten::stored(&journal[..4]).advance(journal);
        assert_eq!(resumed, third);

        let abut = rows(&[(0, b"abcd"), (4, b"efghij")]);
        for len in 0..=10 {
            assert_eq!(
                assemble(len, abut.clone()).unwrap(),
                &journal[..len as usize]
            );
        }
        let overlap = rows(&[(0, b"abcd"), (2, b"cdefg"), (4, b"efghij")]);
        assert_eq!(assemble(10, overlap).unwrap(), journal);
        assert_eq!(
            assemble(10, rows(&[(0, b"abc"), (4, b"efghij")])).unwrap_err(),
            "the fact segments leave a gap at offset 3 (the next starts at 4)"
        );
        assert_eq!(
            assemble(11, abut.clone()).unwrap_err(),
            "the fact segments end at offset 10 before the checkpoint's 11"
        );
        let mut damaged = abut;
        if let Ok((_, value)) = &mut damaged[1] {
            value[5] ^= 1;
        }
        assert_eq!(assemble(4, damaged.clone()).unwrap(), b"abcd");
        assert_eq!(
            assemble(5, damaged).unwrap_err(),
            "a fact segment fails its checksum (at offset 4)"
        );
        assert!(decode_segment(b"abc").is_err());
    }

    /// What storing a journal of `checkpoints` random growths (0 to 600 bytes each, a resume
    /// every 1,000) under a merge cap of `cap` left: the journal's length, the most segment
    /// rows a session held, the longest segment written, and how many times a byte was
    /// stored on average. Every checkpoint's reference and read-back are checked on the way.
    fn store_journal(checkpoints: u32, cap: u64) -> (u64, usize, usize, f64) {
        let mut rows: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        let mut journal = Vec::new();
        let mut written = FactsWritten::new();
        written.cap = cap;
        let mut seed = 7_u64;
        let (mut stored_bytes, mut most_rows, mut longest) = (0, 0, 0);
        for checkpoint in 1..=checkpoints {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let grown = (seed >> 33) % 601;
            journal.extend((0..grown).map(|i| (i as u8) ^ (checkpoint as u8)));
            if checkpoint % 1_000 == 0 {
                written = FactsWritten::stored(&journal[..journal.len() - grown as usize]);
                written.cap = cap;
            }
            let (reference, segment) = written.advance(&journal);
            assert_eq!(reference, FactJournal::stored(&journal));
            if let Some((start, bytes)) = segment {
                assert_eq!(start + bytes.len() as u64, journal.len() as u64);
                stored_bytes += bytes.len();
                longest = longest.max(bytes.len());
                rows.retain(|row_start, _| *row_start < start);
                rows.insert(start, encode_segment(&bytes));
            }
            most_rows = most_rows.max(rows.len());
            let len = journal.len() as u64;
            let read = || {
                rows.iter()
                    .map(|(start, value)| Ok::<_, String>((*start, value.as_slice())))
            };
            assert_eq!(assemble(len, read()).unwrap(), journal);
            let hash = journal_hash(len, read()).unwrap();
            assert_eq!(FactJournal::Stored { len, blake3: hash }, reference);
        }
        let rewrites = stored_bytes as f64 / journal.len() as f64;
        (journal.len() as u64, most_rows, longest, rewrites)
    }

    // Goal: however a journal grows, and wherever the writer resumed, the segments it writes
    // (each replacing the stored ones from its start on) read back as the journal each
    // checkpoint names, and hash as its reference; below the cap a session keeps about
    // log2(checkpoints) segments, and each byte is rewritten about that many times.
    #[test]
    fn merged_runs_keep_few_segments_that_read_back_as_the_journal() {
        let (len, most_rows, _, rewrites) = store_journal(4_000, u64::MAX);
        // Each run is over twice the next: at most log2 of the journal's length.
        let log2 = u64::BITS - len.leading_zeros();
        assert!(most_rows as u32 <= log2, "{most_rows} segments");
        assert!(
            rewrites <= f64::from(log2),
            "each byte stored {rewrites:.1} times"
        );
    }

    // Goal: no merge makes a segment longer than the cap, so a row read or written is at most
    // that long whatever the journal's length; the segments stay few per cap of journal and
    // a byte is stored fewer times than without the cap.
    #[test]
    fn the_cap_bounds_every_segment_a_merge_makes() {
        let cap = 16 << 10;
        let (len, most_rows, longest, rewrites) = store_journal(4_000, cap);
        assert!(
            len > 40 * cap,
            "the journal is many caps long ({len} bytes)"
        );
        assert!(longest as u64 <= cap, "a segment of {longest} bytes");
        let caps = usize::try_from(len / cap).unwrap();
        assert!(
            most_rows <= 3 * caps,
            "{most_rows} segments for {caps} caps"
        );
        let log2 = u64::BITS - cap.leading_zeros();
        assert!(
            rewrites <= f64::from(log2),
            "each byte stored {rewrites:.1} times"
        );
        assert_eq!(
            journal_hash(len + 1, std::iter::empty::<Result<(u64, &[u8]), String>>()).unwrap_err(),
            format!(
                "the fact segments end at offset 0 before the checkpoint's {}",
                len + 1
            )
        );
    }
}
