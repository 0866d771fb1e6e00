//! The snapshot gate: how a read-only open reads a store that a writer holds.
//!
//! A writer (`serve`, `import`, `run`) holds redb's exclusive lock on the store file for as long
//! as it is open, so a read-only open cannot share that lock. It reads a snapshot instead, the
//! state a crash at that instant would recover: redb's last durable commit, whose pages no
//! non-durable commit overwrites (redb keeps them for its own crash recovery, and writes the
//! file's header only in a durable commit), plus the WAL, which holds every acknowledged
//! record since that commit. The two change together only where the writer makes redb durable
//! and restarts the WAL (and when it opens, replays or compacts the file), so the writer does
//! those under an exclusive `flock` on the `.wal` file, and a snapshot reader holds the same
//! lock shared while it reads. A writer that finds readers there defers the durable commit
//! (the WAL grows a little longer) rather than wait, up to a hard cap; its close waits a
//! bounded time and otherwise leaves the WAL for the next open to replay.
//!
//! The lock is the standard library's file lock (`flock(2)` on Linux), taken on a descriptor
//! of its own: it belongs to the open file description, so it is independent of the WAL's own
//! descriptor and of redb's locks, and two opens in one process exclude each other as two
//! processes do.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a writer's open waits for snapshot readers to finish.
pub(crate) const OPEN_WAIT: Duration = Duration::from_secs(30);
/// How long a writer's close waits for snapshot readers before it leaves its WAL in place.
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(30);
/// How long a read-only open waits for a writer's durable commit to end.
pub(crate) const READ_WAIT: Duration = Duration::from_secs(30);
/// The pause between two attempts while waiting.
const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// A descriptor of the `.wal` file that takes the gate's lock.
#[derive(Debug)]
pub(crate) struct Gate {
    file: File,
}

/// How the gate is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A snapshot reader: shared with other readers.
    Shared,
    /// A writer's durable transition: excludes every reader.
    Exclusive,
}

impl Gate {
    /// The writer's gate, on the WAL file it creates when missing.
    pub(crate) fn for_writer(wal_path: &Path) -> io::Result<Gate> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(wal_path)?;
        Ok(Gate { file })
    }

    /// A reader's gate; `None` when the WAL does not exist (no writer that takes the gate has
    /// opened the store).
    pub(crate) fn for_reader(wal_path: &Path) -> io::Result<Option<Gate>> {
        match File::open(wal_path) {
            Ok(file) => Ok(Some(Gate { file })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Takes the lock without waiting; `false` when another holder excludes it.
    pub(crate) fn try_lock(&self, mode: Mode) -> io::Result<bool> {
        let taken = match mode {
            Mode::Shared => self.file.try_lock_shared(),
            Mode::Exclusive => self.file.try_lock(),
        };
        match taken {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        }
    }

    /// Takes the lock, waiting at most `wait`; `false` when it timed out.
    pub(crate) fn lock_within(&self, mode: Mode, wait: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + wait;
        loop {
            if self.try_lock(mode)? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(RETRY_PAUSE);
        }
    }

    /// Releases the lock (a no-op when it is not held). An unlock that fails leaves the lock
    /// to the descriptor's close; nothing the caller could do differs.
    pub(crate) fn unlock(&self) {
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_share_and_a_writer_excludes_them() {
        let dir = tempfile::tempdir().unwrap();
        let wal = dir.path().join("s.redb.wal");
        let writer = Gate::for_writer(&wal).unwrap();
        let first = Gate::for_reader(&wal).unwrap().unwrap();
        let second = Gate::for_reader(&wal).unwrap().unwrap();
        assert!(first.try_lock(Mode::Shared).unwrap());
        assert!(second.try_lock(Mode::Shared).unwrap());
        assert!(!writer.try_lock(Mode::Exclusive).unwrap());
        first.unlock();
        assert!(!writer.try_lock(Mode::Exclusive).unwrap());
        second.unlock();
        assert!(writer.try_lock(Mode::Exclusive).unwrap());
        assert!(!first.try_lock(Mode::Shared).unwrap());
        assert!(!first
            .lock_within(Mode::Shared, Duration::from_millis(20))
            .unwrap());
        writer.unlock();
        assert!(first
            .lock_within(Mode::Shared, Duration::from_millis(20))
            .unwrap());
    }

    #[test]
    fn a_reader_finds_no_gate_without_a_wal() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Gate::for_reader(&dir.path().join("none.wal"))
            .unwrap()
            .is_none());
    }
}
