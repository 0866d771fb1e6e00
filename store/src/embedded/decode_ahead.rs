//! Reading and decoding the sealed blocks of the sessions `verify` walks on a thread of its
//! own, ahead of the walk.
//!
//! `verify` spends about half its time on a block before any rule sees it: reading its parts
//! from redb and joining them, the zstd decompression of the payload, and the chain rebuilt
//! record by record (BLAKE3) ([`BlockDecoder::decode`]). None of that depends on the walk, so
//! while the walk checks block `k` (the record checks, the body decoding, the fold), this
//! thread reads and decodes the blocks after it. One thread serves a whole `verify`, session
//! after session. What crosses the threads is a block at a time: the rebuilt records going to
//! the walk, which takes them without this thread, and the buffers coming back to be reused.
//! The thread reads another block only while what it handed over and the walk has not handed
//! back is little ([`InFlight::room`]): a full block besides the one walked, or up to 1,024
//! records of short ones (a session's last block, a small session's only one), so that the
//! walk, done with a short block, does not wait for the long one after it to be read and
//! decompressed. So verify holds a bounded number of blocks whatever the session's length.
//!
//! The two threads balance each other both ways. Before it hands a block over, the thread
//! decodes the block's bodies from its last record back (the walk's work, done ahead) for as
//! long as the walk has something else to take. When the walk is first to wait, with nothing
//! to take, it says so, and the thread hands its block over at once, part way through the
//! rebuild of its records (it looks between every few records); the walk rebuilds the rest
//! itself ([`Decoded::finish_rebuild`]): at a million events the rebuild's BLAKE3 alone is
//! about a quarter of `verify`'s CPU, and the thread was the one the walk waited for.
//!
//! The rebuilt records' crcs are left at zero ([`BlockDecoder::without_record_crcs`]): a
//! block's records are checked through the block (its crc, the chain through to
//! `chain_out`), a rebuilt record's crc would be computed, never checked, and a walk never
//! writes or hands out a record's bytes.
//!
//! The walk may name the sessions it walks next ahead of time ([`BlocksAhead::announce`]).
//! The thread then goes on into the next session once it has handed over a session's last
//! block and its end: the next session's first block is read and decoded while the walk is
//! still on the last one, and the walk then finishes the session (the events table, the
//! checkpoints). Without it, a store of many small sessions was walked one session at a time
//! on either side: the reader idle while the walk finished a session, the walk idle while the
//! reader read and decompressed the next one's first block (verify of 200 sessions of 200
//! events ran on 0.9 CPUs, now on 1.6 to 1.9). With a single block held ahead, a store of
//! sessions of 1,000 events (a full block and a short one each) still ran on 1.25 CPUs: the
//! next session's full block was read only once the walk took the short one.
//!
//! The walk receives exactly what decoding inline gives, in the same order; when the
//! operating system gives no thread, the blocks are read and decoded inline.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::ReadOnlyTable;
use sessionlog_format::block::{Block, BlockDecoder, BlockError, Rebuild};
use sessionlog_format::record;
use sessionlog_format::skim;
use sessionlog_format::Event;

use super::blocks::{self, BLOCK_PART_BYTES};
use super::StoreError;

/// The blocks table as a read transaction opens it.
pub(crate) type BlocksTable = ReadOnlyTable<(u64, u64, u32), &'static [u8]>;

/// A block as stored: its parts joined, keyed at `first_seq`; `dense` when no part number
/// was skipped.
pub(crate) struct Stored {
    pub first_seq: u64,
    pub bytes: Vec<u8>,
    pub dense: bool,
}

/// A stored block and what decoding it gave.
pub(crate) struct Decoded {
    pub stored: Stored,
    /// The block, once its records are rebuilt ([`Decoded::finish_rebuild`]; until then, an
    /// error saying so).
    pub block: Result<Block, BlockError>,
    rebuild: Rebuilding,
    /// Bodies of the block's last records, decoded by the reader while the walk was still on
    /// the block before (`Decoded::decode_one_body`).
    pub bodies: Bodies,
    /// The records its header counts (none when the header does not read): what the reader
    /// counts in flight ([`InFlight`]).
    records: usize,
}

/// Where a block's rebuild stands.
enum Rebuilding {
    /// Under way: the reader handed the block over part way, or has not finished it yet.
    Pending(Box<Rebuild>),
    /// Finished; its payload buffer waits to go back to a decoder.
    Spent(Vec<u8>),
    /// Nothing left: the buffer went back, or the block was refused before its rebuild.
    Done,
}

impl Decoded {
    #[cfg(test)]
    fn new(stored: Stored, block: Result<Block, BlockError>) -> Decoded {
        Decoded {
            stored,
            block,
            rebuild: Rebuilding::Done,
            bodies: Bodies::default(),
            records: 0,
        }
    }

    /// A block whose payload `start` decompressed (or refused), its records not rebuilt yet.
    fn started(stored: Stored, started: Result<Rebuild, BlockError>) -> Decoded {
        let (block, rebuild) = match started {
            Ok(rebuild) => (
                Err(BlockError::Payload {
                    reason: "the block's records are not rebuilt yet".to_owned(),
                }),
                Rebuilding::Pending(Box::new(rebuild)),
            ),
            Err(error) => (Err(error), Rebuilding::Done),
        };
        let records = blocks::header_of(&stored.bytes).map_or(0, |header| header.count as usize);
        Decoded {
            stored,
            block,
            rebuild,
            bodies: Bodies::default(),
            records,
        }
    }

    /// Rebuilds up to `n` more of the block's records; false once none is left (the block
    /// is then decoded, or refused).
    fn rebuild_some(&mut self, n: usize) -> bool {
        let Rebuilding::Pending(rebuild) = &mut self.rebuild else {
            return false;
        };
        if (0..n).all(|_| rebuild.step()) {
            return true;
        }
        self.finish_rebuild();
        false
    }

    /// The block's header: the decoded block's, else its first part's when that reads and
    /// names this block's first seq.
    pub(crate) fn header(&self) -> Option<sessionlog_format::block::BlockHeader> {
        match &self.block {
            Ok(block) => Some(block.header),
            Err(_) => super::blocks::header_of(&self.stored.bytes)
                .filter(|header| header.first_seq == self.stored.first_seq),
        }
    }

    /// Rebuilds what is left of the block's records, on the calling thread; then `block` is
    /// what decoding the stored block whole gives (the part check, the crc, the rebuild, the
    /// seq it is keyed at), however the rebuild was split.
    pub(crate) fn finish_rebuild(&mut self) {
        let rebuild = match std::mem::replace(&mut self.rebuild, Rebuilding::Done) {
            Rebuilding::Pending(rebuild) => rebuild,
            other => {
                self.rebuild = other;
                return;
            }
        };
        let (block, payload) = rebuild.finish();
        self.block = block.and_then(|block| blocks::keyed_at(block, self.stored.first_seq));
        self.rebuild = Rebuilding::Spent(payload);
    }

    /// Hands a finished rebuild's payload buffer back to `decoder` (nothing while the rebuild
    /// is under way), so that only a block handed over part way carries one across the threads.
    fn release_payload(&mut self, decoder: &mut BlockDecoder) {
        if let Rebuilding::Spent(payload) = &mut self.rebuild {
            decoder.recycle_payload(std::mem::take(payload));
            self.rebuild = Rebuilding::Done;
        }
    }

    /// Decodes the body of the last record whose body is not decoded yet, exactly as the walk
    /// would (`record::read_header`, then `record::decode_checked_body` at its seq); false when
    /// every record's body is decoded, [`BODIES_AHEAD_MAX`] are, or the block is not. A record
    /// whose header or body does not decode is left to the walk, which reports it.
    fn decode_one_body(&mut self) -> bool {
        let Ok(block) = &self.block else {
            return false;
        };
        if self.bodies.tail.len() >= BODIES_AHEAD_MAX {
            return false;
        }
        let Some(index) = block.len().checked_sub(self.bodies.tail.len() + 1) else {
            return false;
        };
        let seq = block.header.first_seq + index as u64;
        let Some(bytes) = block.record(seq) else {
            return false;
        };
        let event = record::read_header(bytes)
            .and_then(|header| {
                skim::skimming(true, || record::decode_checked_body(bytes, &header, seq))
            })
            .ok();
        self.bodies.tail.push(event);
        true
    }
}

/// Most bodies the reader decodes ahead in one block: a quarter of a full block, about what
/// balances the two threads (the walk's body decoding is 38% of `verify`'s samples, the
/// reader's own work 40%, the walk's other work 18%), so that verify holds at most a quarter
/// of each block's events beyond the blocks in flight ([`InFlight`]).
const BODIES_AHEAD_MAX: usize = 256;

/// Records the reader rebuilds between two looks at whether the walk waits for the block
/// (a look is a `try_send`; a record's rebuild, its BLAKE3 link, is about a microsecond).
const RECORDS_PER_POLL: usize = 4;

/// The bodies the reader decoded ahead, last record first.
#[derive(Default)]
pub(crate) struct Bodies {
    tail: Vec<Option<Event>>,
}

impl Bodies {
    /// The body of record `index` of a block of `n_records`, if the reader decoded it.
    pub(crate) fn take(&mut self, index: usize, n_records: usize) -> Option<Event> {
        let from_end = n_records.checked_sub(index + 1)?;
        self.tail.get_mut(from_end)?.take()
    }
}

/// Decodes a stored block whole, in one go (the tests' reference for a rebuild split between
/// the threads): a block with a part missing is refused before it is decoded.
#[cfg(test)]
pub(crate) fn decode(decoder: &mut BlockDecoder, stored: &Stored) -> Result<Block, BlockError> {
    check_parts(stored)?;
    blocks::decode_at_with(decoder, &stored.bytes, stored.first_seq)
}

/// The first step of a block's decode: the part check, the block's crc and header checked and
/// its payload decompressed; the rebuild of its records is left to the [`Rebuild`] returned.
fn start(decoder: &mut BlockDecoder, stored: &Stored) -> Result<Rebuild, BlockError> {
    check_parts(stored)?;
    decoder.start(&stored.bytes)
}

/// A block with a part missing is refused before it is decoded.
fn check_parts(stored: &Stored) -> Result<(), BlockError> {
    if stored.dense {
        return Ok(());
    }
    Err(BlockError::Payload {
        reason: "a part of the block is missing".to_owned(),
    })
}

/// Buffers a walk handed back, for the next blocks. The decoder leaves the rebuilt records'
/// crcs at zero: a walk checks each record through its block (the block's crc, the chain
/// through to `chain_out`) and never writes or hands out the records' bytes.
struct Spares {
    decoder: BlockDecoder,
    bytes: Vec<Vec<u8>>,
}

impl Default for Spares {
    fn default() -> Spares {
        Spares {
            decoder: BlockDecoder::without_record_crcs(),
            bytes: Vec::new(),
        }
    }
}

impl Spares {
    fn take_back(&mut self, mut decoded: Decoded) {
        decoded.release_payload(&mut self.decoder);
        self.bytes.push(decoded.stored.bytes);
        if let Ok(block) = decoded.block {
            self.decoder.recycle(block);
        }
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut bytes = self.bytes.pop().unwrap_or_default();
        bytes.clear();
        bytes
    }
}

/// Reads the blocks of session `key` in seq order, joins each one's parts and decodes it,
/// and gives each to `emit` (which returns false to stop); `refill` is asked for the
/// buffers handed back before each block. Returns how many parts were read.
fn each_block(
    table: &BlocksTable,
    key: u64,
    spares: &mut Spares,
    mut refill: impl FnMut(&mut Spares),
    mut emit: impl FnMut(Decoded, &mut Spares) -> bool,
) -> Result<u64, StoreError> {
    let mut n_parts = 0;
    let mut block: Option<Stored> = None;
    let mut finish = |stored: Stored, spares: &mut Spares| {
        let started = start(&mut spares.decoder, &stored);
        emit(Decoded::started(stored, started), spares)
    };
    for entry in table
        .range((key, 0, 0)..=(key, u64::MAX, u32::MAX))
        .map_err(StoreError::storage)?
    {
        let (part_key, bytes) = entry.map_err(StoreError::storage)?;
        let (_, first_seq, part) = part_key.value();
        n_parts += 1;
        if block.as_ref().is_some_and(|b| b.first_seq != first_seq) {
            let stored = block.take().expect("a block is open");
            if !finish(stored, spares) {
                return Ok(n_parts);
            }
        }
        let stored = match &mut block {
            Some(stored) => stored,
            None => {
                refill(spares);
                block.insert(Stored {
                    first_seq,
                    bytes: spares.buffer(),
                    dense: true,
                })
            }
        };
        stored.dense &= part == stored.bytes.len().div_ceil(BLOCK_PART_BYTES) as u32;
        stored.bytes.extend_from_slice(bytes.value());
    }
    if let Some(stored) = block.take() {
        finish(stored, spares);
    }
    Ok(n_parts)
}

/// What the thread sends for a session: its blocks in order, then how it ended.
enum Item {
    Block(Decoded),
    End(Result<u64, StoreError>),
}

/// The blocks of every session a `verify` walks, read and decoded ahead of the walk.
pub(crate) struct BlocksAhead {
    mode: Mode,
}

enum Mode {
    Thread {
        sessions: Option<Sender<u64>>,
        /// The sessions sent to the thread and not walked yet, in the order it serves them.
        announced: VecDeque<u64>,
        items: Receiver<Item>,
        spent: Sender<Decoded>,
        /// Set while the walk waits for an item with none to take: the thread then hands its
        /// block over part way rebuilt.
        waiting: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    },
    /// Boxed: a decoder's buffers and zstd context are large beside the thread's handles.
    Inline(Box<(BlocksTable, Spares)>),
    /// After an error: the thread is gone, and no session is served.
    Stopped,
}

impl BlocksAhead {
    /// Starts the thread that reads the blocks table of `txn`.
    pub(crate) fn start(txn: &redb::ReadTransaction) -> Result<BlocksAhead, StoreError> {
        let table = txn
            .open_table(blocks::BLOCKS)
            .map_err(StoreError::storage)?;
        let (sessions, incoming) = mpsc::channel::<u64>();
        // Not bounded by the channel: the thread holds back while the blocks out are many
        // (`InFlight`), and sends no session's end before the walk announced the session.
        let (send_item, items) = mpsc::channel::<Item>();
        let (spent, returned) = mpsc::channel::<Decoded>();
        let waiting = Arc::new(AtomicBool::new(false));
        let thread_waiting = Arc::clone(&waiting);
        let started = std::thread::Builder::new()
            .name("sessionlog-verify-blocks".into())
            .spawn(move || serve(&table, &incoming, &send_item, &returned, &thread_waiting));
        let mode = match started {
            Ok(thread) => Mode::Thread {
                sessions: Some(sessions),
                announced: VecDeque::new(),
                items,
                spent,
                waiting,
                thread: Some(thread),
            },
            // No thread to be had: the same reads and decodes on this one.
            Err(_) => Mode::Inline(Box::new((
                txn.open_table(blocks::BLOCKS)
                    .map_err(StoreError::storage)?,
                Spares::default(),
            ))),
        };
        Ok(BlocksAhead { mode })
    }

    /// Names session `key` as the one the walk asks for after those named before it, so that
    /// the thread reads on into it as soon as it is done with them. The walk must then ask
    /// for the named sessions in that order; inline, and once stopped, it does nothing.
    pub(crate) fn announce(&mut self, key: u64) {
        if let Mode::Thread {
            sessions,
            announced,
            ..
        } = &mut self.mode
        {
            if sessions.as_ref().is_some_and(|s| s.send(key).is_ok()) {
                announced.push_back(key);
            }
        }
    }

    /// Gives each block of session `key` to `walk`, in seq order; returns how many parts
    /// were read. A session not announced is announced now; asking for one out of the order
    /// announced is refused. After an error the reader serves no other session.
    pub(crate) fn session(
        &mut self,
        key: u64,
        mut walk: impl FnMut(&mut Decoded) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        if let Mode::Thread { announced, .. } = &self.mode {
            if announced.is_empty() {
                self.announce(key);
            }
        }
        let outcome = match &mut self.mode {
            Mode::Inline(inline) => {
                let (table, spares) = &mut **inline;
                return inline_session(table, spares, key, walk);
            }
            Mode::Stopped => return Err(stopped()),
            Mode::Thread {
                announced,
                items,
                spent,
                waiting,
                ..
            } => match announced.pop_front() {
                // The announce found the thread gone.
                None => Err(stopped()),
                Some(next) if next != key => Err(StoreError::Corrupt {
                    reason: format!(
                        "verify asked the block reader for session key {key} while it \
                         serves session key {next} first"
                    ),
                }),
                Some(_) => loop {
                    match next_item(items, waiting) {
                        Ok(Item::Block(mut decoded)) => {
                            // Handed over part way: the rest of the rebuild is the
                            // walk's, which waited for it.
                            decoded.finish_rebuild();
                            if let Err(error) = walk(&mut decoded) {
                                break Err(error);
                            }
                            // A thread gone leaves the buffers to be freed here.
                            let _ = spent.send(decoded);
                        }
                        Ok(Item::End(result)) => return result,
                        Err(_) => break Err(stopped()),
                    }
                },
            },
        };
        // The thread may be part way through the session: it serves no other.
        self.mode = Mode::Stopped;
        outcome
    }
}

/// The next item from the thread; `waiting` is set while there is none to take yet, so that
/// the thread hands over the block it is on.
fn next_item(items: &Receiver<Item>, waiting: &AtomicBool) -> Result<Item, mpsc::RecvError> {
    match items.try_recv() {
        Ok(item) => Ok(item),
        Err(TryRecvError::Disconnected) => Err(mpsc::RecvError),
        Err(TryRecvError::Empty) => {
            waiting.store(true, Ordering::Release);
            let item = items.recv();
            waiting.store(false, Ordering::Release);
            item
        }
    }
}

/// [`BlocksAhead::session`] on the caller's thread.
fn inline_session(
    table: &BlocksTable,
    spares: &mut Spares,
    key: u64,
    mut walk: impl FnMut(&mut Decoded) -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    let walked = std::cell::RefCell::new(Vec::new());
    let mut failed = None;
    let n_parts = each_block(
        table,
        key,
        spares,
        |spares| {
            for decoded in walked.borrow_mut().drain(..) {
                spares.take_back(decoded);
            }
        },
        |mut decoded, spares| {
            decoded.finish_rebuild();
            decoded.release_payload(&mut spares.decoder);
            match walk(&mut decoded) {
                Ok(()) => {
                    walked.borrow_mut().push(decoded);
                    true
                }
                Err(error) => {
                    failed = Some(error);
                    false
                }
            }
        },
    );
    for decoded in walked.into_inner() {
        spares.take_back(decoded);
    }
    match failed {
        Some(error) => Err(error),
        None => n_parts,
    }
}

fn stopped() -> StoreError {
    StoreError::Corrupt {
        reason: "the database failed while verifying: the block reader stopped".to_owned(),
    }
}

impl Drop for Mode {
    fn drop(&mut self) {
        if let Mode::Thread {
            sessions,
            items,
            spent,
            thread,
            ..
        } = self
        {
            // No more sessions ends the thread's loop; a block it hands over finds the walk
            // gone, and a wait for the walk to hand blocks back finds no walk to do it (both
            // ends are replaced below, before the join): either ends it too.
            drop(sessions.take());
            drop(std::mem::replace(items, mpsc::channel::<Item>().1));
            drop(std::mem::replace(spent, mpsc::channel::<Decoded>().0));
            if let Some(thread) = thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// The thread: each session asked for, its blocks handed over one by one, then its end.
/// The thread reads on into the next session as soon as it is announced and there is room
/// ([`InFlight::room`]): a session's end goes to the walk behind its last block, and the
/// next session's first block is read and decoded while the walk is still on the last one.
fn serve(
    table: &BlocksTable,
    sessions: &Receiver<u64>,
    items: &Sender<Item>,
    returned: &Receiver<Decoded>,
    waiting: &AtomicBool,
) {
    let mut spares = Spares::default();
    // Both of `each_block`'s callbacks count what comes back.
    let flight = std::cell::RefCell::new(InFlight::default());
    while let Ok(key) = sessions.recv() {
        let mut gone = false;
        // A panic in redb (a damaged page) is the session's error, as on the walk's thread.
        let result = super::guard("verifying", || {
            each_block(
                table,
                key,
                &mut spares,
                |spares| {
                    let mut flight = flight.borrow_mut();
                    while let Ok(decoded) = returned.try_recv() {
                        flight.take_back(decoded, spares);
                    }
                },
                |decoded, spares| {
                    let mut flight = flight.borrow_mut();
                    gone = !hand_over(items, waiting, decoded, spares, &mut flight)
                        || !flight.wait_for_room(returned, spares);
                    !gone
                },
            )
        });
        if gone || items.send(Item::End(result)).is_err() {
            return;
        }
    }
}

/// Rebuilds the block's records, then decodes its bodies from its last record back (the
/// walk's work, done ahead), and hands it to the walk. The walk takes whatever was handed
/// over without this thread; when it waits with nothing to take, the thread hands the block
/// over at once, part way rebuilt (it looks between every few records), and the walk
/// finishes it ([`Decoded::finish_rebuild`]). False when the walk is gone.
fn hand_over(
    items: &Sender<Item>,
    waiting: &AtomicBool,
    mut decoded: Decoded,
    spares: &mut Spares,
    flight: &mut InFlight,
) -> bool {
    let mut rebuilt = true;
    while decoded.rebuild_some(RECORDS_PER_POLL) {
        if waiting.load(Ordering::Acquire) {
            rebuilt = false;
            break;
        }
    }
    if rebuilt {
        // Rebuilt here: the payload buffer stays with this thread's decoder.
        decoded.release_payload(&mut spares.decoder);
        while !waiting.load(Ordering::Acquire) && decoded.decode_one_body() {}
    }
    flight.records += decoded.records;
    flight.blocks += 1;
    items.send(Item::Block(decoded)).is_ok()
}

/// Records the thread keeps handed over and not walked yet, the block the walk is on
/// included, before it reads another block (see [`InFlight::room`]). A full block holds about
/// 830 records: with one being walked and the next handed over, the thread waits, as when it
/// could hold one block. Short blocks (a session's last, or a whole small session) go
/// several at a time, so that the walk, done with one, does not wait for the long block
/// after it to be read and decompressed.
const RECORDS_AHEAD_MAX: usize = 1024;

/// Most blocks handed over and not walked yet, whatever their records.
const BLOCKS_AHEAD_MAX: usize = 8;

/// What the thread handed over and the walk has not handed back yet.
#[derive(Default)]
struct InFlight {
    blocks: usize,
    records: usize,
}

impl InFlight {
    /// Whether the thread may read another block: always with at most the block being walked
    /// out; else with fewer than [`BLOCKS_AHEAD_MAX`] blocks and [`RECORDS_AHEAD_MAX`]
    /// records out.
    fn room(&self) -> bool {
        self.blocks < 2 || (self.blocks < BLOCKS_AHEAD_MAX && self.records < RECORDS_AHEAD_MAX)
    }

    /// Takes a walked block back: its buffers for the next blocks.
    fn take_back(&mut self, decoded: Decoded, spares: &mut Spares) {
        self.blocks -= 1;
        self.records -= decoded.records;
        spares.take_back(decoded);
    }

    /// Waits for the walk to hand blocks back until there is room; false when it is gone.
    fn wait_for_room(&mut self, returned: &Receiver<Decoded>, spares: &mut Spares) -> bool {
        while let Ok(decoded) = returned.try_recv() {
            self.take_back(decoded, spares);
        }
        while !self.room() {
            match returned.recv() {
                Ok(decoded) => self.take_back(decoded, spares),
                Err(_) => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{Database, ReadableDatabase};
    use sessionlog_format::block::encode_block;
    use sessionlog_format::gen::{GenOptions, Generator};
    use sessionlog_format::record;

    /// `n_blocks` blocks of three generated records each, chained.
    fn blocks_of(n_blocks: u64, seed: u64) -> Vec<(u64, Vec<u8>)> {
        let mut generator = Generator::new(GenOptions {
            events: n_blocks * 3,
            seed,
        });
        let genesis = record::genesis_chain(&generator.header());
        let mut chain = genesis;
        let mut records = Vec::new();
        while let Some(batch) = generator.next_batch() {
            for event in &batch {
                let mut record = Vec::new();
                chain = record::encode_event(event, &chain, &mut record).unwrap();
                records.push(record);
            }
        }
        let mut chain_in = genesis;
        let mut out = Vec::new();
        for (b, run) in records.chunks(3).enumerate() {
            let first_seq = b as u64 * 3;
            out.push((
                first_seq,
                encode_block(first_seq, &chain_in, run.iter().map(Vec::as_slice)).unwrap(),
            ));
            chain_in.copy_from_slice(&run[2][4..36]);
        }
        out
    }

    /// What a walk sees of a block: its records, or the error's text.
    type Seen = (u64, Result<Vec<u8>, String>);

    fn seen(decoded: &Decoded) -> Seen {
        let result = match &decoded.block {
            Ok(block) => Ok(block.records().flat_map(|(_, r)| r.to_vec()).collect()),
            Err(error) => Err(error.to_string()),
        };
        (decoded.stored.first_seq, result)
    }

    /// A store whose blocks table holds sessions 1 to 4: 0, 1, 2 and 9 blocks in parts of
    /// at most `BLOCK_PART_BYTES`. Session 3's second block has its last byte flipped and
    /// session 4's fifth block lacks its part 0 (its parts are numbered from 1).
    fn store(dir: &std::path::Path) -> (Database, Vec<Vec<Seen>>) {
        let db = Database::create(dir.join("blocks.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let mut want = Vec::new();
        {
            let mut table = txn.open_table(blocks::BLOCKS).unwrap();
            for (key, n_blocks) in [(1u64, 0u64), (2, 1), (3, 2), (4, 9)] {
                // The walk's decoder: the rebuilt records' crcs left at zero.
                let mut decoder = BlockDecoder::without_record_crcs();
                let mut seen_here = Vec::new();
                for (b, (first_seq, mut bytes)) in blocks_of(n_blocks, key).into_iter().enumerate()
                {
                    if key == 3 && b == 1 {
                        let last = bytes.len() - 1;
                        bytes[last] ^= 1;
                    }
                    let parts: Vec<&[u8]> = bytes.chunks(BLOCK_PART_BYTES).collect();
                    let mut joined = Vec::new();
                    let mut dense = true;
                    for (part, chunk) in parts.iter().enumerate() {
                        // Numbered from 1: the reader sees part 0 missing.
                        let number = part as u32 + u32::from(key == 4 && b == 4);
                        dense &= number == part as u32;
                        table.insert((key, first_seq, number), *chunk).unwrap();
                        joined.extend_from_slice(chunk);
                    }
                    let stored = Stored {
                        first_seq,
                        bytes: joined,
                        dense,
                    };
                    let block = decode(&mut decoder, &stored);
                    seen_here.push(seen(&Decoded::new(stored, block)));
                }
                want.push(seen_here);
            }
        }
        txn.commit().unwrap();
        (db, want)
    }

    fn walk_all(ahead: &mut BlocksAhead) -> Vec<Vec<Seen>> {
        (1..=4).map(|key| walk_one(ahead, key)).collect()
    }

    fn walk_one(ahead: &mut BlocksAhead, key: u64) -> Vec<Seen> {
        let mut got = Vec::new();
        ahead
            .session(key, |decoded| {
                got.push(seen(decoded));
                Ok(())
            })
            .unwrap();
        got
    }

    #[test]
    fn blocks_come_out_as_inline_decoding_gives_them_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (db, want) = store(dir.path());
        assert_eq!(want.iter().map(Vec::len).collect::<Vec<_>>(), [0, 1, 2, 9]);
        assert!(want[2][1].1.is_err(), "the damaged block is refused");
        assert!(
            want[3][4].1.is_err(),
            "the block with a part missing is refused"
        );
        let n_refused = want.iter().flatten().filter(|(_, r)| r.is_err()).count();
        assert_eq!(n_refused, 2);
        let txn = db.begin_read().unwrap();
        let mut ahead = BlocksAhead::start(&txn).unwrap();
        assert!(matches!(ahead.mode, Mode::Thread { .. }));
        assert_eq!(walk_all(&mut ahead), want);
        // Twice over the same thread, with the buffers handed back the first time.
        assert_eq!(walk_all(&mut ahead), want);
        let mut inline = BlocksAhead {
            mode: Mode::Inline(Box::new((
                txn.open_table(blocks::BLOCKS).unwrap(),
                Spares::default(),
            ))),
        };
        assert_eq!(walk_all(&mut inline), want);
    }

    // Goal: sessions announced ahead come out as inline decoding gives them, each walked in
    // the order announced, whether announced all at once or one ahead of the walk (as
    // verify does), the reader going on into the next session before it is asked.
    #[test]
    fn sessions_announced_ahead_come_out_as_inline_decoding_gives_them() {
        let dir = tempfile::tempdir().unwrap();
        let (db, want) = store(dir.path());
        let txn = db.begin_read().unwrap();
        let mut all_at_once = BlocksAhead::start(&txn).unwrap();
        for key in 1..=4 {
            all_at_once.announce(key);
        }
        assert_eq!(walk_all(&mut all_at_once), want);
        // Once the announced ones are walked, a session asked for is announced then.
        assert_eq!(walk_all(&mut all_at_once), want);
        let mut one_ahead = BlocksAhead::start(&txn).unwrap();
        one_ahead.announce(1);
        let got: Vec<Vec<Seen>> = (1..=4)
            .map(|key| {
                if key < 4 {
                    one_ahead.announce(key + 1);
                }
                walk_one(&mut one_ahead, key)
            })
            .collect();
        assert_eq!(got, want);
    }

    // Goal: asking for a session out of the order announced is refused, and the reader,
    // part way into the session it serves, serves no other.
    #[test]
    fn a_session_asked_for_out_of_the_order_announced_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = store(dir.path());
        let txn = db.begin_read().unwrap();
        let mut ahead = BlocksAhead::start(&txn).unwrap();
        ahead.announce(4);
        ahead.announce(3);
        let mut n_walked = 0;
        let refused = ahead.session(3, |_| {
            n_walked += 1;
            Ok(())
        });
        assert_eq!(n_walked, 0, "no block of either session reaches the walk");
        let message = "asked the block reader for session key 3 while it serves session key 4";
        assert!(matches!(refused, Err(StoreError::Corrupt { reason }) if reason.contains(message)));
        assert!(matches!(ahead.mode, Mode::Stopped));
        let later = ahead.session(4, |_| Ok(()));
        let stopped = "the block reader stopped";
        assert!(matches!(later, Err(StoreError::Corrupt { reason }) if reason.contains(stopped)));
    }

    #[test]
    fn a_walk_that_fails_stops_the_reader_for_every_later_session() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = store(dir.path());
        let txn = db.begin_read().unwrap();
        let mut ahead = BlocksAhead::start(&txn).unwrap();
        let mut n_walked = 0;
        let failed = ahead.session(4, |_| {
            n_walked += 1;
            match n_walked {
                3 => Err(StoreError::Corrupt {
                    reason: "stop here".to_owned(),
                }),
                _ => Ok(()),
            }
        });
        assert_eq!(n_walked, 3);
        assert!(matches!(failed, Err(StoreError::Corrupt { reason }) if reason == "stop here"));
        assert!(matches!(ahead.mode, Mode::Stopped));
        let later = ahead.session(2, |_| Ok(()));
        let stopped = "the block reader stopped";
        assert!(matches!(later, Err(StoreError::Corrupt { reason }) if reason.contains(stopped)));
    }

    // Goal: the reader reads on while little is out: always with only the block walked out,
    // else with fewer than 8 blocks and 1,024 records out.
    #[test]
    fn the_reader_reads_on_while_little_is_out() {
        let out = |blocks, records| InFlight { blocks, records }.room();
        assert!(out(0, 0));
        assert!(
            out(1, 5_000),
            "a block of many records besides the walked one"
        );
        assert!(!out(2, 1_660), "two full blocks");
        assert!(out(5, 1_000), "five short blocks");
        assert!(!out(3, 1_024));
        assert!(!out(8, 80), "eight blocks, however short");
    }

    #[test]
    fn dropping_it_part_way_through_a_session_ends_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (db, _) = store(dir.path());
        let txn = db.begin_read().unwrap();
        let mut ahead = BlocksAhead::start(&txn).unwrap();
        let Mode::Thread {
            sessions, items, ..
        } = &mut ahead.mode
        else {
            panic!("a thread starts");
        };
        sessions.as_ref().unwrap().send(4).unwrap();
        assert!(matches!(items.recv(), Ok(Item::Block(_))));
        // The thread is decoding the next block, which nobody takes.
        drop(ahead);
    }

    // Goal: a block the reader hands over part way rebuilt is, once the walk finishes it,
    // the block decoding it whole gives (records with zero crcs, the same refusals: a part
    // missing, a block keyed at another seq), however far the reader got.
    // Method: three sound blocks, one keyed a record off and one with a part missing; for
    // each, rebuild none to all of its records (and past the end) before finishing.
    #[test]
    fn a_block_the_walk_finishes_is_the_one_decoded_whole() {
        let stored = |first_seq: u64, bytes: &[u8], dense: bool| Stored {
            first_seq,
            bytes: bytes.to_vec(),
            dense,
        };
        let mut blocks: Vec<Stored> = blocks_of(3, 5)
            .iter()
            .map(|(first_seq, bytes)| stored(*first_seq, bytes, true))
            .collect();
        let (first_seq, bytes) = blocks_of(1, 6).remove(0);
        blocks.push(stored(first_seq + 1, &bytes, true));
        blocks.push(stored(first_seq, &bytes, false));
        let mut spares = Spares::default();
        let mut n_refused = 0;
        for block in &blocks {
            let whole = decode(&mut spares.decoder, block);
            n_refused += usize::from(whole.is_err());
            if let Ok(whole) = &whole {
                assert!(whole.records().all(|(_, record)| record[..4] == [0; 4]));
            }
            let want = seen(&Decoded::new(
                stored(block.first_seq, &block.bytes, true),
                whole,
            ));
            for n_records in 0..=4 {
                let again = stored(block.first_seq, &block.bytes, block.dense);
                let started = start(&mut spares.decoder, &again);
                let mut decoded = Decoded::started(again, started);
                let more = decoded.rebuild_some(n_records);
                assert_eq!(more, block.dense && n_records < 4, "{n_records} records");
                decoded.finish_rebuild();
                assert_eq!(seen(&decoded), want, "after {n_records} records");
                spares.take_back(decoded);
            }
        }
        assert_eq!(n_refused, 2);
    }

    // Goal: the bodies the reader decodes ahead are the events the walk would decode itself,
    // each given once, for the records they belong to, from the last record back; a block
    // that did not decode gets none.
    // Method: a block of three generated records; decode one body, then the rest; compare
    // each with `decode_checked_body` of the same record.
    #[test]
    fn bodies_decoded_ahead_are_the_walks_own() {
        let (first_seq, bytes) = blocks_of(1, 7).remove(0);
        let stored = Stored {
            first_seq,
            bytes,
            dense: true,
        };
        let mut decoder = BlockDecoder::default();
        let block = decode(&mut decoder, &stored);
        let own: Vec<Event> = block
            .as_ref()
            .unwrap()
            .records()
            .map(|(seq, bytes)| {
                let header = record::read_header(bytes).unwrap();
                record::decode_checked_body(bytes, &header, seq).unwrap()
            })
            .collect();
        let mut decoded = Decoded::new(stored, block);
        assert!(decoded.decode_one_body());
        // Only the last record's body so far.
        assert_eq!(decoded.bodies.take(0, 3), None);
        assert_eq!(decoded.bodies.take(1, 3), None);
        assert_eq!(decoded.bodies.take(2, 3).as_ref(), Some(&own[2]));
        assert_eq!(decoded.bodies.take(2, 3), None, "a body is given once");
        while decoded.decode_one_body() {}
        assert_eq!(decoded.bodies.take(0, 3).as_ref(), Some(&own[0]));
        assert_eq!(decoded.bodies.take(1, 3).as_ref(), Some(&own[1]));

        let failed = Decoded::new(
            Stored {
                first_seq: 0,
                bytes: vec![0; 10],
                dense: true,
            },
            Err(BlockError::ChainOut),
        );
        let mut failed = failed;
        assert!(!failed.decode_one_body());
    }
}
