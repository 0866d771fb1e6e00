//! The embedded store: many sessions in one redb file, each an append-only chain of
//! checksummed records, with the session folds kept warm in memory and checkpointed to disk.
//!
//! The store is synchronous. Appends are serialized by one write lock and may be grouped: a
//! group of batches from many sessions shares one WAL frame, hence one fsync (the writer
//! thread in `log_service` does this). A batch is admitted in full or not at all, and it is
//! acknowledged only after its WAL frame is synced; its records then reach redb off the
//! append's path (see the `staged` module), and redb is made durable in bulk (see the `wal`
//! module). After any I/O failure the store is poisoned: every later write fails until it is
//! reopened, and reopening recovers exactly the last acknowledged state.

pub(crate) mod backend;
mod blocks;
mod decode_ahead;
mod gate;
mod import;
mod overlay;
mod sealer;
mod session;
mod staged;
mod tables;
mod unsynced;
pub mod verify;
mod wal;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableHandle,
};
use sessionlog_format::fold::SessionFold;
use sessionlog_format::record;
use sessionlog_format::{Event, SessionHeader};

use self::blocks::BLOCKS;
use self::sealer::{Hint, Sealer};
use self::session::SessionState;
use self::staged::{Staged, StagedGroup, StagedRecord};
use self::tables::{
    CHECKPOINTS, EVENTS, FACT_SEGMENTS, KEPT_CHECKPOINTS, META, META_KEY, SESSIONS,
};
pub use self::tables::{STORE_FORMAT_VERSION, STORE_VERSION_BLOCKS, STORE_VERSION_V4_SESSIONS};
pub use self::wal::{wal_path, WalFile};
pub use crate::types::DamagedFrame;
pub use crate::types::Head;
pub use crate::types::{
    admit_expected, check_new_header, check_session_id, AppendAck, AppendRequest, StorageFailure,
    StoreError, BATCH_EVENTS_MAX, CHECKPOINT_INTERVAL_EVENTS, KEPT_CHECKPOINT_INTERVAL_EVENTS,
    SESSION_ID_BYTES_MAX,
};

use self::wal::{FrameBuilder, Replay, Wal, WalEntry};
use crate::publish::{publish_file, PublishError};

/// How far the WAL may grow while snapshot readers keep a writer from making redb durable.
const WAL_DEFERRED_BYTES_MAX: u64 = 4 * wal::DURABLE_BYTES_MAX;

/// How long a snapshot reader waits before it reads a WAL with a damaged frame again.
const SNAPSHOT_REREAD_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// redb's page cache of a read-only open, in bytes (redb's default is 1 GiB). A read command
/// walks each page about once, so a bigger cache only holds what was read: with the default,
/// `verify` of a 200k-event store kept every page it had read, its memory growing with the
/// store (142 MiB, against 56 MiB at 50k events). With 8 MiB, `verify` of a 100k-event store
/// read as many pages from the file (8,518 `pread`s against 8,519 with 2 MiB), and the cache
/// was 7-8 MiB more of its peak at 1M events; redb keeps its branch pages before its leaves.
pub const READ_ONLY_CACHE_BYTES: usize = 2 << 20;

/// redb's page cache of a writable open, in bytes (redb's default is 1 GiB). redb keeps the
/// pages of non-durable commits in it until the next durable commit (up to half of it), and
/// every page read: with the default, an import's memory grew with the store it wrote (570 MiB
/// at 1M events, against about 100 MiB for everything else). Appends and imports touch the
/// tail of the tables and the sealer's last runs, which this holds many times over.
pub const WRITABLE_CACHE_BYTES: usize = 32 << 20;

/// The store used when neither `--db` nor `SESSIONLOG_DB` names one:
/// `$XDG_DATA_HOME/sessionlog/sessions.redb`, else `$HOME/.local/share/sessionlog/sessions.redb`.
pub fn default_path() -> Option<PathBuf> {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let data =
        non_empty("XDG_DATA_HOME").or_else(|| non_empty("HOME").map(|h| h.join(".local/share")))?;
    Some(data.join("sessionlog").join("sessions.redb"))
}

/// The embedded store.
pub struct Store {
    db: Arc<Database>,
    path: PathBuf,
    sessions: Mutex<HashMap<String, Arc<Mutex<SessionState>>>>,
    /// The write lock: held for a whole append group or session creation. `None` when the
    /// store is open read-only.
    wal: Mutex<Option<Wal>>,
    /// Opened read-only: nothing is ever written to either file.
    read_only: bool,
    /// The damaged frames of the WAL (a read-only open only).
    damaged: Vec<DamagedFrame>,
    poisoned: Arc<AtomicBool>,
    /// Acknowledged records and checkpoints redb does not hold yet (see the `staged` module).
    staged: Arc<Staged>,
    sealer: Sealer,
    /// Bytes of records moved from the events table into blocks since the store was opened:
    /// about the pages that sealing freed.
    sealed_bytes: Arc<AtomicU64>,
    /// Something was written since the open. A store only read is closed without a commit of
    /// ours (and its open made none when every table was there and took up a WAL holding
    /// only its header as it was), so its WAL is left byte for byte as it was; redb's own
    /// open and close still rewrite its header and allocator state.
    written: AtomicBool,
    /// Opened from its path (not over a backend handed in): the close may close redb and
    /// open the file again (see `compact_if_sparse`).
    by_path: bool,
    /// The snapshot gate (see the `gate` module): a writer's, taken exclusively around each
    /// durable transition, or a snapshot reader's, held shared while it is open. Declared
    /// after `db`, so that a writer's close holds it until redb's own close has written.
    gate: Option<gate::Gate>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Creates an empty redb file at `path` atomically: built and synced under a temporary name,
/// then linked into place without overwriting, and the directory synced. A crash while redb
/// writes a new file's header would otherwise leave a file that is not a redb database and a
/// store that can never be opened again. Losing a race to another creator is fine: its file is
/// kept and ours dropped.
fn create_file(path: &Path) -> Result<(), StoreError> {
    let failed = |temp: &Path, source: std::io::Error| PublishError {
        path: temp.to_owned(),
        source,
    };
    let io = |temp: &Path, e: redb::Error| failed(temp, std::io::Error::other(e));
    let created = publish_file(path, "creating", |temp| {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(temp)
            .map_err(|e| failed(temp, e))?;
        let backend = redb::backends::FileBackend::new(file).map_err(|e| io(temp, e.into()))?;
        let db = Database::builder()
            .create_with_backend(unsynced::UnsyncedFile(backend))
            .map_err(|e| io(temp, e.into()))?;
        let mut txn = db.begin_write().map_err(|e| io(temp, e.into()))?;
        // A durable commit, so the file's header names it (its syncs are the backend's
        // no-ops; the publisher's sync makes it durable).
        txn.set_durability(Durability::Immediate)
            .map_err(|e| io(temp, e.into()))?;
        // The tables and the meta record too, so that the first open commits nothing.
        write_tables(&txn).map_err(|e| failed(temp, std::io::Error::other(e)))?;
        txn.commit().map_err(|e| io(temp, e.into()))?;
        drop(db);
        Ok::<(), PublishError>(())
    });
    match created {
        Ok(()) => Ok(()),
        // Another creator won the race: its file is kept and ours dropped.
        Err(error) if error.is_exists() => Ok(()),
        Err(error) => Err(StoreError::storage(error)),
    }
}

/// Creates every table of a store that is missing and writes the meta record when it needs
/// it ([`meta_needs_rewrite`]), in `txn`: a new file's first transaction, or the first open's
/// of a store that lacks some.
fn write_tables(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
    let existing = meta.get(META_KEY).map_err(StoreError::storage)?;
    let rewrite = meta_needs_rewrite(existing.as_ref().map(|v| v.value()))?;
    drop(existing);
    if rewrite {
        meta.insert(
            META_KEY,
            tables::encode_meta(tables::STORE_VERSION_BLOCKS).as_slice(),
        )
        .map_err(StoreError::storage)?;
    }
    txn.open_table(SESSIONS).map_err(StoreError::storage)?;
    txn.open_table(EVENTS).map_err(StoreError::storage)?;
    txn.open_table(CHECKPOINTS).map_err(StoreError::storage)?;
    txn.open_table(KEPT_CHECKPOINTS)
        .map_err(StoreError::storage)?;
    txn.open_table(FACT_SEGMENTS).map_err(StoreError::storage)?;
    txn.open_table(BLOCKS).map_err(StoreError::storage)?;
    Ok(())
}

impl Store {
    /// Opens the store at `path`, creating it (and the meta record, and missing parent
    /// directories) when it does not exist.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        guard("opening the store", || Store::open_unguarded(path))
    }

    fn open_unguarded(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(StoreError::storage)?;
        }
        if !path.exists() {
            create_file(path)?;
        }
        // Snapshot readers of another writer's store finish before this open may repair,
        // replay or restart anything.
        let gate = Store::writer_gate(path)?;
        // A damaged WAL is refused before redb opens the file, which would write to it.
        let wal_path = wal::wal_path(path);
        if let Some(first) = wal::read(&wal_path)?.damaged.first() {
            return Err(wal_damaged(&wal_path, first));
        }
        let db = Store::writable_builder()
            .create(path)
            .map_err(|error| match error {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
                    path: path.display().to_string(),
                },
                other => StoreError::storage(other),
            })?;
        let opened = Wal::open(&wal_path)?;
        let mut store = Store::open_parts(path, db, opened, gate)?;
        store.by_path = true;
        Ok(store)
    }

    /// The writer's gate on the store's WAL, taken exclusively: released once the open has
    /// replayed and restarted the WAL.
    fn writer_gate(path: &Path) -> Result<gate::Gate, StoreError> {
        let wal_path = wal::wal_path(path);
        let gate = gate::Gate::for_writer(&wal_path)
            .map_err(|e| StoreError::storage_message(format!("{}: {e}", wal_path.display())))?;
        let taken = gate
            .lock_within(gate::Mode::Exclusive, gate::OPEN_WAIT)
            .map_err(|e| StoreError::storage_message(format!("{}: {e}", wal_path.display())))?;
        if !taken {
            return Err(StoreError::Locked {
                path: path.display().to_string(),
            });
        }
        Ok(gate)
    }

    /// Opens a store whose redb file goes through `backend` (fault injection, other media);
    /// `path` names the store and places its WAL (`<path>.wal`).
    pub fn open_with_backend(
        path: &Path,
        backend: impl redb::StorageBackend,
    ) -> Result<Store, StoreError> {
        guard("opening the store", || {
            let gate = Store::writer_gate(path)?;
            let db = Store::writable_builder()
                .create_with_backend(backend)
                .map_err(StoreError::storage)?;
            let opened = Wal::open(&wal::wal_path(path))?;
            Store::open_parts(path, db, opened, gate)
        })
    }

    /// Opens a store whose redb file goes through `backend` and whose WAL goes through
    /// `wal_file` (fault injection into both files).
    pub fn open_with_backends(
        path: &Path,
        backend: impl redb::StorageBackend,
        wal_file: impl WalFile + 'static,
    ) -> Result<Store, StoreError> {
        guard("opening the store", || {
            let gate = Store::writer_gate(path)?;
            let db = Store::writable_builder()
                .create_with_backend(backend)
                .map_err(StoreError::storage)?;
            let opened = Wal::open_file(&wal::wal_path(path), Box::new(wal_file))?;
            Store::open_parts(path, db, opened, gate)
        })
    }

    /// Builds the writable store over an opened redb file and WAL, the gate held
    /// exclusively: replays the WAL, then lets snapshot readers in.
    fn open_parts(
        path: &Path,
        db: Database,
        (wal, replay): (Wal, Replay),
        gate: gate::Gate,
    ) -> Result<Store, StoreError> {
        if let Some(first) = replay.damaged.first() {
            // Never restarted: the restart would make the damaged frame, and everything it
            // held, stale for good.
            return Err(wal_damaged(&wal::wal_path(path), first));
        }
        let mut store = Store::new(path, db, Some(wal), Vec::new(), gate);
        store.init_tables()?;
        store.replay(replay.entries)?;
        if let Some(gate) = &store.gate {
            gate.unlock();
        }
        store.sealer = Sealer::spawn(
            Arc::clone(&store.db),
            Arc::clone(&store.staged),
            Arc::clone(&store.poisoned),
            Arc::clone(&store.sealed_bytes),
        );
        Ok(store)
    }

    fn new(
        path: &Path,
        db: Database,
        wal: Option<Wal>,
        damaged: Vec<DamagedFrame>,
        gate: impl Into<Option<gate::Gate>>,
    ) -> Store {
        Store {
            db: Arc::new(db),
            path: path.to_owned(),
            sessions: Mutex::new(HashMap::new()),
            read_only: wal.is_none(),
            wal: Mutex::new(wal),
            damaged,
            poisoned: Arc::new(AtomicBool::new(false)),
            staged: Arc::new(Staged::default()),
            sealer: Sealer::idle(),
            sealed_bytes: Arc::new(AtomicU64::new(0)),
            written: AtomicBool::new(false),
            by_path: false,
            gate: gate.into(),
        }
    }

    /// Opens the store at `path` read-only: neither file is changed or created, the WAL is
    /// replayed in memory (over the file's pages, see the `overlay` module), and every write
    /// is refused with `ReadOnly`. A missing file is `Missing`, an empty or foreign one
    /// `NotAStore`. Beside a writer holding the store (`serve`), it reads the snapshot the
    /// writer's gate lets through: what a crash at that instant would recover (see the `gate`
    /// module); a writer that does not let it through in time is `Locked`. A WAL with damaged
    /// frames still
    /// opens: its valid frames are replayed and [`Store::damaged_frames`] names the rest.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        guard("opening the store read-only", || {
            Store::open_read_only_unguarded(path)
        })
    }

    fn open_read_only_unguarded(path: &Path) -> Result<Store, StoreError> {
        let not_a_store = |reason: String| StoreError::NotAStore {
            path: path.display().to_string(),
            reason,
        };
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing {
                    path: path.display().to_string(),
                })
            }
            Err(e) => {
                return Err(StoreError::storage_message(format!(
                    "{}: {e}",
                    path.display()
                )))
            }
        };
        if !metadata.is_file() {
            return Err(not_a_store("it is not a regular file".into()));
        }
        if metadata.len() == 0 {
            return Err(not_a_store("it is empty".into()));
        }
        // Read before the file's lock is taken, and checked again after: a writer that opened
        // in between would hold the lock, and one that closed has only emptied the WAL.
        let replay = wal::read(&wal::wal_path(path))?;
        match Store::open_overlay(path, overlay::Locking::Shared) {
            Ok(db) => Store::open_in_memory(path, db, replay, None),
            // A writer holds the store: read the snapshot it lets through its gate.
            Err(StoreError::Locked { .. }) => Store::open_snapshot(path),
            Err(error) => Err(error),
        }
    }

    /// redb's builder for a writable open: its page cache bounded at [`WRITABLE_CACHE_BYTES`].
    fn writable_builder() -> redb::Builder {
        let mut builder = redb::Builder::new();
        builder.set_cache_size(WRITABLE_CACHE_BYTES);
        builder
    }

    /// Opens redb over the file through the in-memory overlay.
    fn open_overlay(path: &Path, locking: overlay::Locking) -> Result<Database, StoreError> {
        let not_a_store = |reason: String| StoreError::NotAStore {
            path: path.display().to_string(),
            reason,
        };
        let backend = overlay::OverlayBackend::open(path, locking)
            .map_err(|e| StoreError::storage_message(format!("{}: {e}", path.display())))?;
        let db = redb::Builder::new()
            .set_cache_size(READ_ONLY_CACHE_BYTES)
            .create_with_backend(backend)
            .map_err(|error| match error {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
                    path: path.display().to_string(),
                },
                redb::DatabaseError::UpgradeRequired(found) => StoreError::NotAStore {
                    path: path.display().to_string(),
                    reason: format!("a redb file of format {found}, not this build's"),
                },
                other => not_a_store(other.to_string()),
            })?;
        check_is_store(&db).map_err(|e| match e {
            StoreError::Storage(reason) => not_a_store(reason.to_string()),
            other => other,
        })?;
        Ok(db)
    }

    /// The read-only store over `db` with the WAL's records replayed in memory.
    fn open_in_memory(
        path: &Path,
        db: Database,
        replay: Replay,
        gate: Option<gate::Gate>,
    ) -> Result<Store, StoreError> {
        let store = Store::new(path, db, None, replay.damaged, gate);
        store.init_tables()?;
        store.replay_records(&replay.entries)?;
        Ok(store)
    }

    /// Opens the snapshot of a store that a writer holds (see the `gate` module): its gate
    /// taken shared, redb's last durable commit read without redb's lock, and the WAL replayed
    /// over it in memory. The gate is held until the store is dropped.
    fn open_snapshot(path: &Path) -> Result<Store, StoreError> {
        let locked = || StoreError::Locked {
            path: path.display().to_string(),
        };
        let wal_path = wal::wal_path(path);
        let io =
            |e: std::io::Error| StoreError::storage_message(format!("{}: {e}", wal_path.display()));
        let gate = gate::Gate::for_reader(&wal_path)
            .map_err(io)?
            .ok_or_else(locked)?;
        if !gate
            .lock_within(gate::Mode::Shared, gate::READ_WAIT)
            .map_err(io)?
        {
            return Err(locked());
        }
        let mut replay = wal::read(&wal_path)?;
        if !replay.damaged.is_empty() {
            // A frame the writer is writing right now can look damaged for an instant: a
            // damaged frame is one that is still damaged a moment later.
            std::thread::sleep(SNAPSHOT_REREAD_PAUSE);
            replay = wal::read(&wal_path)?;
        }
        let db = Store::open_overlay(path, overlay::Locking::None)?;
        Store::open_in_memory(path, db, replay, Some(gate))
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The WAL's damaged frames (a read-only open of a damaged WAL); empty otherwise.
    pub fn damaged_frames(&self) -> &[DamagedFrame] {
        &self.damaged
    }

    /// Re-inserts the WAL's records that redb lost in a crash (a record already present must be
    /// identical), makes redb durable, and empties the WAL. A WAL that holds only its header
    /// (a clean close) is taken up as it is: an open that then writes nothing leaves the WAL
    /// as it was.
    fn replay(&self, entries: Vec<WalEntry>) -> Result<(), StoreError> {
        let mut wal = lock(&self.wal);
        let wal = wal.as_mut().expect("a writable store has its WAL");
        if entries.is_empty() && wal.holds_only_its_header() {
            wal.resume_empty();
            return Ok(());
        }
        self.replay_records(&entries)?;
        wal.restart()
    }

    /// Inserts the WAL's records into redb (in memory, for a read-only store) in one durable
    /// commit.
    fn replay_records(&self, entries: &[WalEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut txn = self.db.begin_write().map_err(StoreError::storage)?;
        txn.set_durability(Durability::Immediate)
            .map_err(StoreError::storage)?;
        {
            let mut sessions = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
            let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
            let mut events = txn.open_table(EVENTS).map_err(StoreError::storage)?;
            let blocks = txn.open_table(BLOCKS).map_err(StoreError::storage)?;
            // Replayed records come in seq order, so a WAL whose records were sealed before a
            // crash decodes each block once (one reader per session key, in turn).
            let labels: HashMap<u64, String> = entries
                .iter()
                .filter_map(|e| match e {
                    WalEntry::Event { key, .. } => Some((*key, format!("session key {key}"))),
                    WalEntry::Session { .. } => None,
                })
                .collect();
            let mut sealed = None;
            for entry in entries {
                match entry {
                    WalEntry::Session { record } => {
                        replay_session(&mut sessions, &mut meta, record)?
                    }
                    WalEntry::Event { key, seq, record } => {
                        let reader = match &mut sealed {
                            Some((k, reader)) if *k == *key => reader,
                            slot => {
                                let label = labels[key].as_str();
                                &mut slot
                                    .insert((*key, blocks::Sealed::new(&blocks, label, *key)))
                                    .1
                            }
                        };
                        replay_event(&mut events, reader, *key, *seq, record)?;
                    }
                }
            }
        }
        txn.commit().map_err(StoreError::storage)
    }

    /// Makes every acknowledged record durable in redb (the staged ones flushed first) and
    /// empties the WAL, the gate held exclusively.
    fn make_durable(&self, wal: &mut Wal) -> Result<(), StoreError> {
        {
            // Nothing is staged after this flush until the caller lets go of the WAL (only an
            // append group under it stages), so readers need not wait for the durable commit.
            let flushing = self.staged.flushing();
            self.staged.flush_locked(&self.db, &flushing)?;
        }
        let mut txn = self.db.begin_write().map_err(StoreError::storage)?;
        txn.set_durability(Durability::Immediate)
            .map_err(StoreError::storage)?;
        txn.commit().map_err(StoreError::storage)?;
        wal.restart()
    }

    /// Makes redb durable under the gate, taken exclusively within `wait` (`None`: only if
    /// it is free now). `Ok(false)` when snapshot readers kept it: nothing was made durable.
    fn make_durable_gated(
        &self,
        wal: &mut Wal,
        wait: Option<std::time::Duration>,
    ) -> Result<bool, StoreError> {
        let Some(gate) = &self.gate else {
            return self.make_durable(wal).map(|()| true);
        };
        let taken = match wait {
            None => gate.try_lock(gate::Mode::Exclusive),
            Some(wait) => gate.lock_within(gate::Mode::Exclusive, wait),
        }
        .map_err(|e| StoreError::storage_message(format!("the WAL's gate: {e}")))?;
        if !taken {
            return Ok(false);
        }
        let durable = self.make_durable(wal);
        gate.unlock();
        durable.map(|()| true)
    }

    /// Makes redb durable now, waiting for snapshot readers at most [`gate::OPEN_WAIT`];
    /// then `Locked`, and nothing was made durable.
    fn make_durable_waiting(&self, wal: &mut Wal) -> Result<(), StoreError> {
        if self.make_durable_gated(wal, Some(gate::OPEN_WAIT))? {
            return Ok(());
        }
        Err(StoreError::Locked {
            path: self.path.display().to_string(),
        })
    }

    /// Makes redb durable once the WAL has grown past [`wal::DURABLE_BYTES_MAX`], unless
    /// snapshot readers hold the gate: then the WAL grows on, until
    /// [`WAL_DEFERRED_BYTES_MAX`], past which the append waits for them (at most
    /// [`gate::OPEN_WAIT`] per append).
    fn make_durable_when_full(&self, wal: &mut Wal) -> Result<(), StoreError> {
        let frames_bytes = wal.frames_len_bytes();
        if frames_bytes <= wal::DURABLE_BYTES_MAX {
            return Ok(());
        }
        let wait = (frames_bytes > WAL_DEFERRED_BYTES_MAX).then_some(gate::OPEN_WAIT);
        self.make_durable_gated(wal, wait).map(|_| ())
    }

    fn init_tables(&self) -> Result<(), StoreError> {
        if self.tables_ready()? {
            // Nothing to create or rewrite: no commit of ours (redb's own open and close
            // still write its header).
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(StoreError::storage)?;
        write_tables(&txn)?;
        txn.commit().map_err(StoreError::storage)
    }

    /// Whether every table [`Store::init_tables`] creates exists and the meta record needs no
    /// rewrite (a newer store version is refused here as there).
    fn tables_ready(&self) -> Result<bool, StoreError> {
        let txn = self.db.begin_read().map_err(StoreError::storage)?;
        let names: Vec<String> = txn
            .list_tables()
            .map_err(StoreError::storage)?
            .map(|table| table.name().to_owned())
            .collect();
        if !table_names()
            .iter()
            .all(|name| names.iter().any(|n| n == name))
        {
            return Ok(false);
        }
        let meta = txn.open_table(META).map_err(StoreError::storage)?;
        let existing = meta.get(META_KEY).map_err(StoreError::storage)?;
        Ok(!meta_needs_rewrite(existing.as_ref().map(|v| v.value()))?)
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly {
                path: self.path.display().to_string(),
            });
        }
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(StoreError::Poisoned);
        }
        Ok(())
    }

    /// Marks the store poisoned and forgets the in-memory folds, which may be ahead of disk.
    fn poison(&self, failure: impl Into<StorageFailure>) -> StoreError {
        self.poisoned.store(true, Ordering::SeqCst);
        lock(&self.sessions).clear();
        StoreError::Storage(failure.into())
    }

    /// Whether an earlier failure stopped writes.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Creates a session from its V3 header. The header's id names the session.
    pub fn create_session(&self, header: &SessionHeader) -> Result<(), StoreError> {
        self.create_session_with(header, false)
    }

    /// Creates a session; `snapshot` marks a normalized dsh recording, whose rules admit
    /// `{{placeholder}}` values (spec 18).
    pub fn create_session_with(
        &self,
        header: &SessionHeader,
        snapshot: bool,
    ) -> Result<(), StoreError> {
        self.check_new_session(header, snapshot)?;
        let mut wal = lock(&self.wal);
        let wal = wal.as_mut().expect("a writable store has its WAL");
        match self.poison_on_panic("a session creation", || {
            self.insert_session(wal, header, snapshot, Creation::Session)
        }) {
            Err(StoreError::Storage(message)) => Err(self.poison(message)),
            other => other,
        }
    }

    /// What every creation checks before it takes the write lock: a writable store, the
    /// session-id rule, a valid V3 header.
    fn check_new_session(&self, header: &SessionHeader, snapshot: bool) -> Result<(), StoreError> {
        self.check_writable()?;
        check_new_header(header, snapshot)
    }

    /// Runs a write; a panic inside it (after admission advanced a warm fold, say) poisons the
    /// store like an I/O failure, so that no later write builds on state the disk lacks, and is
    /// returned as a storage error.
    fn poison_on_panic<T>(
        &self,
        what: &str,
        write: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(write)).unwrap_or_else(|panic| {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(self.poison(format!("{what} panicked: {detail}")))
        })
    }

    /// Stages the session record in a write transaction, makes it durable in the WAL (like an
    /// append group), then commits the transaction to redb without durability. An existing
    /// session is `SessionExists`, or `ImportInterrupted` when an import left it unfinished.
    fn insert_session(
        &self,
        wal: &mut Wal,
        header: &SessionHeader,
        snapshot: bool,
        creation: Creation,
    ) -> Result<(), StoreError> {
        self.written.store(true, Ordering::SeqCst);
        let mut txn = self.db.begin_write().map_err(StoreError::storage)?;
        txn.set_durability(Durability::None)
            .map_err(StoreError::storage)?;
        let mut frame = FrameBuilder::default();
        {
            let mut sessions = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
            if let Some(existing) = sessions
                .get(header.id.as_str())
                .map_err(StoreError::storage)?
            {
                let session = header.id.clone();
                return Err(if tables::is_importing(existing.value()) {
                    StoreError::ImportInterrupted { session }
                } else {
                    StoreError::SessionExists { session }
                });
            }
            let key = sessions.len().map_err(StoreError::storage)?;
            let record = tables::SessionRecord {
                key,
                snapshot,
                importing: creation == Creation::Import,
                header: header.clone(),
            };
            let bytes = tables::encode_session(&record);
            sessions
                .insert(header.id.as_str(), bytes.as_slice())
                .map_err(StoreError::storage)?;
            frame.push_session(&bytes);
            let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
            raise_store_version(&mut meta, &record)?;
        }
        // The transaction is dropped (aborted) if the WAL write fails: redb never sees it.
        wal.append(frame)?;
        if let Err(error) = txn.commit() {
            // Keep the WAL from replaying a creation that was never acknowledged.
            let _ = wal.invalidate_last_frame();
            return Err(StoreError::storage(error));
        }
        self.make_durable_when_full(wal)?;
        Ok(())
    }

    /// The ids of every session, in id order; the sessions of interrupted imports are not
    /// sessions yet and are left out (see [`Store::interrupted_imports`]).
    pub fn sessions(&self) -> Result<Vec<String>, StoreError> {
        self.list_sessions(Listed::Sessions)
    }

    /// The ids of the sessions that imports created and did not finish, in id order.
    pub fn interrupted_imports(&self) -> Result<Vec<String>, StoreError> {
        self.list_sessions(Listed::InterruptedImports)
    }

    /// The ids of every stored session record, interrupted imports included (`verify`).
    pub(crate) fn stored_sessions(&self) -> Result<Vec<String>, StoreError> {
        self.list_sessions(Listed::All)
    }

    /// A session record that fails its crc is listed as a session: the readers and `verify`
    /// report it, so it is never hidden.
    fn list_sessions(&self, listed: Listed) -> Result<Vec<String>, StoreError> {
        guard("listing sessions", || {
            let txn = self.read_txn()?;
            let table = txn.open_table(SESSIONS).map_err(StoreError::storage)?;
            let mut ids = Vec::new();
            for entry in table.iter().map_err(StoreError::storage)? {
                let (key, value) = entry.map_err(StoreError::storage)?;
                let importing = tables::is_importing(value.value());
                let keep = match listed {
                    Listed::All => true,
                    Listed::Sessions => !importing,
                    Listed::InterruptedImports => importing,
                };
                if keep {
                    ids.push(key.value().to_owned());
                }
            }
            Ok(ids)
        })
    }

    /// The session's header.
    pub fn header(&self, session: &str) -> Result<SessionHeader, StoreError> {
        let state = self.session_state(session)?;
        let header = lock(&state).header.clone();
        Ok(header)
    }

    /// Whether the session is a normalized dsh recording (spec 18).
    pub fn is_snapshot(&self, session: &str) -> Result<bool, StoreError> {
        let state = self.session_state(session)?;
        let snapshot = lock(&state).snapshot;
        Ok(snapshot)
    }

    /// The session's next seq and the chain hash at its head, for an auditor to pin: the head
    /// of the last durable append group (see `Store::with_durable_state`).
    pub fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.with_durable_state(session, SessionState::head)
    }

    /// Runs `f` on the session's warm state as the last append group left it, never between a
    /// group's admission and its WAL write: admission advances the state under the session's
    /// lock, and the group becomes durable after that lock is let go, under the WAL's. So the
    /// WAL's lock is taken first and let go once the session's is held. A read never sees a
    /// record that is not durable yet, nor one that a failing write is about to take back (the
    /// failure forgets every warm state before it lets the WAL's lock go). Lock order as on
    /// the write path: the WAL's, then the session's; the next group waits for `f`.
    fn with_durable_state<T>(
        &self,
        session: &str,
        f: impl FnOnce(&SessionState) -> T,
    ) -> Result<T, StoreError> {
        let wal = lock(&self.wal);
        let state = self.session_state(session)?;
        let state = lock(&state);
        drop(wal);
        Ok(f(&state))
    }

    /// Appends one batch and returns once it is durable.
    pub fn append(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError> {
        let request = AppendRequest {
            session: session.to_owned(),
            expected_next_seq,
            events,
        };
        self.append_group(vec![request])
            .pop()
            .expect("one result per request")
    }

    /// Waits until the sealing thread has done the work handed to it so far (the blocks due
    /// sealed, a requested flush done). Nothing needs it for correctness, since a read sees
    /// every acknowledged record whatever the sealer has done: it is for a benchmark that
    /// times a store's appends together with the background work they caused, so that the
    /// work is not timed as part of whatever runs next.
    pub fn settle(&self) {
        self.sealer.settle();
    }

    /// Appends several batches in one durable commit (one fsync). Each batch is admitted or
    /// refused on its own; a storage failure fails every batch of the group and poisons the
    /// store.
    pub fn append_group(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendAck, StoreError>> {
        self.append_group_by(requests, Writer::Client)
    }

    /// [`Store::append_group`] on behalf of `writer`: only the import appends to the session
    /// of an unfinished import.
    fn append_group_by(
        &self,
        requests: Vec<AppendRequest>,
        writer: Writer,
    ) -> Vec<Result<AppendAck, StoreError>> {
        if let Err(error) = self.check_writable() {
            let refused = |_| {
                Err(match &error {
                    StoreError::ReadOnly { path } => StoreError::ReadOnly { path: path.clone() },
                    _ => StoreError::Poisoned,
                })
            };
            return requests.iter().map(refused).collect();
        }
        let mut wal = lock(&self.wal);
        let wal = wal.as_mut().expect("a writable store has its WAL");
        self.written.store(true, Ordering::SeqCst);
        let n_requests = requests.len();
        let written = self.poison_on_panic("an append group", || {
            Ok(self.write_group(wal, requests, writer))
        });
        match written.unwrap_or_else(|error| Err((n_requests, error))) {
            Ok(results) => results,
            Err((n_requests, error)) => {
                let failure = match error {
                    StoreError::Storage(failure) => failure,
                    other => StorageFailure::new(other.to_string()),
                };
                self.poison(failure.clone());
                (0..n_requests)
                    .map(|_| Err(StoreError::Storage(failure.clone())))
                    .collect()
            }
        }
    }

    /// Admits every batch of the group, makes the admitted ones durable in one WAL frame,
    /// then stages their records for redb (see the `staged` module): no redb transaction on
    /// an append's path.
    fn write_group(
        &self,
        wal: &mut Wal,
        requests: Vec<AppendRequest>,
        writer: Writer,
    ) -> Result<Vec<Result<AppendAck, StoreError>>, (usize, StoreError)> {
        let n_requests = requests.len();
        let fail = |e: StoreError| (n_requests, e);
        let mut results = Vec::with_capacity(n_requests);
        let mut frame = wal.frame();
        let mut group = StagedGroup::default();
        let mut hints = Vec::new();
        for request in requests {
            let staged = self.stage(request, writer, &mut group, &mut frame, &mut hints);
            match staged {
                Err(StoreError::Storage(message)) => {
                    return Err(fail(StoreError::Storage(message)))
                }
                other => results.push(other),
            }
        }
        if frame.is_empty() {
            return Ok(results);
        }
        wal.append(frame).map_err(fail)?;
        let staged_bytes = self.staged.push(group);
        for hint in hints {
            self.sealer.hint(hint);
        }
        if staged_bytes >= staged::STAGED_BYTES_FLUSH {
            self.sealer.flush_soon();
        }
        self.make_durable_when_full(wal).map_err(fail)?;
        Ok(results)
    }

    /// Admits one batch into its session's fold and encodes its records into the frame and
    /// the staged group; when a block's worth is pending, adds the session to `hints` for the
    /// sealer (sent once the group is durable).
    fn stage(
        &self,
        request: AppendRequest,
        writer: Writer,
        group: &mut StagedGroup,
        frame: &mut FrameBuilder,
        hints: &mut Vec<Hint>,
    ) -> Result<AppendAck, StoreError> {
        let AppendRequest {
            session,
            expected_next_seq,
            events: batch,
        } = request;
        if batch.len() > BATCH_EVENTS_MAX {
            return Err(StoreError::BatchTooLarge {
                session,
                n_events: batch.len(),
            });
        }
        let state = match writer {
            Writer::Client => self.session_state(&session)?,
            Writer::Import => self.import_state(&session)?,
        };
        let mut state = lock(&state);
        if state.fold.replay_relations().is_err() {
            // The checkpoint the session resumed from is unusable after all (its fact journal
            // does not replay): the session is folded from its records, as an open does with a
            // damaged checkpoint. Nothing was appended since the load (an append replays first).
            *state = guard("loading a session", || {
                let txn = self.read_txn()?;
                SessionState::load_from_records(&txn, &session)
            })?;
        }
        let batch = admit_expected(&mut state.fold, &session, expected_next_seq, batch)?;
        let mut chain = state.head_chain;
        // The batch's records are staged as ranges of one copy of its part of the frame.
        let batch_start = frame.payload_len();
        let mut ranges = Vec::with_capacity(batch.len());
        for event in &batch {
            let (next_chain, record) = frame
                .push_with(state.key, event.seq, |out| {
                    record::encode_event(event, &chain, out)
                })
                .map_err(StoreError::storage)?;
            chain = next_chain;
            let record_len = record.len();
            state.pending.add(record_len);
            let end = frame.payload_len() - batch_start;
            ranges.push((event.seq, end - record_len..end));
        }
        let shared: Arc<[u8]> = Arc::from(frame.payload_from(batch_start));
        for (seq, range) in ranges {
            group.record(state.key, seq, StagedRecord::new(&shared, range));
        }
        state.head_chain = chain;
        state.written = true;
        let next_seq = state.fold.admission().next_seq();
        if next_seq >= state.checkpoint_next_seq + CHECKPOINT_INTERVAL_EVENTS {
            state.stage_checkpoint(group)?;
        }
        if state.pending.take_due() {
            hints.push(state.hint(&session));
        }
        Ok(AppendAck {
            session,
            first_seq: expected_next_seq,
            next_seq,
            head_chain: chain,
        })
    }

    /// The in-memory state of a session, loading it on first use; the session of an
    /// unfinished import is refused (`ImportInterrupted`).
    fn session_state(&self, session: &str) -> Result<Arc<Mutex<SessionState>>, StoreError> {
        let state = self.import_state(session)?;
        if lock(&state).importing {
            return Err(StoreError::ImportInterrupted {
                session: session.to_owned(),
            });
        }
        Ok(state)
    }

    /// The in-memory state of a session whatever its flags (the import's own path).
    fn import_state(&self, session: &str) -> Result<Arc<Mutex<SessionState>>, StoreError> {
        if let Some(state) = lock(&self.sessions).get(session) {
            return Ok(Arc::clone(state));
        }
        let state = Arc::new(Mutex::new(self.load_session(session)?));
        let mut sessions = lock(&self.sessions);
        let entry = sessions.entry(session.to_owned()).or_insert(state);
        Ok(Arc::clone(entry))
    }

    fn load_session(&self, session: &str) -> Result<SessionState, StoreError> {
        guard("loading a session", || {
            let txn = self.read_txn()?;
            SessionState::load(&txn, session)
        })
    }

    /// Events `from_seq..to_seq` (clamped to the head), checked record by record.
    pub fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        let read = guard("reading events", || {
            let txn = self.read_txn()?;
            session::read_range(&txn, session, from_seq, to_seq)
        });
        // A range from the head or past it is empty, as on every backend: the record before
        // it is absent because it was never written, which is not a corruption (issue #20).
        // The head is asked only then, so a read of a damaged session's intact prefix never
        // needs the whole session to load.
        match read {
            Err(error) => match self.head(session) {
                Ok(head) if from_seq >= head.next_seq => Ok(Vec::new()),
                _ => Err(error),
            },
            read => read,
        }
    }

    /// The fold as of `at_seq` inclusive (`None`: the head), folded in one read transaction
    /// from the nearest usable checkpoint at or below it (a kept one or the latest one).
    pub fn fold_at(&self, session: &str, at_seq: Option<u64>) -> Result<SessionFold, StoreError> {
        guard("folding a session", || {
            let txn = self.read_txn()?;
            session::fold_at(&txn, session, at_seq, false)
        })
    }

    /// [`Store::fold_at`] from seq 0, every checkpoint passed over: what a read costs without
    /// checkpoints, and a fold the checkpoints can be checked against.
    pub fn fold_from_start(
        &self,
        session: &str,
        at_seq: Option<u64>,
    ) -> Result<SessionFold, StoreError> {
        guard("folding a session", || {
            let txn = self.read_txn()?;
            session::fold_at(&txn, session, at_seq, true)
        })
    }

    /// Runs `f` on the session's warm fold at the head of the last durable append group (no
    /// copy of the fold is made; see `Store::with_durable_state`).
    pub fn with_fold<T>(
        &self,
        session: &str,
        f: impl FnOnce(&SessionFold) -> T,
    ) -> Result<T, StoreError> {
        self.with_durable_state(session, |state| f(&state.fold))
    }

    /// A read transaction that holds every acknowledged record: the staged ones are flushed
    /// into redb first (see the `staged` module). Every read of redb goes through here. A
    /// flush that fails poisons the store: redb no longer holds what was acknowledged.
    pub(crate) fn read_txn(&self) -> Result<redb::ReadTransaction, StoreError> {
        let flushing = self.staged.flushing();
        if let Err(error) = self.staged.flush_locked(&self.db, &flushing) {
            return Err(match error {
                StoreError::Storage(failure) => self.poison(failure),
                other => other,
            });
        }
        self.db.begin_read().map_err(StoreError::storage)
    }
}

impl Drop for Store {
    /// Makes redb durable and empties the WAL, so the next open has nothing to replay; then
    /// gives the file's free pages back when many are free; then closes redb.
    fn drop(&mut self) {
        self.sealer.stop();
        if !self.read_only && !self.is_poisoned() && self.written.load(Ordering::SeqCst) {
            // A panic inside redb here (a damaged page) must not escape a drop: what the
            // close did not make durable is still in the WAL, and the next open replays it.
            let _ = guard("closing the store", || {
                self.close_writes();
                Ok(())
            });
        }
        self.close_database();
    }
}

impl Store {
    /// Closes redb's file under a guard, before the fields drop: redb's close writes its
    /// allocator state, and on a damaged file (a page that does not read as the tree it
    /// should be) redb may panic there, which must not escape a drop. The file is then left
    /// as far as redb's close got; the next open repairs it or refuses it. An empty
    /// in-memory database stands in for the fields' drop. A store whose database is shared
    /// still (a sealer that did not stop) leaves it to the last owner.
    fn close_database(&mut self) {
        let Some(db) = Arc::get_mut(&mut self.db) else {
            return;
        };
        let Ok(stand_in) = stand_in_database() else {
            return;
        };
        let file = std::mem::replace(db, stand_in);
        let _ = guard("closing the store", || {
            drop(file);
            Ok(())
        });
    }

    /// The close of a store written since its open (see [`Drop`]).
    fn close_writes(&mut self) {
        // Sealing, the durable commit, the compaction and redb's own close (which writes its
        // allocator state) change the file under snapshot readers: they wait for the gate,
        // held until the fields drop, after redb's close (`Store::close_database`). A reader
        // that holds it past the wait is not waited for: the close goes on, and what that
        // reader reads next may fail its checksums (it reports damage, never a wrong record).
        if let Some(gate) = &self.gate {
            let _ = gate.lock_within(gate::Mode::Exclusive, gate::CLOSE_WAIT);
        }
        // Every session written since the open is checkpointed at its head, so that the next
        // open folds no tail; then what the sealer had not reached yet, and the tail of every
        // such session (when it is worth a block), is sealed: a closed store holds its records
        // compressed. Sessions only read are left as they are.
        let mut checkpoints = StagedGroup::default();
        let written: Vec<Hint> = lock(&self.sessions)
            .iter()
            .filter_map(|(session, state)| {
                let mut state = lock(state);
                if !state.written {
                    return None;
                }
                if state.fold.admission().next_seq() > state.checkpoint_next_seq {
                    // A checkpoint that cannot be encoded is only not written: the next open
                    // folds the tail, as it would after a crash.
                    let _ = state.stage_checkpoint(&mut checkpoints);
                }
                Some(state.hint(session))
            })
            .collect();
        self.staged.push(checkpoints);
        for hint in &written {
            let sealed = guard("sealing", || {
                let tail_min = Some(sealer::TAIL_SEAL_BYTES_MIN);
                sealer::seal_session(&self.db, &self.staged, hint, &self.sealed_bytes, tail_min)
            });
            if sealed.is_err() {
                // Unsealed records are as good as sealed ones; the next open goes on.
                break;
            }
        }
        let durable = {
            let mut wal = lock(&self.wal);
            let wal = wal.as_mut().expect("a writable store has its WAL");
            // A failure here leaves the WAL in place; the next open replays it.
            let durable = self.make_durable(wal).is_ok();
            if durable {
                // A closed store keeps no preallocated WAL zeros on disk.
                let _ = wal.cut_to_header();
            }
            durable
        };
        if durable {
            // Compaction only moves pages between durable states; a failure loses nothing.
            let _ = guard("compacting", || self.compact_if_sparse());
        }
    }
}

/// A clean close looks for free pages when sealing moved at least this much since the open...
const COMPACT_FREE_BYTES_MIN: u64 = 256 << 10;
/// ...and that is at least this fraction (1/n) of the file...
const COMPACT_FREE_FRACTION: u64 = 4;
/// ...and compacts when the pages redb has not allocated are at least this fraction (1/n) of
/// the file, once redb's own close has trimmed those at its end: a closed store is at most
/// about 3% larger than its live pages, inside the size bound's margin (BENCHMARKS.md).
const COMPACT_HOLES_FRACTION: u64 = 32;

impl Store {
    /// Compacts the redb file when sealing left much of it free: the records that moved into
    /// blocks leave their pages behind, and redb reuses pages freed by a non-durable commit
    /// only after a durable one.
    ///
    /// The bytes sealing moved since the open say whether to look: after a long write they
    /// always do, whatever the file holds. So a store opened from its path is closed and
    /// opened again, which lets redb's own close trim the free pages at the file's end; when
    /// that trimmed much, the allocated pages are counted (`WriteTransaction::stats`, a walk
    /// of every tree through the bounded page cache: 2.7 s at 10M events) and the
    /// compaction, whose walk keeps up to a million pages in a map (27 s and 67 MiB at 10M,
    /// when redb's trim had already freed all but 5 MB; BENCHMARKS.md, "Late night on
    /// 2026-12-04"), runs only when the holes left are worth it. A store opened over a
    /// backend handed in is compacted on the first count, as before.
    fn compact_if_sparse(&mut self) -> Result<bool, StoreError> {
        let file_bytes = file_len(&self.path)?;
        let freed = self.sealed_bytes.load(Ordering::SeqCst);
        if freed < COMPACT_FREE_BYTES_MIN || freed * COMPACT_FREE_FRACTION < file_bytes {
            return Ok(false);
        }
        let Some(db) = Arc::get_mut(&mut self.db) else {
            return Ok(false);
        };
        if self.by_path {
            // redb's close writes its allocator state and trims the file's free end; an empty
            // in-memory database stands in while the file is closed.
            drop(std::mem::replace(db, stand_in_database()?));
            let trimmed_bytes = file_bytes.saturating_sub(file_len(&self.path)?);
            // The file is durable and closed: if it does not open again, it stays as it is.
            let Ok(reopened) = Store::writable_builder().open(&self.path) else {
                return Ok(false);
            };
            *db = reopened;
            let path = &self.path;
            if !worth_compacting(file_bytes, trimmed_bytes, || unallocated_bytes(db, path))? {
                return Ok(false);
            }
        }
        db.compact().map_err(StoreError::storage)
    }
}

/// An empty in-memory database, to stand in for the store's while its file is closed.
fn stand_in_database() -> Result<Database, StoreError> {
    redb::Builder::new()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .map_err(StoreError::storage)
}

/// The length of the file at `path`.
fn file_len(path: &Path) -> Result<u64, StoreError> {
    Ok(std::fs::metadata(path).map_err(StoreError::storage)?.len())
}

/// Whether the close compacts a file of `file_bytes` of which redb's own close trimmed
/// `trimmed_bytes` from the end. A close that trimmed little left the free pages where they
/// were, inside the file (after a 1M-event import, 20% of it): they are compacted without a
/// count. One that trimmed much may have taken nearly all of them (at 10M, all but 5 MB):
/// `count` gives the file's length and its bytes redb has not allocated, and the holes are
/// compacted when they are at least 1/[`COMPACT_HOLES_FRACTION`] of it.
fn worth_compacting(
    file_bytes: u64,
    trimmed_bytes: u64,
    count: impl FnOnce() -> Result<(u64, u64), StoreError>,
) -> Result<bool, StoreError> {
    if trimmed_bytes.saturating_mul(COMPACT_HOLES_FRACTION) < file_bytes {
        return Ok(true);
    }
    let (file_bytes, unallocated_bytes) = count()?;
    Ok(unallocated_bytes.saturating_mul(COMPACT_HOLES_FRACTION) >= file_bytes)
}

/// The length of the file at `path` redb has open as `db`, and its bytes redb has not
/// allocated to a page (`WriteTransaction::stats`: a walk of every tree through the bounded
/// page cache, 2.7 s at 10M events).
fn unallocated_bytes(db: &Database, path: &Path) -> Result<(u64, u64), StoreError> {
    let txn = db.begin_write().map_err(StoreError::storage)?;
    let stats = txn.stats().map_err(StoreError::storage)?;
    txn.abort().map_err(StoreError::storage)?;
    let page_bytes = u64::try_from(stats.page_size()).map_err(StoreError::storage)?;
    let live_bytes = stats.allocated_pages().saturating_mul(page_bytes);
    let file_bytes = file_len(path)?;
    Ok((file_bytes, file_bytes.saturating_sub(live_bytes)))
}

/// The names of the tables [`Store::init_tables`] creates (a test pins the two together).
fn table_names() -> [&'static str; 7] {
    [
        META.name(),
        SESSIONS.name(),
        EVENTS.name(),
        CHECKPOINTS.name(),
        KEPT_CHECKPOINTS.name(),
        FACT_SEGMENTS.name(),
        BLOCKS.name(),
    ]
}

/// Whether the open rewrites the meta record `existing` (checked first: a newer store version
/// is refused). A version 1 store is a valid version 2 store without blocks: its meta record
/// is rewritten so that older builds, which do not read blocks, refuse it. A new store starts
/// at version 2 too: it moves to 3 with its first V4 session (`raise_store_version`), so that
/// until then older builds open it unchanged.
fn meta_needs_rewrite(existing: Option<&[u8]>) -> Result<bool, StoreError> {
    let found = existing.map(tables::check_meta).transpose()?;
    Ok(found.is_none_or(|version| version < tables::STORE_VERSION_BLOCKS))
}

/// The refusal of a writable open of a WAL with a damaged frame.
fn wal_damaged(wal_path: &Path, first: &DamagedFrame) -> StoreError {
    StoreError::WalDamaged {
        path: wal_path.display().to_string(),
        summary: format!(
            "frame {} at byte offset {} is damaged ({})",
            first.frame_idx, first.offset_bytes, first.reason
        ),
    }
}

/// Checks that an opened redb file is a sessionlog store: it has the meta record, of a
/// version this build reads. A foreign redb file or an empty database is refused.
fn check_is_store(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_read().map_err(StoreError::storage)?;
    read_store_version(&txn).map(|_| ())
}

/// The store version the meta record names, checked.
pub(crate) fn read_store_version(txn: &redb::ReadTransaction) -> Result<u32, StoreError> {
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(StoreError::Storage(
                "it has no sessionlog meta table".into(),
            ))
        }
        Err(e) => return Err(StoreError::storage(e)),
    };
    let bytes = meta
        .get(META_KEY)
        .map_err(StoreError::storage)?
        .ok_or_else(|| StoreError::Storage("it has no sessionlog meta record".into()))?;
    tables::check_meta(bytes.value())
}

/// Raises the meta record's store version to what `record`'s session needs (version 3 for a
/// V4 session), in the transaction that creates or replays the session; never lowers it.
fn raise_store_version(
    meta: &mut redb::Table<&str, &[u8]>,
    record: &tables::SessionRecord,
) -> Result<(), StoreError> {
    let needed = tables::store_version_for(session::context_of(record).version);
    let found = match meta.get(META_KEY).map_err(StoreError::storage)? {
        Some(bytes) => tables::check_meta(bytes.value())?,
        None => 0,
    };
    if found < needed {
        meta.insert(META_KEY, tables::encode_meta(needed).as_slice())
            .map_err(StoreError::storage)?;
    }
    Ok(())
}

/// Replays one logged session creation: an existing record must be identical, or be the
/// record a finished import made of it (the logged record with its importing flag cleared,
/// made durable in redb while the WAL still held the creation): the store is then ahead.
fn replay_session(
    sessions: &mut redb::Table<&str, &[u8]>,
    meta: &mut redb::Table<&str, &[u8]>,
    record: &[u8],
) -> Result<(), StoreError> {
    let logged = tables::logged_session_record(record).map_err(|reason| StoreError::Corrupt {
        reason: format!("WAL session record: {reason}"),
    })?;
    raise_store_version(meta, &logged)?;
    let id = logged.header.id;
    let finished = tables::with_import_finished(record);
    let same = sessions
        .get(id.as_str())
        .map_err(StoreError::storage)?
        .map(|v| v.value() == record || finished.as_deref() == Some(v.value()));
    match same {
        Some(true) => Ok(()),
        Some(false) => Err(StoreError::Corrupt {
            reason: format!("the WAL and the store disagree on the record of session {id}"),
        }),
        None => {
            sessions
                .insert(id.as_str(), record)
                .map_err(StoreError::storage)?;
            Ok(())
        }
    }
}

/// Who appends: the import alone may append to the session it is filling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    Client,
    Import,
}

/// What a session creation makes: a session, or the unfinished session of an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Creation {
    Session,
    Import,
}

/// Which session ids a listing returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    All,
    Sessions,
    InterruptedImports,
}

/// The blocks table as a write transaction opens it.
type BlocksTable<'t> = redb::Table<'t, (u64, u64, u32), &'static [u8]>;

/// Replays one logged event record: an existing record (in the events table or sealed in a
/// block) must be identical.
fn replay_event(
    events: &mut redb::Table<(u64, u64), &[u8]>,
    sealed: &mut blocks::Sealed<'_, BlocksTable<'_>>,
    key: u64,
    seq: u64,
    record: &[u8],
) -> Result<(), StoreError> {
    record::check_record_crc(record).map_err(|e| StoreError::Corrupt {
        reason: format!("WAL record of seq {seq}: {e}"),
    })?;
    let mut same = events
        .get((key, seq))
        .map_err(StoreError::storage)?
        .map(|v| v.value() == record);
    if same.is_none() {
        same = sealed.record(seq)?.map(|v| v == record);
    }
    match same {
        Some(true) => Ok(()),
        Some(false) => Err(StoreError::Corrupt {
            reason: format!("the WAL and the store disagree on seq {seq} of session key {key}"),
        }),
        None => {
            events
                .insert((key, seq), record)
                .map_err(StoreError::storage)?;
            Ok(())
        }
    }
}

/// Runs `f`, turning a panic into [`StoreError::Corrupt`]. redb keeps no page checksums and
/// panics on some damaged pages (a zero-filled tail, say); the corruption campaign
/// (RELIABILITY.md) found this, and no damaged file may crash the engine.
///
/// The panic is not printed (no message, no backtrace on stderr): it becomes the error, which
/// names what the store was doing. A panic hook installed once forwards every other panic to
/// the hook that was there before.
pub(crate) fn guard<T>(
    what: &str,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    quiet_panics_hook();
    GUARDED.with(|depth| depth.set(depth.get() + 1));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|depth| depth.set(depth.get() - 1));
    caught.unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(StoreError::Corrupt {
            reason: format!("the database failed while {what}: {detail}"),
        })
    })
}

thread_local! {
    /// How many [`guard`] calls this thread is inside: a panic there is caught and reported
    /// as an error, so it is not printed.
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Installs (once) the panic hook that keeps guarded panics quiet.
fn quiet_panics_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if GUARDED.with(|depth| depth.get()) == 0 {
                previous(info);
            }
        }));
    });
}

/// Locks a mutex; a panic while it was held poisons it, and the data is still consistent
/// because every mutation under these locks is completed or undone before unlocking.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_format::gen::{GenOptions, Generator};

    fn generated(seed: u64, n_events: u64) -> (SessionHeader, Vec<Event>) {
        let mut generator = Generator::new(GenOptions {
            events: n_events,
            seed,
        });
        let header = generator.header();
        let mut events = Vec::new();
        while let Some(batch) = generator.next_batch() {
            events.extend(batch);
        }
        (header, events)
    }

    // Goal: the tables `tables_ready` looks for are exactly those `init_tables` creates, so a
    // table added to one and not the other cannot make every open commit again, or skip one
    // it needs.
    // Method: a new store's tables, listed by redb, against `table_names`.
    #[test]
    fn the_tables_an_open_looks_for_are_the_ones_it_creates() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb")).unwrap();
        let txn = store.db.begin_read().unwrap();
        assert_tables_are_the_ones_looked_for(&txn);
        assert!(store.tables_ready().unwrap());
    }

    /// Asserts that the tables `txn` lists are exactly [`table_names`].
    fn assert_tables_are_the_ones_looked_for(txn: &redb::ReadTransaction) {
        let mut created: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_owned())
            .collect();
        created.sort();
        let mut looked_for = table_names().map(str::to_owned).to_vec();
        looked_for.sort();
        assert_eq!(created, looked_for);
    }

    // Goal: a new store file holds every table and its meta record when it is linked into
    // place, so that its first open finds the tables ready and commits nothing; and it opens
    // as redb wrote it, though redb's own syncs were skipped while it was built (the publisher
    // syncs it whole before the link).
    // Method: `create_file`, then the file opened by redb alone: its tables are the ones an
    // open looks for, the meta record says this build's store version, and the store's own
    // open finds the tables ready.
    #[test]
    fn a_new_file_is_linked_with_its_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        create_file(&path).unwrap();
        let temps: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(temps.len(), 1, "only the store file is left");
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_read().unwrap();
            assert_tables_are_the_ones_looked_for(&txn);
            let meta = txn.open_table(META).unwrap();
            let stored = meta.get(META_KEY).unwrap().expect("the meta record");
            assert!(!meta_needs_rewrite(Some(stored.value())).unwrap());
        }
        let store = Store::open(&path).unwrap();
        assert!(store.tables_ready().unwrap());
    }

    fn request(header: &SessionHeader, events: &[Event]) -> AppendRequest {
        AppendRequest {
            session: header.id.clone(),
            expected_next_seq: events[0].seq,
            events: events.to_vec(),
        }
    }

    // Goal: `settle` returns only once the sealer has sealed what the appends before it made
    // due, and changes nothing a read returns.
    // Method: append a block's worth to one session in one batch (the hint goes to the sealer
    // as the append returns, so without the wait the sealer is still at work), settle, then
    // look at the staged tail (the sealed run has left it) and read every event back.
    #[test]
    fn settle_waits_for_the_blocks_the_appends_made_due() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb")).unwrap();
        let (header, events) = generated(3, sessionlog_format::block::BLOCK_EVENTS_MAX as u64);
        store.create_session(&header).unwrap();
        store.append(&header.id, 0, events.clone()).unwrap();
        store.settle();
        let key = lock(&lock(&store.sessions)[&header.id]).key;
        let staged = store.staged.records_of(key).len();
        assert!(staged < events.len(), "nothing was sealed: {staged} staged");
        let read = store.read_range(&header.id, 0, u64::MAX).unwrap();
        assert_eq!(read, events);
        store.settle();
    }

    // Goal: an append request's records are staged as ranges of one buffer of their own: the
    // records of one request share it, and no two requests (of one session or of two) share
    // one, so that a slow session's staged records never keep another's in memory; and the
    // staged bytes are exactly the records, chained across requests.
    // Method: one group of three requests (session a, session b, session a again), then the
    // staged tail's records against records encoded here, and the events read back.
    #[test]
    fn each_request_stages_its_records_in_a_buffer_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb")).unwrap();
        let (header_a, events_a) = generated(1, 12);
        let (header_b, events_b) = generated(2, 12);
        assert_ne!(header_a.id, header_b.id);
        store.create_session(&header_a).unwrap();
        store.create_session(&header_b).unwrap();
        let results = store.append_group(vec![
            request(&header_a, &events_a[..5]),
            request(&header_b, &events_b[..4]),
            request(&header_a, &events_a[5..]),
        ]);
        assert!(results.iter().all(Result::is_ok), "{results:?}");

        let key_of = |id: &str| lock(&lock(&store.sessions)[id]).key;
        let staged_a = store.staged.records_of(key_of(&header_a.id));
        let staged_b = store.staged.records_of(key_of(&header_b.id));
        assert_eq!((staged_a.len(), staged_b.len()), (12, 4));
        let (first, second) = staged_a.split_at(5);
        for records in [first, second, &staged_b[..]] {
            assert!(records.iter().all(|r| r.shares_buffer_with(&records[0])));
        }
        assert!(!first[0].shares_buffer_with(&second[0]));
        assert!(!first[0].shares_buffer_with(&staged_b[0]));
        assert!(!second[0].shares_buffer_with(&staged_b[0]));

        for (header, events, staged) in [
            (&header_a, &events_a[..], &staged_a),
            (&header_b, &events_b[..4], &staged_b),
        ] {
            let mut chain = record::genesis_chain(header);
            for (event, staged) in events.iter().zip(staged) {
                let mut expected = Vec::new();
                chain = record::encode_event(event, &chain, &mut expected).unwrap();
                assert_eq!(staged.as_slice(), expected.as_slice());
            }
            let read = store.read_range(&header.id, 0, u64::MAX).unwrap();
            assert_eq!(read, events);
        }
    }

    // Goal: the close compacts without a count when redb's own close trimmed little (the free
    // pages are holes inside the file), and after a big trim only when the count still finds
    // 1/32 of the file unallocated.
    // Method: the decision on a 1,000-byte file with small and big trims, and counts on
    // either side of the fraction; a count asked for when it should not be fails the test.
    #[test]
    fn the_close_counts_the_holes_only_after_a_big_trim() {
        let never = || -> Result<(u64, u64), StoreError> { panic!("no count after a small trim") };
        assert!(worth_compacting(1000, 0, never).unwrap());
        assert!(worth_compacting(1000, 31, never).unwrap());
        assert!(!worth_compacting(1000, 32, || Ok((968, 30))).unwrap());
        assert!(worth_compacting(1000, 32, || Ok((968, 31))).unwrap());
        assert!(!worth_compacting(4_294_971_392, 802_258_816, || Ok((
            3_492_712_448,
            5_312_512
        )))
        .unwrap());
        assert!(
            worth_compacting(1000, 500, || Err(StoreError::storage_message(
                "a count failed"
            )))
            .is_err()
        );
    }
}
