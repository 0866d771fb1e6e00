//! I/O fault injection at every position: a crash-image backend (in the spirit of redb's own)
//! holds the file in memory with a separate durable image, and fails the N-th write, sync or
//! read, fails a write with ENOSPC, or silently loses a sync. A scripted workload runs once per
//! fault position; after it, the process "crashes" (the durable image is all that is left),
//! and the reopened store holds exactly the acknowledged state.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use redb::StorageBackend;
use sessionlog_format::{Event, SessionHeader};
use sessionlog_store::embedded::{Store, StoreError, WalFile};

use crate::support::*;

/// What is injected, and at which operation of its kind (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The N-th write (or `set_len`) fails with an I/O error.
    Write(u64),
    /// The N-th write (or `set_len`) fails with ENOSPC.
    Enospc(u64),
    /// The N-th sync fails.
    Sync(u64),
    /// The N-th read fails.
    Read(u64),
    /// The N-th sync returns Ok but makes nothing durable; the power fails before the next
    /// sync, and every operation after that fails.
    LostSync(u64),
}

#[derive(Debug, Default)]
struct Image {
    /// What the process sees.
    current: Vec<u8>,
    /// What survives a power failure: `current` as of the last real sync.
    durable: Vec<u8>,
    writes: u64,
    syncs: u64,
    reads: u64,
    /// The power failed: every operation fails and the durable image is frozen.
    down: bool,
    lost_sync_pending: bool,
}

/// The crash-image backend; clones share one image.
#[derive(Debug, Clone)]
pub struct CrashImage {
    image: Arc<Mutex<Image>>,
    fault: Fault,
}

impl CrashImage {
    /// A backend holding `bytes`, already durable.
    pub fn new(fault: Fault, bytes: Vec<u8>) -> CrashImage {
        let image = Image {
            current: bytes.clone(),
            durable: bytes,
            ..Image::default()
        };
        CrashImage {
            image: Arc::new(Mutex::new(image)),
            fault,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Image> {
        self.image.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the power: from now on every operation fails.
    pub fn power_off(&self) {
        self.state().down = true;
    }

    pub fn durable(&self) -> Vec<u8> {
        self.state().durable.clone()
    }

    pub fn current(&self) -> Vec<u8> {
        self.state().current.clone()
    }

    /// How many writes, syncs and reads ran.
    pub fn counts(&self) -> (u64, u64, u64) {
        let s = self.state();
        (s.writes, s.syncs, s.reads)
    }

    fn write_op(&self, image: &mut Image) -> Result<(), io::Error> {
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        let n = image.writes;
        image.writes += 1;
        match self.fault {
            Fault::Write(at) if at == n => Err(io::Error::other("injected write failure")),
            Fault::Enospc(at) if at == n => Err(io::Error::from_raw_os_error(28)),
            _ => Ok(()),
        }
    }
}

impl StorageBackend for CrashImage {
    fn len(&self) -> Result<u64, io::Error> {
        let image = self.state();
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        Ok(image.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let mut image = self.state();
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        let n = image.reads;
        image.reads += 1;
        if self.fault == Fault::Read(n) {
            return Err(io::Error::other("injected read failure"));
        }
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + out.len();
        if end > image.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end",
            ));
        }
        out.copy_from_slice(&image.current[start..end]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut image = self.state();
        self.write_op(&mut image)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        image.current.resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut image = self.state();
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        let n = image.syncs;
        image.syncs += 1;
        if image.lost_sync_pending {
            // The sync after a lost one: the power fails first.
            image.down = true;
            return Err(io::Error::other("power failed"));
        }
        match self.fault {
            Fault::Sync(at) if at == n => Err(io::Error::other("injected sync failure")),
            Fault::LostSync(at) if at == n => {
                image.lost_sync_pending = true;
                Ok(())
            }
            _ => {
                image.durable = image.current.clone();
                Ok(())
            }
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut image = self.state();
        self.write_op(&mut image)?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + data.len();
        if end > image.current.len() {
            image.current.resize(end, 0);
        }
        image.current[start..end].copy_from_slice(data);
        Ok(())
    }
}

#[derive(Debug, Default)]
struct WalImage {
    current: Vec<u8>,
    durable: Vec<u8>,
    writes: u64,
    syncs: u64,
    down: bool,
}

/// A WAL file in memory with its durable image, failing its N-th write (or `set_len`), with
/// an I/O error or ENOSPC, or its N-th sync; clones share one image.
#[derive(Debug, Clone)]
pub struct CrashWal {
    image: Arc<Mutex<WalImage>>,
    fault: Fault,
}

impl CrashWal {
    pub fn new(fault: Fault) -> CrashWal {
        CrashWal {
            image: Arc::default(),
            fault,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WalImage> {
        self.image.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn power_off(&self) {
        self.state().down = true;
    }

    /// What the process sees, and what survives a power failure.
    pub fn images(&self) -> (Vec<u8>, Vec<u8>) {
        let s = self.state();
        (s.current.clone(), s.durable.clone())
    }

    /// How many writes and syncs ran.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.state();
        (s.writes, s.syncs)
    }

    fn write_op(&self, image: &mut WalImage) -> io::Result<()> {
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        let n = image.writes;
        image.writes += 1;
        match self.fault {
            Fault::Write(at) if at == n => Err(io::Error::other("injected WAL write failure")),
            Fault::Enospc(at) if at == n => Err(io::Error::from_raw_os_error(28)),
            _ => Ok(()),
        }
    }

    fn sync_op(&self) -> io::Result<()> {
        let mut image = self.state();
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        let n = image.syncs;
        image.syncs += 1;
        if self.fault == Fault::Sync(n) {
            return Err(io::Error::other("injected WAL sync failure"));
        }
        image.durable = image.current.clone();
        Ok(())
    }
}

impl WalFile for CrashWal {
    fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let image = self.state();
        if image.down {
            return Err(io::Error::other("power is off"));
        }
        Ok(image.current.clone())
    }

    fn write_all_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut image = self.state();
        self.write_op(&mut image)?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + bytes.len();
        if end > image.current.len() {
            image.current.resize(end, 0);
        }
        image.current[start..end].copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut image = self.state();
        self.write_op(&mut image)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        image.current.resize(len, 0);
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.sync_op()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.sync_op()
    }
}

/// The bytes of a new, empty store: `Store::open` creates its file atomically (built under a
/// temporary name and linked into place), so a store file always starts as a whole database.
fn empty_store() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    drop(Store::open(&path).unwrap());
    std::fs::read(&path).unwrap()
}

/// Builds the fault at a position.
type MakeFault = fn(u64) -> Fault;

/// The scripted workload's sessions: three generated sessions (with replaces and
/// compactions), appended in interleaved batches; the third is created after the others have
/// appended, so that creations are logged between appends.
fn script() -> Vec<(SessionHeader, Vec<Vec<Event>>)> {
    vec![generated(120, 21), generated(90, 22), generated(60, 23)]
}

/// The batch index before which the last session of the script is created.
const LATE_CREATION_BATCH_IDX: usize = 3;

/// The acknowledged state: per session, the events acknowledged, and the batch in flight
/// when the failure came (it may or may not be durable, but never in part).
#[derive(Debug, Default)]
struct Acked {
    created: Vec<String>,
    events: BTreeMap<String, Vec<Event>>,
    in_flight: Option<(String, Vec<Event>)>,
}

/// Runs the script until the first error, then cuts the power before the store is dropped
/// (a crash, not a clean close); returns what was acknowledged and the error, if any.
fn run_script(path: &Path, backend: CrashImage) -> (Acked, Option<StoreError>) {
    let mut acked = Acked::default();
    let store = match Store::open_with_backend(path, backend.clone()) {
        Ok(store) => store,
        Err(error) => return (acked, Some(error)),
    };
    let error = drive(&store, &mut acked);
    backend.power_off();
    drop(store);
    (acked, error)
}

/// The same, with the WAL held by `wal` (faults in the WAL file, not in redb's).
fn run_script_with_wal(
    path: &Path,
    backend: CrashImage,
    wal: CrashWal,
) -> (Acked, Option<StoreError>) {
    let mut acked = Acked::default();
    let store = match Store::open_with_backends(path, backend.clone(), wal.clone()) {
        Ok(store) => store,
        Err(error) => return (acked, Some(error)),
    };
    let error = drive(&store, &mut acked);
    backend.power_off();
    wal.power_off();
    drop(store);
    (acked, error)
}

fn drive(store: &Store, acked: &mut Acked) -> Option<StoreError> {
    let sessions = script();
    let (late, early) = sessions.split_last().expect("the script has sessions");
    for (header, _) in early {
        if let Err(error) = create(store, header, acked) {
            return Some(error);
        }
    }
    let longest = sessions.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
    for idx in 0..longest + LATE_CREATION_BATCH_IDX {
        if idx == LATE_CREATION_BATCH_IDX {
            if let Err(error) = create(store, &late.0, acked) {
                return Some(error);
            }
        }
        for (session_idx, (header, batches)) in sessions.iter().enumerate() {
            // The late session's batches start when it is created.
            let start_idx = if session_idx + 1 == sessions.len() {
                LATE_CREATION_BATCH_IDX
            } else {
                0
            };
            let Some(batch) = idx.checked_sub(start_idx).and_then(|i| batches.get(i)) else {
                continue;
            };
            let done = acked.events.get_mut(&header.id).unwrap();
            match store.append(&header.id, done.len() as u64, batch.clone()) {
                Ok(_) => done.extend(batch.iter().cloned()),
                Err(error) => {
                    acked.in_flight = Some((header.id.clone(), batch.clone()));
                    return Some(after_error(store, error));
                }
            }
        }
        if idx % 5 == 4 {
            // Readers run too, so that read faults have something to hit.
            for (header, _) in &sessions {
                if let Err(error) = store.fold_at(&header.id, None) {
                    return Some(after_error(store, error));
                }
            }
        }
    }
    None
}

/// Creates one session of the script and records the acknowledgement.
fn create(store: &Store, header: &SessionHeader, acked: &mut Acked) -> Result<(), StoreError> {
    match store.create_session(header) {
        Ok(()) => {
            acked.created.push(header.id.clone());
            acked.events.insert(header.id.clone(), Vec::new());
            Ok(())
        }
        Err(error) => Err(after_error(store, error)),
    }
}

/// A failed write must be a storage error that poisons the store; a failed read may not
/// poison, but must be a clean storage or corruption error.
fn after_error(store: &Store, error: StoreError) -> StoreError {
    match &error {
        StoreError::Storage(message) => {
            assert!(!message.message().is_empty());
        }
        StoreError::Corrupt { .. } => {}
        other => panic!("an I/O fault surfaced as {other:?}"),
    }
    if store.is_poisoned() {
        let again = store.create_session(&header("after-poison"));
        assert!(matches!(again, Err(StoreError::Poisoned)), "{again:?}");
    }
    error
}

/// Reopens `image` as the store file (with the WAL beside it) and checks it: no partial
/// batch, no event that differs, `verify` clean, the fold equal to the head, and at most the
/// whole batch in flight beyond the acknowledged state. Returns what acknowledged is missing.
fn check_recovered(path: &Path, image: &[u8], acked: &Acked, case: &str) -> Lost {
    std::fs::write(path, image).unwrap();
    let store = Store::open(path).unwrap_or_else(|e| panic!("{case}: reopen failed: {e}"));
    let sessions = store.sessions().unwrap();
    let mut lost = Lost::default();
    for (id, events) in &acked.events {
        if !sessions.contains(id) {
            lost.sessions += 1;
            lost.events += events.len() as u64;
            continue;
        }
        let head = store.head(id).unwrap().next_seq;
        let mut expected = events.clone();
        if let Some((_, batch)) = acked.in_flight.as_ref().filter(|(s, _)| s == id) {
            if head > events.len() as u64 {
                expected.extend(batch.iter().cloned());
                assert_eq!(head, expected.len() as u64, "{case}: a partial batch");
            }
        }
        assert!(
            head <= expected.len() as u64,
            "{case}: {id}: events from nowhere"
        );
        lost.events += expected.len() as u64 - head;
        let stored = store.read_range(id, 0, head).unwrap();
        assert!(
            stored[..] == expected[..head as usize],
            "{case}: {id}: stored events differ"
        );
        let fresh = store.fold_from_start(id, None).unwrap();
        assert_eq!(fresh.admission().next_seq(), head, "{case}");
    }
    let reports = store.verify(&[]).unwrap();
    assert!(reports.iter().all(|r| r.ok()), "{case}: {reports:?}");
    lost
}

/// Acknowledged items a reopen lacks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Lost {
    sessions: u64,
    events: u64,
}

/// Runs one fault case, crashes, and checks both the power-loss image and the process-crash
/// image: neither may lack an acknowledged session creation or event. Returns whether the
/// fault fired as an error.
fn run_case(fault: Fault, empty: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let backend = CrashImage::new(fault, empty.to_vec());
    let (acked, error) = run_script(&path, backend.clone());
    let case = format!("{fault:?}");
    let wal_path = path.with_extension("redb.wal");
    let wal = std::fs::read(&wal_path).ok();
    let lost = check_recovered(
        &path,
        &backend.durable(),
        &acked,
        &format!("{case} power loss"),
    );
    if let Some(wal) = wal {
        std::fs::write(&wal_path, wal).unwrap();
    }
    let crash_lost = check_recovered(&path, &backend.current(), &acked, &format!("{case} crash"));
    assert_eq!(
        crash_lost,
        Lost::default(),
        "{case}: a process crash lost acknowledged data"
    );
    assert_eq!(
        lost,
        Lost::default(),
        "{case}: a power loss lost acknowledged data"
    );
    error.is_some()
}

// Goal: every write, ENOSPC, sync, read and lost-sync position of a scripted workload ends in
// a clean error (or none), a poisoned writer, and a reopen with exactly what was acknowledged.
// Method: count each kind's operations in a fault-free run, then rerun the script once per
// position of each kind, power off, and reopen both the durable and the current image.
#[test]
fn every_fault_position_recovers_the_acknowledged_state() {
    let dir = tempfile::tempdir().unwrap();
    let empty = empty_store();
    let backend = CrashImage::new(Fault::None, empty.clone());
    let (acked, error) = run_script(&dir.path().join("store.redb"), backend.clone());
    assert!(error.is_none(), "{error:?}");
    assert!(acked.events.values().all(|e| !e.is_empty()));
    let (writes, syncs, reads) = backend.counts();
    assert!(
        writes > 2 && syncs > 2 && reads > 0,
        "{writes} {syncs} {reads}"
    );
    assert_eq!(acked.created.len(), script().len());
    let mut fired = 0;
    let mut cases = 0;
    let kinds: [(MakeFault, u64); 5] = [
        (Fault::Write, writes),
        (Fault::Enospc, writes),
        (Fault::Sync, syncs),
        (Fault::Read, reads),
        (Fault::LostSync, syncs),
    ];
    for (make, n) in kinds {
        for at in 0..n {
            cases += 1;
            fired += u64::from(run_case(make(at), &empty));
        }
    }
    eprintln!(
        "fault positions: {cases} cases ({writes} writes and ENOSPC each, {syncs} syncs and \
         lost syncs each, {reads} reads), {fired} surfaced as errors, 0 acknowledged \
         creations or events lost"
    );
    assert!(fired > 0);
}

/// Runs one WAL fault case and reopens the power-loss image (the durable redb and WAL images)
/// and the process-crash image (the current ones); neither may lack anything acknowledged.
/// Returns whether the fault fired as an error.
fn run_wal_case(fault: Fault, empty: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let wal_path = path.with_extension("redb.wal");
    let backend = CrashImage::new(Fault::None, empty.to_vec());
    let wal = CrashWal::new(fault);
    let (acked, error) = run_script_with_wal(&path, backend.clone(), wal.clone());
    let wal_durable = wal.state().durable.clone();
    let wal_current = wal.state().current.clone();
    let images = [
        ("power loss", backend.durable(), wal_durable),
        ("crash", backend.current(), wal_current),
    ];
    for (what, store_image, wal_image) in images {
        std::fs::write(&wal_path, wal_image).unwrap();
        let case = format!("WAL {fault:?} {what}");
        let lost = check_recovered(&path, &store_image, &acked, &case);
        assert_eq!(lost, Lost::default(), "{case}: lost acknowledged data");
    }
    error.is_some()
}

// Goal: every write, ENOSPC and sync position of the WAL file itself (where creations and
// appends become durable) ends in a clean error, a poisoned writer, and a reopen with exactly
// what was acknowledged (plus at most the whole batch or creation in flight).
// Method: count the WAL's operations in a fault-free run, then rerun the script once per
// position, power off, and reopen both images.
#[test]
fn every_wal_fault_position_recovers_the_acknowledged_state() {
    let dir = tempfile::tempdir().unwrap();
    let empty = empty_store();
    let wal = CrashWal::new(Fault::None);
    let backend = CrashImage::new(Fault::None, empty.clone());
    let (acked, error) = run_script_with_wal(&dir.path().join("store.redb"), backend, wal.clone());
    assert!(error.is_none(), "{error:?}");
    assert_eq!(acked.created.len(), script().len());
    let (writes, syncs) = wal.counts();
    assert!(writes > 10 && syncs > 10, "{writes} {syncs}");
    // The WAL grows in steps of written zeros (64 KiB, then the file's length): past one
    // step, some of the write positions below are frames that grow the file.
    let wal_len_bytes = wal.state().current.len();
    eprintln!("WAL file after the script: {wal_len_bytes} bytes");
    assert!(wal_len_bytes > 64 << 10, "{wal_len_bytes}");
    let kinds: [(MakeFault, u64); 3] = [
        (Fault::Write, writes),
        (Fault::Enospc, writes),
        (Fault::Sync, syncs),
    ];
    let mut cases = 0;
    let mut fired = 0;
    for (make, n) in kinds {
        for at in 0..n {
            cases += 1;
            fired += u64::from(run_wal_case(make(at), &empty));
        }
    }
    eprintln!(
        "WAL fault positions: {cases} cases ({writes} writes and ENOSPC each, {syncs} \
         syncs), {fired} surfaced as errors, 0 acknowledged creations or events lost"
    );
    assert_eq!(
        fired, cases,
        "every WAL fault position is reached by the script"
    );
}
