//! A redb storage backend over a store file opened read-only: reads come from the file, writes
//! go to pages in memory. What a read-only open uses, so that redb's own recovery and the WAL
//! replay run in memory and the file is never changed (a read never writes).
//!
//! The file's locks are taken shared: redb asks for an exclusive lock when it opens a
//! database for writing, and this backend takes the same ranges shared on a read-only
//! descriptor. So any number of read-only opens share the file, and a writer (`serve`,
//! `import`) and a read-only open exclude each other. Beside a writer that holds the file, a
//! snapshot read takes no redb lock at all: the `gate` module says why what it reads is
//! consistent.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Mutex, RwLock};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// What redb's backend methods return on an I/O failure (without its `experimental-api-5`).
type BackendIoError = std::io::Error;

/// The unit of the overlay: a page written in memory.
const PAGE_BYTES: u64 = 4096;

/// Which locks an overlay takes on the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Locking {
    /// redb's lock ranges, shared (see the module comment).
    Shared,
    /// None: a snapshot read beside a writer, which the snapshot gate keeps consistent (see
    /// the `gate` module).
    None,
}

/// The read-only file and the pages written over it in memory.
#[derive(Debug)]
pub(crate) struct OverlayBackend {
    file: File,
    /// Takes the file's locks (shared, see the module comment); `None` for a snapshot read.
    locks: Option<FileBackend>,
    state: RwLock<Overlay>,
    /// The file's bytes read ahead of reads that follow one another (see [`Window`]).
    window: Mutex<Window>,
}

/// Most bytes read ahead at once: sixteen pages.
const WINDOW_BYTES: u64 = 64 << 10;

/// A stretch of the file read ahead. redb reads a page at a time, and a walk over a table
/// written in key order (a session's block parts, its records) reads pages that lie one after
/// another in the file, each a `pread` of its own; a read near the one before it reads the
/// next [`WINDOW_BYTES`] at once and serves the pages after it from memory. A read far from
/// the one before (a lookup) reads only what it asks. Only the file's own bytes are kept: a
/// read of a page written in memory, or past what the file shows, never comes here.
#[derive(Debug, Default)]
struct Window {
    start: u64,
    bytes: Vec<u8>,
    /// Where the last read of the file ended.
    last_end: u64,
}

#[derive(Debug)]
struct Overlay {
    /// The length redb sees.
    len: u64,
    /// Bytes of the file below this are what redb sees where no page was written; above it,
    /// zeros (a `set_len` that shrank the storage cut the file's bytes off).
    file_visible_bytes: u64,
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl OverlayBackend {
    /// Opens `path` read-only.
    pub(crate) fn open(path: &Path, locking: Locking) -> std::io::Result<OverlayBackend> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let locks = match locking {
            Locking::Shared => {
                Some(FileBackend::new(file.try_clone()?).map_err(std::io::Error::other)?)
            }
            Locking::None => None,
        };
        Ok(OverlayBackend {
            file,
            locks,
            state: RwLock::new(Overlay {
                len,
                file_visible_bytes: len,
                pages: BTreeMap::new(),
            }),
            window: Mutex::new(Window::default()),
        })
    }

    /// Reads `out.len()` bytes of the file at `offset`, all below `visible` (the bytes the file
    /// shows), through the window read ahead.
    fn read_file(&self, out: &mut [u8], offset: u64, visible: u64) -> Result<(), BackendIoError> {
        let end = offset + out.len() as u64;
        let Ok(mut window) = self.window.lock() else {
            return self.file.read_exact_at(out, offset);
        };
        let window_end = window.start + window.bytes.len() as u64;
        if offset >= window.start && end <= window_end {
            let at = (offset - window.start) as usize;
            out.copy_from_slice(&window.bytes[at..at + out.len()]);
            window.last_end = end;
            return Ok(());
        }
        let near = offset.abs_diff(window.last_end) <= WINDOW_BYTES;
        window.last_end = end;
        if !near || out.len() as u64 >= WINDOW_BYTES {
            drop(window);
            return self.file.read_exact_at(out, offset);
        }
        let len = (visible - offset).min(WINDOW_BYTES) as usize;
        window.bytes.resize(len, 0);
        if let Err(error) = self.file.read_exact_at(&mut window.bytes, offset) {
            window.bytes.clear();
            return Err(error);
        }
        window.start = offset;
        out.copy_from_slice(&window.bytes[..out.len()]);
        Ok(())
    }

    /// The bytes of `page` as redb sees them.
    fn read_page(&self, overlay: &Overlay, page: u64) -> Result<Vec<u8>, BackendIoError> {
        if let Some(bytes) = overlay.pages.get(&page) {
            return Ok(bytes.to_vec());
        }
        let start = page * PAGE_BYTES;
        let mut bytes = vec![0; PAGE_BYTES as usize];
        let from_file = overlay
            .file_visible_bytes
            .saturating_sub(start)
            .min(PAGE_BYTES);
        if from_file > 0 {
            self.file
                .read_exact_at(&mut bytes[..from_file as usize], start)?;
        }
        Ok(bytes)
    }
}

fn lock_poisoned() -> BackendIoError {
    std::io::Error::other("the overlay lock is poisoned")
}

impl StorageBackend for OverlayBackend {
    fn len(&self) -> Result<u64, BackendIoError> {
        Ok(self.state.read().map_err(|_| lock_poisoned())?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        let overlay = self.state.read().map_err(|_| lock_poisoned())?;
        let end = offset + out.len() as u64;
        if end > overlay.len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the storage",
            ));
        }
        // Fast path: no page written over the range.
        let first_page = offset / PAGE_BYTES;
        let last_page = end.div_ceil(PAGE_BYTES);
        if overlay.pages.range(first_page..last_page).next().is_none()
            && end <= overlay.file_visible_bytes
        {
            return self.read_file(out, offset, overlay.file_visible_bytes);
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let page = at / PAGE_BYTES;
            let in_page = (at % PAGE_BYTES) as usize;
            let n = (PAGE_BYTES as usize - in_page).min(out.len() - done);
            let bytes = self.read_page(&overlay, page)?;
            out[done..done + n].copy_from_slice(&bytes[in_page..in_page + n]);
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        let mut overlay = self.state.write().map_err(|_| lock_poisoned())?;
        if len < overlay.len {
            overlay.file_visible_bytes = overlay.file_visible_bytes.min(len);
            // Bytes past the new end of a page kept in memory read as zeros when it grows.
            let cut_page = len / PAGE_BYTES;
            overlay.pages.retain(|&page, _| page <= cut_page);
            if let Some(bytes) = overlay.pages.get_mut(&cut_page) {
                bytes[(len % PAGE_BYTES) as usize..].fill(0);
            }
        }
        overlay.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        let mut overlay = self.state.write().map_err(|_| lock_poisoned())?;
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let page = at / PAGE_BYTES;
            let in_page = (at % PAGE_BYTES) as usize;
            let n = (PAGE_BYTES as usize - in_page).min(data.len() - done);
            if !overlay.pages.contains_key(&page) {
                let bytes = self.read_page(&overlay, page)?.into_boxed_slice();
                overlay.pages.insert(page, bytes);
            }
            let bytes = overlay.pages.get_mut(&page).expect("inserted above");
            bytes[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        overlay.len = overlay.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn close(&self) -> Result<(), BackendIoError> {
        match &self.locks {
            Some(locks) => locks.close(),
            None => Ok(()),
        }
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        match &self.locks {
            Some(locks) => locks.try_lock_shared_range(start, end),
            None => Ok(true),
        }
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        match &self.locks {
            Some(locks) => locks.try_lock_shared_range(start, end),
            None => Ok(true),
        }
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        match &self.locks {
            Some(locks) => locks.lock_shared_range(start, end),
            None => Ok(()),
        }
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        match &self.locks {
            Some(locks) => locks.lock_shared_range(start, end),
            None => Ok(()),
        }
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        match &self.locks {
            Some(locks) => locks.unlock_range(start, end),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What redb may do to the storage.
    #[derive(Debug, Clone)]
    enum Op {
        /// A read of `len` bytes at `offset`, or (`next`) right after the last read.
        Read {
            offset: u64,
            len: usize,
            next: bool,
        },
        Write {
            offset: u64,
            len: usize,
            byte: u8,
        },
        SetLen(u64),
    }

    const FILE_BYTES: u64 = 300 << 10;

    fn op() -> impl Strategy<Value = Op> {
        let len = prop_oneof![Just(4096usize), Just(9), Just(784), 1usize..20_000];
        prop_oneof![
            6 => (0..FILE_BYTES + 8192, len.clone(), any::<bool>())
                .prop_map(|(offset, len, next)| Op::Read { offset, len, next }),
            1 => (0..FILE_BYTES + 8192, 1usize..9000, any::<u8>())
                .prop_map(|(offset, len, byte)| Op::Write { offset, len, byte }),
            1 => (0..FILE_BYTES + 16_384).prop_map(Op::SetLen),
        ]
    }

    /// Runs `ops` on an overlay of a file of known bytes and on the model of what redb sees (the
    /// bytes, zeros where the storage grew); every read must give the model's bytes, or fail
    /// past its end as the model says.
    fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        let mut model: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &model).unwrap();
        let overlay = OverlayBackend::open(&path, Locking::None).unwrap();
        let mut last_end = 0u64;
        for op in ops {
            match op {
                Op::Read { offset, len, next } => {
                    let offset = if next { last_end } else { offset };
                    let mut out = vec![0xEE; len];
                    let read = overlay.read(offset, &mut out);
                    let end = offset + len as u64;
                    if end > model.len() as u64 {
                        prop_assert!(read.is_err(), "a read past the end at {offset}+{len}");
                    } else {
                        prop_assert!(read.is_ok(), "{read:?}");
                        prop_assert!(
                            out == model[offset as usize..end as usize],
                            "the read at {offset}+{len}"
                        );
                        last_end = end;
                    }
                }
                Op::Write { offset, len, byte } => {
                    overlay.write(offset, &vec![byte; len]).unwrap();
                    let end = (offset as usize) + len;
                    if end > model.len() {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].fill(byte);
                }
                Op::SetLen(len) => {
                    overlay.set_len(len).unwrap();
                    model.resize(len as usize, 0);
                }
            }
        }
        prop_assert_eq!(overlay.len().unwrap(), model.len() as u64);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        // Goal: reads through the window read ahead give exactly the bytes redb wrote or the
        // file holds, whatever mix of near and far reads, writes in memory and lengths set
        // comes before them.
        #[test]
        fn reads_give_what_redb_sees(ops in proptest::collection::vec(op(), 1..60)) {
            run(ops)?;
        }
    }

    // Goal: a walk of the file a page at a time, as redb reads a table written in key order,
    // is served from the window: one read of the file per window, not per page.
    #[test]
    fn pages_read_one_after_another_come_from_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        let bytes: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let overlay = OverlayBackend::open(&path, Locking::None).unwrap();
        let mut starts = Vec::new();
        let mut page = vec![0; PAGE_BYTES as usize];
        for at in (0..FILE_BYTES).step_by(PAGE_BYTES as usize) {
            overlay.read(at, &mut page).unwrap();
            assert_eq!(page, bytes[at as usize..(at + PAGE_BYTES) as usize]);
            let start = overlay.window.lock().unwrap().start;
            if starts.last() != Some(&start) {
                starts.push(start);
            }
        }
        assert_eq!(starts.len() as u64, FILE_BYTES.div_ceil(WINDOW_BYTES));
    }
}
