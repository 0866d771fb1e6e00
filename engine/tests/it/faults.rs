//! Storage faults poison the store: the failing call reports a storage error, every later
//! write is refused until the store is reopened, and reopening recovers exactly the last
//! acknowledged state.

use std::fs::OpenOptions;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::StorageBackend;
use sessionlog_engine::store::{Store, StoreError};

use crate::support::*;

/// A file backend whose writes and syncs fail once `broken` is set.
#[derive(Debug)]
struct Breakable {
    inner: FileBackend,
    broken: Arc<AtomicBool>,
}

impl Breakable {
    fn check(&self) -> Result<(), io::Error> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected I/O failure"));
        }
        Ok(())
    }
}

impl StorageBackend for Breakable {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.check()?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

// Goal: a failed durable commit poisons the store; later writes are refused; a reopen shows
// exactly what was acknowledged.
#[test]
fn storage_failure_poisons_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap();
    let broken = Arc::new(AtomicBool::new(false));
    let backend = Breakable {
        inner: FileBackend::new(file).unwrap(),
        broken: Arc::clone(&broken),
    };
    let store = Store::open_with_backend(&path, backend).unwrap();
    store.create_session(&header("a")).unwrap();
    let acked = store.append("a", 0, vec![title(0), title(1)]).unwrap();
    broken.store(true, Ordering::SeqCst);
    let failed = store.create_session(&header("b"));
    assert!(matches!(failed, Err(StoreError::Storage(_))), "{failed:?}");
    assert!(store.is_poisoned());
    assert!(matches!(
        store.append("a", 2, vec![title(2)]),
        Err(StoreError::Poisoned)
    ));
    assert!(matches!(
        store.create_session(&header("c")),
        Err(StoreError::Poisoned)
    ));
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.sessions().unwrap(), vec!["a".to_owned()]);
    assert_eq!(store.head("a").unwrap().next_seq, acked.next_seq);
    assert_eq!(store.head("a").unwrap().chain, acked.head_chain);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    store.append("a", 2, vec![title(2)]).unwrap();
}
