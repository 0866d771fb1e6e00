//! Storage faults poison the store: the failing call reports a storage error, every later
//! write is refused until the store is reopened, and reopening recovers exactly the last
//! acknowledged state.

use std::fs::OpenOptions;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use redb::backends::FileBackend;
use redb::StorageBackend;
use sessionlog_store::embedded::{Store, StoreError, WalFile};

use crate::support::*;

/// Opens (or creates) `path` for reading and writing.
fn open_rw(path: &std::path::Path) -> std::fs::File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

/// A file backend whose writes and syncs fail once `broken` is set: with an I/O error, or
/// with a panic (`panics`: redb failing inside, as it does on a damaged page).
#[derive(Debug)]
struct Breakable {
    inner: FileBackend,
    broken: Arc<AtomicBool>,
    panics: bool,
}

impl Breakable {
    fn check(&self) -> Result<(), io::Error> {
        if self.broken.load(Ordering::SeqCst) {
            assert!(!self.panics, "injected panic in a redb write");
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

/// The store's real WAL file, whose writes and syncs fail once `broken` is set.
struct BreakableWal {
    file: std::fs::File,
    broken: Arc<AtomicBool>,
}

impl BreakableWal {
    fn check(&self) -> Result<(), io::Error> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected WAL failure"));
        }
        Ok(())
    }
}

impl WalFile for BreakableWal {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.file.read_all()
    }
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.check()?;
        self.file.write_all_at(offset, bytes)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.check()?;
        WalFile::set_len(&mut self.file, len)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.check()?;
        WalFile::sync_data(&mut self.file)
    }
    fn sync_all(&mut self) -> io::Result<()> {
        self.check()?;
        WalFile::sync_all(&mut self.file)
    }
}

// Goal: a failed WAL write (where creations and appends become durable) poisons the store;
// later writes are refused; a reopen shows exactly what was acknowledged.
#[test]
fn wal_failure_poisons_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let broken = Arc::new(AtomicBool::new(false));
    let backend = FileBackend::new(open_rw(&path)).unwrap();
    let wal = BreakableWal {
        file: open_rw(&path.with_extension("redb.wal")),
        broken: Arc::clone(&broken),
    };
    let store = Store::open_with_backends(&path, backend, wal).unwrap();
    store.create_session(&header("a")).unwrap();
    let acked = store.append("a", 0, vec![title(0), title(1)]).unwrap();
    broken.store(true, Ordering::SeqCst);
    let failed = store.create_session(&header("b"));
    assert!(matches!(failed, Err(StoreError::Storage(_))), "{failed:?}");
    // The failure keeps the I/O error underneath, so a caller can walk the chain to it.
    let failure = failed.err().unwrap();
    let underneath = std::error::Error::source(&failure).and_then(std::error::Error::source);
    assert!(
        underneath.is_some_and(|e| e.downcast_ref::<std::io::Error>().is_some()),
        "{failure:?}"
    );
    assert!(store.is_poisoned());
    assert!(matches!(
        store.append("a", 2, vec![title(2)]),
        Err(StoreError::Poisoned)
    ));
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.sessions().unwrap(), vec!["a".to_owned()]);
    assert_eq!(store.head("a").unwrap().next_seq, acked.next_seq);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}

// Goal: while redb's file refuses every write and sync, creations and appends are still
// acknowledged (they are durable in the WAL), the close's durable commit fails without losing
// them, and a reopen replays every one from the WAL.
#[test]
fn broken_store_file_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let file = open_rw(&path);
    let broken = Arc::new(AtomicBool::new(false));
    let backend = Breakable {
        inner: FileBackend::new(file).unwrap(),
        broken: Arc::clone(&broken),
        panics: false,
    };
    let store = Store::open_with_backend(&path, backend).unwrap();
    store.create_session(&header("a")).unwrap();
    store.append("a", 0, vec![title(0), title(1)]).unwrap();
    broken.store(true, Ordering::SeqCst);
    store.create_session(&header("b")).unwrap();
    let acked_a = store.append("a", 2, vec![title(2)]).unwrap();
    let acked_b = store.append("b", 0, vec![title(0)]).unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.sessions().unwrap(),
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert_eq!(store.head("a").unwrap().chain, acked_a.head_chain);
    assert_eq!(store.head("b").unwrap().chain, acked_b.head_chain);
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    store.append("a", 3, vec![title(3)]).unwrap();
}

/// The store's real WAL file, whose writes panic once `panics` is set: a bug inside an
/// append group, after admission advanced the session's warm fold.
struct PanickingWal {
    file: std::fs::File,
    panics: Arc<AtomicBool>,
}

impl WalFile for PanickingWal {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.file.read_all()
    }
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert!(
            !self.panics.load(Ordering::SeqCst),
            "injected panic in a WAL write"
        );
        self.file.write_all_at(offset, bytes)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        WalFile::set_len(&mut self.file, len)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        WalFile::sync_data(&mut self.file)
    }
    fn sync_all(&mut self) -> io::Result<()> {
        WalFile::sync_all(&mut self.file)
    }
}

// Goal: a panic inside an append group, after admission advanced the warm fold, poisons the
// store: the panicking append is a storage error (the panic does not escape), the next append
// is refused, nothing of the panicking batch is visible, and a reopen recovers exactly the
// acknowledged state.
// Method: a WAL file whose writes panic once told to; append, panic, append again, reopen.
#[test]
fn a_panic_in_an_append_group_poisons_until_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let panics = Arc::new(AtomicBool::new(false));
    let backend = FileBackend::new(open_rw(&path)).unwrap();
    let wal = PanickingWal {
        file: open_rw(&path.with_extension("redb.wal")),
        panics: Arc::clone(&panics),
    };
    let store = Store::open_with_backends(&path, backend, wal).unwrap();
    store.create_session(&header("a")).unwrap();
    let acked = store.append("a", 0, vec![title(0), title(1)]).unwrap();
    panics.store(true, Ordering::SeqCst);
    let failed = store.append("a", 2, vec![title(2)]);
    match &failed {
        Err(StoreError::Storage(message)) => {
            assert!(message.message().contains("panicked"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(store.is_poisoned());
    panics.store(false, Ordering::SeqCst);
    assert!(matches!(
        store.append("a", 2, vec![title(2)]),
        Err(StoreError::Poisoned)
    ));
    assert!(matches!(
        store.create_session(&header("b")),
        Err(StoreError::Poisoned)
    ));
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("a").unwrap(), acked_head(&acked));
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
    store.append("a", 2, vec![title(2)]).unwrap();
}

fn acked_head(ack: &sessionlog_store::embedded::AppendAck) -> sessionlog_store::embedded::Head {
    sessionlog_store::embedded::Head {
        next_seq: ack.next_seq,
        chain: ack.head_chain,
    }
}

/// The store's real WAL file, whose next `fdatasync` once armed tells the test it has begun,
/// then waits for the test's word: `true` lets it go on, `false` makes it fail.
struct GatedWal {
    file: std::fs::File,
    armed: Arc<AtomicBool>,
    begun: mpsc::Sender<()>,
    word: mpsc::Receiver<bool>,
}

impl WalFile for GatedWal {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        self.file.read_all()
    }
    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(offset, bytes)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        WalFile::set_len(&mut self.file, len)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.begun.send(()).expect("the test waits for the sync");
            if !self.word.recv().expect("the test gives its word") {
                return Err(io::Error::other("injected WAL sync failure"));
            }
        }
        WalFile::sync_data(&mut self.file)
    }
    fn sync_all(&mut self) -> io::Result<()> {
        WalFile::sync_all(&mut self.file)
    }
}

/// The second append group's result and every answer of the reader (its head's next seq,
/// then its fold's).
type Durability = (
    Result<sessionlog_store::embedded::AppendAck, StoreError>,
    Vec<u64>,
);

/// Appends seq 0 to "a", then seq 1 through a WAL whose sync waits; while it waits, a reader
/// asks the head and the fold's next seq, and must not answer; then the sync goes on (or
/// fails).
fn read_during_a_sync(sync_succeeds: bool) -> Durability {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let armed = Arc::new(AtomicBool::new(false));
    let (begun_tx, begun) = mpsc::channel();
    let (word, word_rx) = mpsc::channel();
    let backend = FileBackend::new(open_rw(&path)).unwrap();
    let wal = GatedWal {
        file: open_rw(&path.with_extension("redb.wal")),
        armed: Arc::clone(&armed),
        begun: begun_tx,
        word: word_rx,
    };
    let store = Arc::new(Store::open_with_backends(&path, backend, wal).unwrap());
    store.create_session(&header("a")).unwrap();
    store.append("a", 0, vec![title(0)]).unwrap();
    armed.store(true, Ordering::SeqCst);
    let appender = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.append("a", 1, vec![title(1)]))
    };
    // The group is admitted (the warm fold holds seq 1) and its sync has begun.
    begun.recv().unwrap();
    let (seen_tx, seen) = mpsc::channel();
    let reader = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            let head = store.head("a").map(|head| head.next_seq);
            seen_tx.send(head).unwrap();
            let fold = store.with_fold("a", |fold| fold.admission().next_seq());
            seen_tx.send(fold).unwrap();
        })
    };
    let mut answers = Vec::new();
    if let Ok(answer) = seen.recv_timeout(Duration::from_millis(300)) {
        answers.push(answer.unwrap());
    }
    assert_eq!(
        answers,
        Vec::<u64>::new(),
        "a read answered before the group's sync ended"
    );
    word.send(sync_succeeds).unwrap();
    let appended = appender.join().unwrap();
    reader.join().unwrap();
    answers.extend(seen.iter().map(Result::unwrap));
    (appended, answers)
}

// Goal: a read never sees an append group before the group is durable, although admission
// advanced the warm fold before the WAL write: `head` and `with_fold` wait for the sync,
// then see the acknowledged head.
// Method: a WAL whose sync waits for the test; a reader started while it waits.
#[test]
fn a_read_waits_for_the_group_being_made_durable() {
    let (appended, answers) = read_during_a_sync(true);
    assert_eq!(appended.unwrap().next_seq, 2);
    assert_eq!(answers, [2, 2]);
}

// Goal: a group whose sync fails is never seen by a read, not even by one that started
// while the failing sync was under way: the read sees the last acknowledged head.
// Method: as above; the sync fails.
#[test]
fn a_read_never_sees_a_group_whose_sync_fails() {
    let (appended, answers) = read_during_a_sync(false);
    assert!(
        matches!(appended, Err(StoreError::Storage(_))),
        "{appended:?}"
    );
    assert_eq!(answers, [1, 1]);
}

// Goal: a panic inside redb while the store closes never escapes the drop, whether the store
// was written since its open (the close's durable commit) or only read (redb's own close,
// which writes its allocator state: `corrupt --trials 300 --seed 11` found redb panicking
// there on a file whose tail was zeroed); nothing acknowledged is lost, since the WAL keeps
// what the close did not make durable.
// Method: a backend whose writes panic once told to; close a store only read and one written,
// each with the panics on; reopen and compare the heads.
#[test]
fn a_panic_in_redb_while_the_store_closes_stays_inside() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(&dir);
    let acked = {
        let store = Store::open(&path).unwrap();
        store.create_session(&header("a")).unwrap();
        store.append("a", 0, vec![title(0), title(1)]).unwrap()
    };
    let open = |panics: &Arc<AtomicBool>| {
        let backend = Breakable {
            inner: FileBackend::new(open_rw(&path)).unwrap(),
            broken: Arc::clone(panics),
            panics: true,
        };
        Store::open_with_backend(&path, backend).unwrap()
    };
    let panics = Arc::new(AtomicBool::new(false));
    let store = open(&panics);
    assert_eq!(store.head("a").unwrap(), acked_head(&acked));
    panics.store(true, Ordering::SeqCst);
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(store)));
    assert!(closed.is_ok(), "the close of a store only read panicked");
    panics.store(false, Ordering::SeqCst);
    let store = open(&panics);
    let written = store.append("a", 2, vec![title(2)]).unwrap();
    panics.store(true, Ordering::SeqCst);
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(store)));
    assert!(closed.is_ok(), "the close of a written store panicked");
    let store = Store::open(&path).unwrap();
    assert_eq!(store.head("a").unwrap(), acked_head(&written));
    assert!(store.verify(&[]).unwrap().iter().all(|r| r.ok()));
}
