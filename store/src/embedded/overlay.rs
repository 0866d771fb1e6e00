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
use std::sync::RwLock;

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
        })
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
            return self.file.read_exact_at(out, offset);
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
