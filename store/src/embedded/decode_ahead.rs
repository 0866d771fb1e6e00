//! Decoding a session's sealed blocks one block ahead of the walk that checks them, on a
//! thread of its own.
//!
//! `verify` spends about half its time on a block before any rule sees it: the zstd
//! decompression of the payload, the chain rebuilt record by record (BLAKE3) and each record's
//! crc ([`BlockDecoder::decode`]). None of that depends on the walk, so while the walk checks
//! block `k` (the record checks, the body decoding, the fold), this thread decodes block
//! `k + 1`. What crosses the threads is a block at a time: its stored bytes going out, the
//! rebuilt records coming back, and both buffers going out again to be reused. At most two
//! blocks are in flight, so memory stays bounded by the block size, whatever the session's
//! length.
//!
//! A session of one block never starts the thread: its block is decoded on the caller's.
//! The results are exactly those of decoding inline, in the same order.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use sessionlog_format::block::{Block, BlockDecoder, BlockError};

use super::blocks;

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
    pub block: Result<Block, BlockError>,
}

/// Decodes a stored block the one way every walk does: a block with a part missing is
/// refused before it is decoded.
pub(crate) fn decode(decoder: &mut BlockDecoder, stored: &Stored) -> Result<Block, BlockError> {
    if !stored.dense {
        return Err(BlockError::Payload {
            reason: "a part of the block is missing".to_owned(),
        });
    }
    blocks::decode_at_with(decoder, &stored.bytes, stored.first_seq)
}

/// The walk's side. Blocks go in with [`DecodeAhead::push`] in seq order and come out,
/// decoded, in the same order, from `push` (once two are in flight) and then from
/// [`DecodeAhead::next`] at the end.
pub(crate) struct DecodeAhead {
    /// The first block, held until a second one shows the session needs the thread.
    first: Option<Stored>,
    worker: Option<Worker>,
    in_flight: usize,
    /// Decodes on the caller's thread when there is no worker.
    inline: BlockDecoder,
    /// Buffers handed back by the worker for the next block's bytes.
    spare_bytes: Vec<Vec<u8>>,
}

struct Worker {
    jobs: Option<SyncSender<Job>>,
    done: Receiver<Decoded>,
    thread: Option<JoinHandle<()>>,
}

enum Job {
    Decode(Stored),
    /// Buffers of a block the walk is done with, for the next decode.
    Recycle(Block),
}

impl DecodeAhead {
    pub(crate) fn new() -> DecodeAhead {
        DecodeAhead {
            first: None,
            worker: None,
            in_flight: 0,
            inline: BlockDecoder::default(),
            spare_bytes: Vec::new(),
        }
    }

    /// An empty buffer for the next block's bytes (one handed back, when there is one).
    pub(crate) fn buffer(&mut self) -> Vec<u8> {
        let mut bytes = self.spare_bytes.pop().unwrap_or_default();
        bytes.clear();
        bytes
    }

    /// Queues the next block; returns the oldest one decoded when two are in flight.
    pub(crate) fn push(&mut self, stored: Stored) -> Option<Decoded> {
        if self.worker.is_none() {
            let Some(first) = self.first.take() else {
                self.first = Some(stored);
                return None;
            };
            match Worker::start() {
                Some(worker) => {
                    self.worker = Some(worker);
                    self.send(first);
                }
                // No thread to be had: decode on this one, in order.
                None => {
                    let block = decode(&mut self.inline, &first);
                    self.first = Some(stored);
                    return Some(Decoded {
                        stored: first,
                        block,
                    });
                }
            }
        }
        self.send(stored);
        if self.in_flight > 1 {
            return self.receive();
        }
        None
    }

    /// The next block decoded, once every block was pushed; `None` when all came out.
    pub(crate) fn next(&mut self) -> Option<Decoded> {
        if let Some(first) = self.first.take() {
            let block = decode(&mut self.inline, &first);
            return Some(Decoded {
                stored: first,
                block,
            });
        }
        if self.in_flight > 0 {
            return self.receive();
        }
        None
    }

    /// Hands back a walked block's buffers.
    pub(crate) fn recycle(&mut self, decoded: Decoded) {
        self.spare_bytes.push(decoded.stored.bytes);
        let Ok(block) = decoded.block else { return };
        match self.worker.as_ref().and_then(|w| w.jobs.as_ref()) {
            // A worker gone (it stops only when dropped) leaves the buffers to be freed.
            Some(jobs) => drop(jobs.send(Job::Recycle(block))),
            None => self.inline.recycle(block),
        }
    }

    fn send(&mut self, stored: Stored) {
        let worker = self
            .worker
            .as_ref()
            .expect("send follows the worker's start");
        let jobs = worker
            .jobs
            .as_ref()
            .expect("the jobs' sender lives until drop");
        match jobs.send(Job::Decode(stored)) {
            Ok(()) => self.in_flight += 1,
            // The worker ended (it ends early only by a panic): decode here instead, so the
            // block still reaches the walk.
            Err(mpsc::SendError(Job::Decode(stored))) => {
                self.first = Some(stored);
            }
            Err(mpsc::SendError(Job::Recycle(_))) => unreachable!("a decode job was sent"),
        }
    }

    fn receive(&mut self) -> Option<Decoded> {
        let worker = self.worker.as_ref()?;
        self.in_flight -= 1;
        match worker.done.recv() {
            Ok(decoded) => Some(decoded),
            // A worker that panicked: its panic is raised when it is joined.
            Err(_) => {
                self.join_worker();
                None
            }
        }
    }

    fn join_worker(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            drop(worker.jobs.take());
            if let Some(thread) = worker.thread.take() {
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}

impl Drop for DecodeAhead {
    fn drop(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            // Closing the jobs ends the worker's loop; a result it is sending finds the
            // receiver gone with `worker` below and ends it too.
            drop(worker.jobs.take());
            let thread = worker.thread.take();
            drop(worker);
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

impl Worker {
    /// The worker's thread, or `None` when the operating system gives none.
    fn start() -> Option<Worker> {
        // One job queued behind the one being decoded, one result waiting: with the block
        // the walk holds, at most two blocks' bytes are in flight.
        let (jobs, incoming) = mpsc::sync_channel::<Job>(2);
        let (finished, done) = mpsc::sync_channel::<Decoded>(1);
        let thread = std::thread::Builder::new()
            .name("sessionlog-verify-blocks".into())
            .spawn(move || {
                let mut decoder = BlockDecoder::default();
                for job in incoming {
                    match job {
                        Job::Recycle(block) => decoder.recycle(block),
                        Job::Decode(stored) => {
                            let block = decode(&mut decoder, &stored);
                            if finished.send(Decoded { stored, block }).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .ok()?;
        Some(Worker {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_format::block::encode_block;
    use sessionlog_format::gen::{GenOptions, Generator};
    use sessionlog_format::record;

    /// `n_blocks` blocks of three generated records each, chained, with block `bad`'s last
    /// byte flipped.
    fn blocks(n_blocks: u64, bad: Option<u64>) -> Vec<Stored> {
        let mut generator = Generator::new(GenOptions {
            events: n_blocks * 3,
            seed: 5,
        });
        let mut chain = record::genesis_chain(&generator.header());
        let mut records = Vec::new();
        while let Some(batch) = generator.next_batch() {
            for event in &batch {
                let mut record = Vec::new();
                chain = record::encode_event(event, &chain, &mut record).unwrap();
                records.push(record);
            }
        }
        let mut chain_in = record::genesis_chain(&generator.header());
        let mut out = Vec::new();
        for (b, run) in records.chunks(3).enumerate() {
            let first_seq = b as u64 * 3;
            let mut bytes =
                encode_block(first_seq, &chain_in, run.iter().map(Vec::as_slice)).unwrap();
            chain_in.copy_from_slice(&run[2][4..36]);
            if bad == Some(b as u64) {
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
            }
            out.push(Stored {
                first_seq,
                bytes,
                dense: true,
            });
        }
        out
    }

    fn through(
        ahead: &mut DecodeAhead,
        stored: Vec<Stored>,
    ) -> Vec<(u64, Result<Vec<u8>, String>)> {
        let mut out = Vec::new();
        let mut take = |ahead: &mut DecodeAhead, decoded: Decoded| {
            let result = match &decoded.block {
                Ok(block) => Ok(block.records().flat_map(|(_, r)| r.to_vec()).collect()),
                Err(error) => Err(error.to_string()),
            };
            out.push((decoded.stored.first_seq, result));
            ahead.recycle(decoded);
        };
        for block in stored {
            if let Some(decoded) = ahead.push(block) {
                take(ahead, decoded);
            }
        }
        while let Some(decoded) = ahead.next() {
            take(ahead, decoded);
        }
        out
    }

    #[test]
    fn blocks_come_out_in_order_as_inline_decoding_gives_them() {
        for n_blocks in [0, 1, 2, 3, 9] {
            for bad in [None, Some(0), Some(n_blocks / 2)] {
                let mut inline = BlockDecoder::default();
                let want: Vec<_> = blocks(n_blocks, bad)
                    .iter()
                    .map(|stored| {
                        let result = match decode(&mut inline, stored) {
                            Ok(block) => {
                                Ok(block.records().flat_map(|(_, r)| r.to_vec()).collect())
                            }
                            Err(error) => Err(error.to_string()),
                        };
                        (stored.first_seq, result)
                    })
                    .collect();
                let mut ahead = DecodeAhead::new();
                let got = through(&mut ahead, blocks(n_blocks, bad));
                assert_eq!(got, want, "{n_blocks} blocks, bad {bad:?}");
                assert_eq!(
                    ahead.worker.is_some(),
                    n_blocks > 1,
                    "the thread starts only for a second block"
                );
                let n_refused = got.iter().filter(|(_, r)| r.is_err()).count();
                assert_eq!(n_refused, usize::from(n_blocks > 0 && bad.is_some()));
            }
        }
    }

    #[test]
    fn a_block_with_a_part_missing_is_refused_without_decoding() {
        let mut stored = blocks(2, None);
        stored[1].dense = false;
        let mut ahead = DecodeAhead::new();
        let got = through(&mut ahead, stored);
        assert!(got[0].1.is_ok());
        assert_eq!(
            got[1].1.as_ref().unwrap_err(),
            "block payload: a part of the block is missing"
        );
    }

    #[test]
    fn dropping_it_with_blocks_in_flight_stops_the_worker() {
        let mut ahead = DecodeAhead::new();
        for block in blocks(4, None) {
            let _ = ahead.push(block);
        }
        drop(ahead);
    }
}
