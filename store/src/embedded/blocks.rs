//! Sealed blocks in redb, and reading a session's records wherever they are kept.
//!
//! A session's records live in two places: the oldest ones sealed into compressed blocks
//! (`sessionlog_format::block`), the rest one by one in the events table. Every sealed seq is
//! below every unsealed one, and the blocks of a session tile `0..sealed_end` without gaps.
//! A block is stored as parts of at most [`BLOCK_PART_BYTES`], keyed
//! `(session key, first_seq, part)`: redb gives a value bigger than a page a power-of-two run
//! of pages, which would waste a third of a block on average, while a part fills one page.
//! [`Records`] reads by seq or by range across both tables, keeping the last decoded block;
//! `super::sealer` moves full runs of records into blocks.

use std::borrow::Cow;

use redb::{ReadableTable, TableDefinition};
use sessionlog_format::block::{self, Block, BlockDecoder, BlockError, BlockHeader};
use sessionlog_format::record::{self, ChainHash, RecordError, RecordHeader};

use super::StoreError;

/// `(session key, first_seq, part)` -> one part of a block record.
pub(crate) const BLOCKS: TableDefinition<(u64, u64, u32), &[u8]> = TableDefinition::new("blocks");

/// Largest part of a block record: one part and its key fit in one 4 KiB redb leaf page.
pub(crate) const BLOCK_PART_BYTES: usize = 4000;

/// Stores `bytes`, the block record starting at `first_seq`, as its parts.
pub(crate) fn insert_block(
    blocks: &mut redb::Table<(u64, u64, u32), &[u8]>,
    key: u64,
    first_seq: u64,
    bytes: &[u8],
) -> Result<(), StoreError> {
    for (part, chunk) in (0u32..).zip(bytes.chunks(BLOCK_PART_BYTES)) {
        blocks
            .insert((key, first_seq, part), chunk)
            .map_err(StoreError::storage)?;
    }
    Ok(())
}

/// The parts of the block at `first_seq`, joined; `None` when there is no such block. A gap
/// in the part numbers leaves the joined bytes short, which the block's length field catches.
pub(crate) fn block_bytes(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    session: &str,
    key: u64,
    first_seq: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut out = Vec::new();
    let mut found = false;
    for (expected_part, entry) in (0u32..).zip(parts(blocks, key, first_seq)?) {
        let (stored_key, part) = entry.map_err(StoreError::storage)?;
        let (stored_session, stored_first_seq, part_number) = stored_key.value();
        if (stored_session, stored_first_seq) != (key, first_seq) {
            return Err(index_damaged(session, first_seq, stored_key.value()));
        }
        if part_number != expected_part {
            break;
        }
        out.extend_from_slice(part.value());
        found = true;
    }
    Ok(found.then_some(out))
}

/// A range of the blocks table.
type PartsRange<'a> = redb::Range<'a, (u64, u64, u32), &'static [u8]>;

/// The parts of the block at `first_seq` of session `key`, as every read of a block asks
/// for them (a search for its first part, then the pages in order).
fn parts<T>(blocks: &T, key: u64, first_seq: u64) -> Result<PartsRange<'_>, StoreError>
where
    T: ReadableTable<(u64, u64, u32), &'static [u8]>,
{
    blocks
        .range((key, first_seq, 0)..=(key, first_seq, u32::MAX))
        .map_err(StoreError::storage)
}

/// A range of the blocks table gave `stored`, a key outside the range asked for the block at
/// `first_seq`: redb never does that unless the table's pages are damaged (a search through
/// a damaged branch page lands beside the key it looks for). Without this check the block
/// would read as absent, and a read would end early as if the session ended there.
fn index_damaged(session: &str, first_seq: u64, stored: (u64, u64, u32)) -> StoreError {
    StoreError::corrupt_at(
        session,
        first_seq,
        format!(
            "the blocks table's index is damaged: asked for the block at {first_seq}, it gave \
             {}",
            describe_found(Some(stored))
        ),
    )
}

/// The first_seq of the block that would hold `seq`: the last block starting at or before it.
pub(crate) fn block_start_at_or_before(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    session: &str,
    key: u64,
    seq: u64,
) -> Result<Option<u64>, StoreError> {
    let Some(stored) = search(blocks, key, seq)? else {
        return Ok(None);
    };
    if stored.0 != key || stored.1 > seq {
        return Err(index_damaged(session, seq, stored));
    }
    Ok(Some(stored.1))
}

/// The key a search of the blocks table for the block holding `seq` of session `key` lands on:
/// the last at or before `(key, seq, u32::MAX)`, as every read of a sealed seq searches.
fn search(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    key: u64,
    seq: u64,
) -> Result<Option<(u64, u64, u32)>, StoreError> {
    let mut range = blocks
        .range((key, 0, 0)..=(key, seq, u32::MAX))
        .map_err(StoreError::storage)?;
    match range.next_back() {
        None => Ok(None),
        Some(entry) => Ok(Some(entry.map_err(StoreError::storage)?.0.value())),
    }
}

/// What is wrong when a read of the block at `first_seq` of session `key`, found where it is
/// by a walk of the table in order, would not find it. Reads search the table three ways, each
/// asked here as a read asks it: for the block holding a seq ([`block_start_at_or_before`],
/// here for the block's first seq and its last, `end_seq - 1`, when its header says where it
/// ends), for its parts ([`block_bytes`]), and for its first part alone
/// ([`first_part_header`]). The pages in order hold the block, so a search landing beside it
/// means a damaged branch page: reads of those seqs are refused ([`index_damaged`]), and a
/// walk in order never sees it. `None` when every search lands where it should. (A read also
/// asks for the parts of the block after this one, at `end_seq`: the next block's own check
/// asks that, and [`last_block_problem`] asks it after the last block.)
pub(crate) fn search_problem(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    key: u64,
    first_seq: u64,
    end_seq: Option<u64>,
) -> Result<Option<String>, StoreError> {
    let last_seq = end_seq.map(|end| end.saturating_sub(1));
    for seq in std::iter::once(first_seq).chain(last_seq.filter(|&last| last > first_seq)) {
        let found = search(blocks, key, seq)?;
        if !matches!(found, Some((k, s, _)) if (k, s) == (key, first_seq)) {
            let search = format!("a search for the block holding seq {seq}");
            return Ok(Some(landed_beside(&search, found, first_seq)));
        }
    }
    let first_part = first_key(parts(blocks, key, first_seq)?)?;
    if first_part != Some((key, first_seq, 0)) {
        let search = format!("a search for the parts of the block at {first_seq}");
        return Ok(Some(landed_beside(&search, first_part, first_seq)));
    }
    if blocks
        .get((key, first_seq, 0))
        .map_err(StoreError::storage)?
        .is_none()
    {
        let search = format!("a lookup of the first part of the block at {first_seq}");
        return Ok(Some(landed_beside(&search, None, first_seq)));
    }
    Ok(None)
}

/// What is wrong when the searches a read makes past a session's sealed blocks do not land
/// where a walk of the table in order found the last block (`last`: its first seq and, when
/// its header says it, its end; `None` with no block): the search for the last block, which
/// tells a read where the sealed records end ([`sealed_end_seq`], and a read that finds no
/// block where it looks), and the search for the parts of a block at the last one's end,
/// which must find none ([`block_bytes`], as a read past the last block asks). `None` when
/// both do.
pub(crate) fn last_block_problem(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    key: u64,
    last: Option<(u64, Option<u64>)>,
) -> Result<Option<String>, StoreError> {
    let found = search(blocks, key, u64::MAX)?;
    let Some((last, end_seq)) = last else {
        return Ok(found.map(|found| {
            format!(
                "the blocks table's index is damaged: a search for the session's last block \
                 finds {}, though the table's pages in order hold no block of the session",
                describe_found(Some(found))
            )
        }));
    };
    if !matches!(found, Some((k, s, _)) if (k, s) == (key, last)) {
        let search = "a search for the session's last block";
        return Ok(Some(landed_beside(search, found, last)));
    }
    if let Some(end_seq) = end_seq {
        let after = first_key(parts(blocks, key, end_seq)?)?;
        if after.is_some() {
            let search = format!("a search for a block after it, at {end_seq},");
            return Ok(Some(landed_beside(&search, after, last)));
        }
    }
    Ok(None)
}

/// Whether a lookup of the unsealed record of `seq` (session `key`), found where it is by a
/// walk of the events table in order, finds it: every read of that seq looks it up so
/// ([`Records::get`], and [`Records::for_each`] to tell where a range starts). The pages in
/// order hold the record, so a lookup that misses it means a damaged branch page.
pub(crate) fn unsealed_found(
    events: &impl ReadableTable<(u64, u64), &'static [u8]>,
    key: u64,
    seq: u64,
) -> Result<bool, StoreError> {
    Ok(events
        .get((key, seq))
        .map_err(StoreError::storage)?
        .is_some())
}

/// The fault of the lookups of the unsealed records `first..=last` that found nothing
/// ([`unsealed_found`]): one fault for a run of them, since one damaged separator hides many.
pub(crate) fn unsealed_lookup_fault(first: u64, last: u64) -> String {
    let seqs = match first == last {
        true => format!("a lookup of seq {first} finds"),
        false => format!("lookups of seqs {first}..={last} find"),
    };
    format!(
        "the events table's index is damaged: {seqs} nothing, though the table's pages in \
         order hold them; reads of them are refused"
    )
}

/// What is wrong when the range a read of a whole session's unsealed records asks for
/// ([`Records::for_each`]: from the first unsealed seq, `first`, to the head, past `last`)
/// does not start at `first` or does not end at `last`, where a walk of the events table in
/// order found them.
pub(crate) fn unsealed_range_problem(
    events: &impl ReadableTable<(u64, u64), &'static [u8]>,
    key: u64,
    first: u64,
    last: u64,
) -> Result<Option<String>, StoreError> {
    let mut range = events
        .range((key, first)..(key, last.saturating_add(1)))
        .map_err(StoreError::storage)?;
    let mut ends = [None, None];
    for (end, entry) in ends.iter_mut().zip([range.next(), range.next_back()]) {
        if let Some(entry) = entry {
            *end = Some(entry.map_err(StoreError::storage)?.0.value());
        }
    }
    let [starts, stops] = ends;
    if starts == Some((key, first)) && stops.is_none_or(|stop| stop == (key, last)) {
        return Ok(None);
    }
    let describe = |found: Option<(u64, u64)>| match found {
        Some((stored_key, seq)) => format!("seq {seq} (session key {stored_key})"),
        None => "nothing".to_owned(),
    };
    Ok(Some(format!(
        "the events table's index is damaged: the range of seqs {first}..={last} starts at {} \
         and ends at {}, though the table's pages in order hold them all; reads of them are \
         refused",
        describe(starts),
        describe(stops.or(starts))
    )))
}

/// The first key of a range of the blocks table.
fn first_key(mut range: PartsRange<'_>) -> Result<Option<(u64, u64, u32)>, StoreError> {
    match range.next() {
        None => Ok(None),
        Some(entry) => Ok(Some(entry.map_err(StoreError::storage)?.0.value())),
    }
}

/// The fault of a search of the blocks table (`search`, what it asked) that found `found`
/// where the pages in order hold the block at `first_seq`.
fn landed_beside(search: &str, found: Option<(u64, u64, u32)>, first_seq: u64) -> String {
    format!(
        "the blocks table's index is damaged: {search} finds {}, though the table's pages in \
         order hold the block at {first_seq}; reads of its seqs are refused",
        describe_found(found)
    )
}

fn describe_found(found: Option<(u64, u64, u32)>) -> String {
    match found {
        Some((stored_key, stored_first_seq, part)) => {
            format!("part {part} of the block at {stored_first_seq} (session key {stored_key})")
        }
        None => "nothing".to_owned(),
    }
}

/// The seq after a session's last block by its first part's header (0 with no block; the
/// block's first seq when that header does not read, the block's own read then failing):
/// where its sealed records end, without reading the block.
pub(crate) fn sealed_end_seq(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    session: &str,
    key: u64,
) -> Result<u64, StoreError> {
    let Some(first_seq) = block_start_at_or_before(blocks, session, key, u64::MAX)? else {
        return Ok(0);
    };
    let header = first_part_header(blocks, key, first_seq)?;
    Ok(header.map_or(first_seq, |h| h.end_seq()))
}

/// The header in the first part of the block at `first_seq`, when it reads and says that seq
/// (`None` otherwise: the block's own read then reports what is wrong).
fn first_part_header(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    key: u64,
    first_seq: u64,
) -> Result<Option<BlockHeader>, StoreError> {
    let part = blocks
        .get((key, first_seq, 0))
        .map_err(StoreError::storage)?;
    let header = part.and_then(|p| block::block_header(p.value()).ok());
    Ok(header.filter(|h| h.first_seq == first_seq))
}

/// Where a session's sealed blocks end: the seq after the last block (0 with none) and the
/// chain hash of that block's last record (`genesis` with none). The last block's crc is
/// checked; a damaged last block is corruption.
pub(crate) fn sealed_end(
    blocks: &impl ReadableTable<(u64, u64, u32), &'static [u8]>,
    session: &str,
    key: u64,
    genesis: &ChainHash,
) -> Result<(u64, ChainHash), StoreError> {
    let Some(first_seq) = block_start_at_or_before(blocks, session, key, u64::MAX)? else {
        return Ok((0, *genesis));
    };
    let bytes = block_bytes(blocks, session, key, first_seq)?.ok_or_else(|| {
        StoreError::corrupt_at(session, first_seq, "the block's first part is missing")
    })?;
    let header = block::check_block_crc(&bytes).map_err(|e| block_fault(session, first_seq, &e))?;
    if header.first_seq != first_seq {
        return Err(StoreError::corrupt_at(
            session,
            first_seq,
            format!(
                "the block is keyed at {first_seq} but says {}",
                header.first_seq
            ),
        ));
    }
    Ok((header.end_seq(), header.chain_out))
}

fn block_fault(session: &str, first_seq: u64, error: &BlockError) -> StoreError {
    StoreError::corrupt_at(
        session,
        first_seq,
        format!("the block at seq {first_seq}: {error}"),
    )
}

/// Decodes the block at `first_seq` through `decoder` (whose buffers a walk over many blocks
/// reuses) and checks it sits where its key says.
pub(crate) fn decode_at_with(
    decoder: &mut BlockDecoder,
    bytes: &[u8],
    first_seq: u64,
) -> Result<Block, BlockError> {
    keyed_at(decoder.decode(bytes)?, first_seq)
}

/// A decoded block, checked to sit where its key says (`first_seq`).
pub(crate) fn keyed_at(block: Block, first_seq: u64) -> Result<Block, BlockError> {
    if block.header.first_seq != first_seq {
        return Err(BlockError::Header {
            reason: format!(
                "the block is keyed at seq {first_seq} but starts at {}",
                block.header.first_seq
            ),
        });
    }
    Ok(block)
}

/// A session's sealed records: its blocks, with the last one decoded kept for reads that
/// walk the same block.
pub(crate) struct Sealed<'t, B> {
    blocks: &'t B,
    session: &'t str,
    key: u64,
    cached: Option<Block>,
    /// Decodes the next block into the buffers of the one it replaces.
    decoder: BlockDecoder,
}

impl<'t, B> Sealed<'t, B>
where
    B: ReadableTable<(u64, u64, u32), &'static [u8]>,
{
    pub(crate) fn new(blocks: &'t B, session: &'t str, key: u64) -> Self {
        Sealed {
            blocks,
            session,
            key,
            cached: None,
            decoder: BlockDecoder::default(),
        }
    }

    /// The block starting at `first_seq`, decoded (or from the cache).
    fn load_block(&mut self, first_seq: u64) -> Result<Option<&Block>, StoreError> {
        let hit = matches!(&self.cached, Some(b) if b.header.first_seq == first_seq);
        if !hit {
            let Some(bytes) = block_bytes(self.blocks, self.session, self.key, first_seq)? else {
                return Ok(None);
            };
            if let Some(old) = self.cached.take() {
                self.decoder.recycle(old);
            }
            let block = decode_at_with(&mut self.decoder, &bytes, first_seq)
                .map_err(|e| block_fault(self.session, first_seq, &e))?;
            self.cached = Some(block);
        }
        Ok(self.cached.as_ref())
    }

    /// Whether the block at `first_seq` ends at or before `seq`, read from its first part's
    /// header alone (an unreadable header says no: the block is decoded and its fault shown).
    fn ends_at_or_before(&self, first_seq: u64, seq: u64) -> Result<bool, StoreError> {
        let cached = self
            .cached
            .as_ref()
            .filter(|b| b.header.first_seq == first_seq);
        if let Some(block) = cached {
            return Ok(block.header.end_seq() <= seq);
        }
        let header = first_part_header(self.blocks, self.key, first_seq)?;
        Ok(header.is_some_and(|h| h.end_seq() <= seq))
    }

    /// Checks that no block starts after `first_seq`, where a block was looked for and not
    /// found: the sealed records end there (the rest, if any, is in the events table). A later
    /// block means the one at `first_seq` is lost to a damaged index or a lost part, and a
    /// read that went on past it as if the session ended would return a short session.
    fn check_none_after(&self, first_seq: u64) -> Result<(), StoreError> {
        match block_start_at_or_before(self.blocks, self.session, self.key, u64::MAX)? {
            Some(last) if last > first_seq => Err(StoreError::corrupt_at(
                self.session,
                first_seq,
                format!(
                    "the block at {first_seq} is missing, though a later block starts at {last}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The sealed record of `seq`, or `None` when no block holds it.
    pub(crate) fn record(&mut self, seq: u64) -> Result<Option<&[u8]>, StoreError> {
        let Some(first_seq) = block_start_at_or_before(self.blocks, self.session, self.key, seq)?
        else {
            return Ok(None);
        };
        let Some(block) = self.load_block(first_seq)? else {
            return Ok(None);
        };
        Ok(block.record(seq))
    }
}

/// A session's records, read from its blocks and its events table.
pub(crate) struct Records<'t, E, B> {
    events: &'t E,
    sealed: Sealed<'t, B>,
    key: u64,
}

impl<'t, E, B> Records<'t, E, B>
where
    E: ReadableTable<(u64, u64), &'static [u8]>,
    B: ReadableTable<(u64, u64, u32), &'static [u8]>,
{
    pub(crate) fn new(events: &'t E, blocks: &'t B, session: &'t str, key: u64) -> Self {
        Records {
            events,
            sealed: Sealed::new(blocks, session, key),
            key,
        }
    }

    /// The record of `seq`, or `None` when neither table holds it.
    pub(crate) fn get(&mut self, seq: u64) -> Result<Option<Cow<'_, [u8]>>, StoreError> {
        if let Some(bytes) = self
            .events
            .get((self.key, seq))
            .map_err(StoreError::storage)?
        {
            return Ok(Some(Cow::Owned(bytes.value().to_vec())));
        }
        Ok(self.sealed.record(seq)?.map(Cow::Borrowed))
    }

    /// Calls `f` with every record of `from_seq..to_seq` that is stored, in seq order, the
    /// first `max_records` of them: the blocks' records, then the events table's. Density is
    /// the caller's to check. A record rebuilt from a block comes with the chain it was
    /// rebuilt from (`Some(prev_chain)`): its link was computed while rebuilding, so the
    /// caller only compares that chain with its own instead of hashing the record again.
    pub(crate) fn for_each(
        &mut self,
        from_seq: u64,
        to_seq: u64,
        max_records: usize,
        mut f: impl FnMut(u64, &[u8], Option<&ChainHash>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let left = std::cell::Cell::new(max_records);
        let mut f = |seq: u64, bytes: &[u8], link: Option<&ChainHash>| {
            if left.get() == 0 {
                return Ok(false);
            }
            left.set(left.get() - 1);
            f(seq, bytes, link)?;
            Ok::<bool, StoreError>(true)
        };
        let mut next = from_seq;
        // A range that starts in the events table has nothing sealed in it.
        let unsealed = self
            .events
            .get((self.key, from_seq))
            .map_err(StoreError::storage)?
            .is_some();
        let start = match unsealed {
            true => None,
            false => block_start_at_or_before(
                self.sealed.blocks,
                self.sealed.session,
                self.key,
                from_seq,
            )?,
        };
        // A range past the last block (a tail asking for what comes after the head) must not
        // decode that block: its first part's header says where it ends.
        let start = match start {
            Some(first_seq) if self.sealed.ends_at_or_before(first_seq, from_seq)? => None,
            other => other,
        };
        if let Some(mut first_seq) = start {
            while next < to_seq {
                let Some(block) = self.sealed.load_block(first_seq)? else {
                    self.sealed.check_none_after(first_seq)?;
                    break;
                };
                let mut prev_chain = block.header.chain_in;
                for (seq, record) in block.records() {
                    if seq >= next && seq < to_seq && !f(seq, record, Some(&prev_chain))? {
                        return Ok(());
                    }
                    prev_chain.copy_from_slice(&record[4..36]);
                }
                let end = block.header.end_seq();
                if end <= next {
                    break;
                }
                next = end;
                first_seq = end;
            }
        }
        if next >= to_seq || left.get() == 0 {
            return Ok(());
        }
        let range = self
            .events
            .range((self.key, next)..(self.key, to_seq))
            .map_err(StoreError::storage)?;
        for entry in range {
            let (stored_key, bytes) = entry.map_err(StoreError::storage)?;
            if !f(stored_key.value().1, bytes.value(), None)? {
                break;
            }
        }
        Ok(())
    }
}

/// Checks a record read through [`Records::for_each`] and its link to `chain`
/// ([`record_header`], then [`check_link_of`]).
pub(crate) fn check_link(
    record: &[u8],
    chain: &ChainHash,
    link: Option<&ChainHash>,
) -> Result<RecordHeader, RecordError> {
    let header = record_header(record, link)?;
    check_link_of(record, &header, chain, link)?;
    Ok(header)
}

/// The checked header of a record read through [`Records::for_each`]: its crc and header
/// fields when it came from the events table (`link` is `None`); only its header fields when
/// it was rebuilt from a block, which its decoder checked whole (the block's crc, the chain
/// to `chain_out`); its crc is the decoder's computation, or zero from `verify`'s.
pub(crate) fn record_header(
    record: &[u8],
    link: Option<&ChainHash>,
) -> Result<RecordHeader, RecordError> {
    match link {
        Some(_) => record::read_header(record),
        None => record::check_record_crc(record),
    }
}

/// The link of a record whose header was read by [`record_header`] to `chain`: by hashing it
/// when it came from the events table (`link` is `None`), by comparing `chain` with the chain
/// it was rebuilt from when it came from a block.
pub(crate) fn check_link_of(
    record: &[u8],
    header: &RecordHeader,
    chain: &ChainHash,
    link: Option<&ChainHash>,
) -> Result<(), RecordError> {
    match link {
        Some(prev_chain) if prev_chain == chain => Ok(()),
        Some(_) => Err(RecordError::ChainMismatch),
        None => record::check_chain(record, header, chain),
    }
}

/// The header of a block record read by [`block_bytes`], for reports that must say which seqs
/// a damaged block covered.
pub(crate) fn header_of(bytes: &[u8]) -> Option<BlockHeader> {
    block::block_header(bytes).ok()
}
