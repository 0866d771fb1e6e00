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
use sessionlog_engine::store::verify::FaultKind;
use sessionlog_engine::store::{Store, StoreError};
use sessionlog_format::{Event, SessionHeader};

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

/// The scripted workload's sessions: two generated sessions (with replaces and
/// compactions), appended in interleaved batches.
fn script() -> Vec<(SessionHeader, Vec<Vec<Event>>)> {
    vec![generated(120, 21), generated(90, 22)]
}

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

fn drive(store: &Store, acked: &mut Acked) -> Option<StoreError> {
    let sessions = script();
    for (header, _) in &sessions {
        if let Err(error) = store.create_session(header) {
            return Some(after_error(store, error));
        }
        acked.created.push(header.id.clone());
        acked.events.insert(header.id.clone(), Vec::new());
    }
    let longest = sessions.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
    for idx in 0..longest {
        for (header, batches) in &sessions {
            let Some(batch) = batches.get(idx) else {
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

/// A failed write must be a storage error that poisons the store; a failed read may not
/// poison, but must be a clean storage or corruption error.
fn after_error(store: &Store, error: StoreError) -> StoreError {
    match &error {
        StoreError::Storage(message) => {
            assert!(!message.is_empty());
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
/// whole batch in flight beyond the acknowledged state. Returns how many acknowledged
/// sessions and events are missing (zero unless the medium lied about a sync).
fn check_recovered(path: &Path, image: &[u8], acked: &Acked, case: &str) -> u64 {
    std::fs::write(path, image).unwrap();
    let store = Store::open(path).unwrap_or_else(|e| panic!("{case}: reopen failed: {e}"));
    let sessions = store.sessions().unwrap();
    let mut lost = 0;
    for (id, events) in &acked.events {
        if !sessions.contains(id) {
            lost += 1 + events.len() as u64;
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
        lost += expected.len() as u64 - head;
        let stored = store.read_range(id, 0, head).unwrap();
        assert!(
            stored[..] == expected[..head as usize],
            "{case}: {id}: stored events differ"
        );
        let fresh = store.fold_at(id, None).unwrap();
        assert_eq!(fresh.admission().next_seq(), head, "{case}");
    }
    let reports = store.verify(&[]).unwrap();
    let faults: Vec<_> = reports.iter().flat_map(|r| &r.faults).collect();
    // When a lying sync lost a session's creation, the WAL replays that session's appends as
    // records of no session; verify reports them as hidden records (and nothing else).
    let explained = lost > 0
        && faults
            .iter()
            .all(|f| f.kind == FaultKind::Missing && f.seq.is_none());
    assert!(faults.is_empty() || explained, "{case}: {reports:?}");
    lost
}

/// Runs one fault case, crashes, and checks both the power-loss image and the process-crash
/// image. Returns whether the fault fired as an error, and how many acknowledged items the
/// power-loss image lacks.
fn run_case(fault: Fault, empty: &[u8]) -> (bool, u64) {
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
        crash_lost, 0,
        "{case}: a process crash lost acknowledged data"
    );
    if !matches!(fault, Fault::LostSync(_)) {
        assert_eq!(lost, 0, "{case}: a power loss lost acknowledged data");
    }
    (error.is_some(), lost)
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
        writes > 10 && syncs > 2 && reads > 0,
        "{writes} {syncs} {reads}"
    );
    let mut fired = 0;
    let mut cases = 0;
    let mut lying_losses = 0;
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
            let (errored, lost) = run_case(make(at), &empty);
            fired += u64::from(errored);
            lying_losses += u64::from(lost > 0);
        }
    }
    eprintln!(
        "fault positions: {cases} cases ({writes} writes and ENOSPC each, {syncs} syncs and \
         lost syncs each, {reads} reads), {fired} surfaced as errors, {lying_losses} lost \
         syncs lost acknowledged data"
    );
    assert!(fired > 0);
}
