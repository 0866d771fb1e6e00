//! `LogService`: the async edge over any [`LogStore`], for the HTTP server and other services.
//!
//! The one async service of the workspace. Appends to a backend that groups commits
//! ([`LogStore::groups_commits`], the embedded store) go through one writer thread: callers
//! send batches over a bounded channel and await their acknowledgement; the thread drains
//! whatever is queued (up to [`GROUP_BATCHES_MAX`]) into one group, commits it with one fsync
//! ([`LogStore::append_group`]), then answers each caller. The thread is the service's own,
//! not one of the runtime's: a group is synchronous work from its first batch to its fsync,
//! and answering from the thread that committed it saves the two hand-offs a blocking-pool
//! call per group costs (BENCHMARKS.md, optimisation log). The last handle to drop closes the
//! queue and joins the thread, so the store is closed when the service is gone. Appends to
//! another backend run on the blocking pool, each in its own transaction. Reads run on the
//! blocking pool, at most [`STORE_CALLS_MAX`] at once; whole-session walks (verify, folds)
//! run beside them, bounded by a turn their caller holds (see [`LogService::run_walk`]).
//! Tails follow a session from any seq: they wake when this service commits to the session,
//! and, on a shared backend that other processes also write, every [`TAIL_POLL_INTERVAL`] as
//! well. Closing the service ends every tail, so a server can shut down while clients are
//! following.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sessionlog_format::{Event, SessionHeader};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::embedded::{AppendAck, AppendRequest, Head, StorageFailure, StoreError};
use crate::log_store::{LogStore, READ_EVENTS_MAX};
use crate::open::{open_store, Access, Location};

/// Bound of the writer's queue, in batches; a full queue makes appenders wait.
pub const QUEUE_BATCHES_MAX: usize = 1024;
/// Most batches committed together in one group.
pub const GROUP_BATCHES_MAX: usize = 256;

/// Events a tail reads from the store at a time (and so holds at most while its reader
/// lags).
pub const TAIL_READ_EVENTS_MAX: u64 = 256;

/// Store calls (reads, heads, creates, direct appends) running at once on the blocking pool;
/// more wait for a turn, in arrival order. Without it every waiting caller (200 tails that
/// read 256 events each, say) gets its own blocking thread: each decodes a block of about
/// 1 MiB, so memory grows with the callers (2.9 GB for 200 stalled tails of a 50k-event
/// session) and hundreds of runnable threads starve the runtime's workers (`/health` answered
/// at a median of 0.67 s, some probes not within 5 s; RELIABILITY.md, "Server load").
pub const STORE_CALLS_MAX: usize = 4;

/// How often a tail on a shared backend looks for heads committed by other processes.
pub const TAIL_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A cloneable async handle on a log backend.
#[derive(Clone)]
pub struct LogService {
    store: Arc<dyn LogStore>,
    writer: Writer,
    heads: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
    closing: watch::Sender<bool>,
    /// The turns of [`LogService::run`]: [`STORE_CALLS_MAX`] permits.
    calls: Arc<Semaphore>,
}

type Reply = oneshot::Sender<Result<AppendAck, StoreError>>;

#[derive(Clone)]
enum Writer {
    /// The queue of the group-commit writer thread.
    Grouped(Arc<GroupWriter>),
    /// One blocking call per batch.
    Direct,
}

/// The group-commit writer thread and its queue, shared by every clone of a service.
struct GroupWriter {
    /// `None` only while dropping, so that the thread sees the queue closed.
    queue: Option<mpsc::Sender<(AppendRequest, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for GroupWriter {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            // The thread ends once the queue is closed and drained; a panic in it was
            // already answered (every caller's reply was dropped: `Poisoned`).
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for LogService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogService")
            .field("backend", &self.store.backend_name())
            .finish_non_exhaustive()
    }
}

impl LogService {
    /// A service over `store`; a backend that groups commits gets its writer thread.
    ///
    /// # Panics
    ///
    /// If the operating system cannot start the writer thread.
    pub fn new(store: Arc<dyn LogStore>) -> LogService {
        let writer = if store.groups_commits() {
            let (queue, receiver) = mpsc::channel(QUEUE_BATCHES_MAX);
            let for_thread = Arc::clone(&store);
            let thread = std::thread::Builder::new()
                .name("sessionlog-writer".into())
                .spawn(move || writer_thread(&*for_thread, receiver))
                .expect("the writer thread starts");
            Writer::Grouped(Arc::new(GroupWriter {
                queue: Some(queue),
                thread: Some(thread),
            }))
        } else {
            Writer::Direct
        };
        LogService {
            store,
            writer,
            heads: Arc::new(Mutex::new(HashMap::new())),
            closing: watch::channel(false).0,
            calls: Arc::new(Semaphore::new(STORE_CALLS_MAX)),
        }
    }

    /// Opens the store at `location` for writing ([`open_store`]) on the blocking pool, and
    /// its service.
    pub async fn open(location: &Location) -> Result<LogService, StoreError> {
        let location = location.clone();
        let store = tokio::task::spawn_blocking(move || open_store(&location, Access::Write))
            .await
            .unwrap_or_else(|join| {
                Err(StoreError::storage_message(format!(
                    "opening the store panicked: {join}"
                )))
            })?;
        Ok(LogService::new(store))
    }

    /// The backend underneath.
    pub fn store(&self) -> &Arc<dyn LogStore> {
        &self.store
    }

    /// Ends every tail (they return `None`); appends and reads still work.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Runs `f`, a short store call, on the backend on the blocking pool once one of the
    /// [`STORE_CALLS_MAX`] turns is free; the turn is held until `f` returns, even when the
    /// caller has gone.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn LogStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let turn = Arc::clone(&self.calls)
            .acquire_owned()
            .await
            .expect("the store calls' semaphore is never closed");
        self.spawn(turn, f).await
    }

    /// Runs `f`, a walk over a whole session (verify, a fold), on the blocking pool without
    /// taking a store-call turn, so that walks lasting seconds do not hold up short reads. The
    /// caller bounds how many walks run at once: `turn` is a permit of its own semaphore
    /// (the server's `VERIFIES_MAX` or `FOLDS_MAX`), held until `f` returns.
    pub async fn run_walk<T: Send + 'static>(
        &self,
        turn: OwnedSemaphorePermit,
        f: impl FnOnce(&dyn LogStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.spawn(turn, f).await
    }

    async fn spawn<T: Send + 'static>(
        &self,
        turn: OwnedSemaphorePermit,
        f: impl FnOnce(&dyn LogStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            f(store.as_ref())
        })
        .await
        .unwrap_or_else(|join| {
            Err(StoreError::storage_message(format!(
                "a store task panicked: {join}"
            )))
        })
    }

    pub async fn create_session(
        &self,
        header: SessionHeader,
        snapshot: bool,
    ) -> Result<(), StoreError> {
        self.run(move |store| store.create_session(&header, snapshot))
            .await
    }

    pub async fn head(&self, session: &str) -> Result<Head, StoreError> {
        let session = session.to_owned();
        self.run(move |store| store.head(&session)).await
    }

    /// Events `from_seq..to_seq`, at most [`READ_EVENTS_MAX`] of them.
    pub async fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        let session = session.to_owned();
        let to_seq = to_seq.min(from_seq.saturating_add(READ_EVENTS_MAX));
        self.run(move |store| store.read_range(&session, from_seq, to_seq))
            .await
    }

    /// Appends a batch; resolves once it is durable (or refused).
    pub async fn append(&self, request: AppendRequest) -> Result<AppendAck, StoreError> {
        let result = match &self.writer {
            Writer::Grouped(writer) => {
                let (reply, answer) = oneshot::channel();
                let queue = writer.queue.as_ref().expect("open while a handle lives");
                match queue.send((request, reply)).await {
                    Ok(()) => answer.await.unwrap_or(Err(StoreError::Poisoned)),
                    Err(_) => Err(StoreError::Poisoned),
                }
            }
            Writer::Direct => self.run(move |store| store.append(request)).await,
        };
        if let Ok(ack) = &result {
            self.publish(&ack.session, ack.next_seq);
        }
        result
    }

    /// [`LogService::append`] of one batch.
    pub async fn append_events(
        &self,
        session: &str,
        expected_next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendAck, StoreError> {
        self.append(AppendRequest {
            session: session.to_owned(),
            expected_next_seq,
            events,
        })
        .await
    }

    /// Follows a session from `from_seq`: every event already stored, then each new one.
    pub async fn tail(&self, session: &str, from_seq: u64) -> Result<Tail, StoreError> {
        let head = self.head(session).await?;
        self.publish(session, head.next_seq);
        let heads = {
            let mut heads = lock(&self.heads);
            let sender = heads
                .entry(session.to_owned())
                .or_insert_with(|| watch::channel(head.next_seq).0);
            sender.subscribe()
        };
        Ok(Tail {
            service: self.clone(),
            session: session.to_owned(),
            next_seq: from_seq,
            heads,
            closing: self.closing.subscribe(),
            buffered: VecDeque::new(),
        })
    }

    fn publish(&self, session: &str, next_seq: u64) {
        let heads = lock(&self.heads);
        if let Some(sender) = heads.get(session) {
            sender.send_if_modified(|known| {
                let newer = next_seq > *known;
                *known = (*known).max(next_seq);
                newer
            });
        }
    }
}

/// A subscription to a session's events, from [`LogService::tail`].
pub struct Tail {
    service: LogService,
    session: String,
    next_seq: u64,
    heads: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
    buffered: VecDeque<Event>,
}

impl Tail {
    /// The seq of the next event this tail yields.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The next event, waiting for it to be committed; `None` once the service closes.
    pub async fn next(&mut self) -> Option<Result<Event, StoreError>> {
        loop {
            if *self.closing.borrow() {
                return None;
            }
            if let Some(event) = self.buffered.pop_front() {
                debug_assert_eq!(event.seq, self.next_seq);
                self.next_seq = event.seq + 1;
                return Some(Ok(event));
            }
            let known = *self.heads.borrow_and_update();
            if known > self.next_seq {
                // A bounded chunk: what a tail whose client stopped reading holds.
                let to_seq = known.min(self.next_seq.saturating_add(TAIL_READ_EVENTS_MAX));
                let read = self
                    .service
                    .read_range(&self.session, self.next_seq, to_seq)
                    .await;
                match read {
                    Ok(events) if events.is_empty() => {
                        // The head moved back (a reopened store): wait for the next change.
                        self.wait().await;
                    }
                    Ok(events) => self.buffered.extend(events),
                    Err(error) => return Some(Err(error)),
                }
                continue;
            }
            self.wait().await;
        }
    }

    /// Waits for a commit, a close, or (on a shared backend) the poll interval.
    async fn wait(&mut self) {
        let shared = self.service.store.is_shared();
        tokio::select! {
            changed = self.heads.changed() => {
                if changed.is_err() {
                    self.service.close();
                }
            }
            _ = self.closing.changed() => {}
            _ = tokio::time::sleep(TAIL_POLL_INTERVAL), if shared => {
                if let Ok(head) = self.service.head(&self.session).await {
                    self.service.publish(&self.session, head.next_seq);
                }
            }
        }
    }
}

/// The group-commit writer: drains the queue into groups and commits each with one call,
/// until every handle is gone.
fn writer_thread(store: &dyn LogStore, mut receiver: mpsc::Receiver<(AppendRequest, Reply)>) {
    while let Some(first) = receiver.blocking_recv() {
        let mut group = vec![first];
        while group.len() < GROUP_BATCHES_MAX {
            match receiver.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let (requests, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
        let n_replies = replies.len();
        let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.append_group(requests)
        }))
        .unwrap_or_else(|_| {
            // The store poisons itself on a panic inside the group (`poison_on_panic`).
            let failure = StorageFailure::new("the writer panicked");
            (0..n_replies)
                .map(|_| Err(StoreError::Storage(failure.clone())))
                .collect()
        });
        for (reply, result) in replies.into_iter().zip(results) {
            // A caller that stopped waiting does not undo a durable append.
            let _ = reply.send(result);
        }
        // The replies just woke the callers, whose next batches are the next group; yielding
        // once lets their tasks queue them before this thread drains the queue again. Without
        // it the next group was mostly the one batch that came first, and the group after it
        // the rest: 16 sessions' batches of 1 ran at 3.9x-4.8x one session's rate, at
        // 5.4x-8.2x with it (BENCHMARKS.md, optimisation log (append)). With nothing else to
        // run it returns at once.
        std::thread::yield_now();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
