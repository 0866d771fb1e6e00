//! A redb storage backend over a file that is not yet anyone's: a new store file built under
//! a temporary name, which its publisher syncs once, whole, before linking it into place
//! (`publish::publish_file`). redb syncs at every commit it makes while it builds the file (the
//! header, the allocator state, the first tables: eight `fdatasync`s for an empty store); none
//! of them orders anything a reader could see, since no reader can open the file before it is
//! linked, and a crash before the link leaves only a temporary file that is never opened.
//! So `sync_data` does nothing here, and everything else is the file's.

use std::ops::Bound;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// A file being built, synced by its publisher alone (see the module comment).
#[derive(Debug)]
pub(crate) struct UnsyncedFile(pub(crate) FileBackend);

impl StorageBackend for UnsyncedFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }

    /// Nothing: the publisher syncs the whole file before it links it.
    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
}
