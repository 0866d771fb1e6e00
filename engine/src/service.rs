//! The async edge of the store, for services: open, append, read a range, and tail.
//!
//! One writer task owns every append. Callers send batches over a bounded channel and await a
//! oneshot acknowledgement; the task drains whatever is queued (up to [`GROUP_BATCHES_MAX`])
//! into one group, commits it with one fsync, then answers each caller. Reads run on the
//! blocking pool. The store stays synchronous: this module is the only async code in it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sessionlog_format::{Event, SessionHeader};
use tokio::sync::{mpsc, oneshot, watch};

use crate::store::{AppendAck, AppendRequest, Head, Store, StoreError};

/// Bound of the writer's queue, in batches; a full queue makes appenders wait.
pub const QUEUE_BATCHES_MAX: usize = 1024;
/// Most batches committed together in one group.
pub const GROUP_BATCHES_MAX: usize = 256;

type Reply = oneshot::Sender<Result<AppendAck, StoreError>>;

/// A cloneable handle on an open store; safe to share across tasks.
#[derive(Clone)]
pub struct StoreHandle {
    store: Arc<Store>,
    queue: mpsc::Sender<(AppendRequest, Reply)>,
    heads: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl StoreHandle {
    /// Opens the store and starts its writer task on the current runtime.
    pub async fn open(path: &Path) -> Result<StoreHandle, StoreError> {
        let path = path.to_owned();
        let store = blocking(move || Store::open(&path)).await?;
        Ok(StoreHandle::start(Arc::new(store)))
    }

    /// Starts a writer task for an already open store.
    pub fn start(store: Arc<Store>) -> StoreHandle {
        let (queue, receiver) = mpsc::channel(QUEUE_BATCHES_MAX);
        let heads = Arc::new(Mutex::new(HashMap::new()));
        let handle = StoreHandle {
            store: Arc::clone(&store),
            queue,
            heads: Arc::clone(&heads),
        };
        tokio::spawn(writer_task(store, receiver, heads));
        handle
    }

    /// The synchronous store underneath.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub async fn create_session(&self, header: SessionHeader) -> Result<(), StoreError> {
        let store = Arc::clone(&self.store);
        blocking(move || store.create_session(&header)).await
    }

    /// Appends a batch; resolves once it is durable (or refused).
    pub async fn append(
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
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((request, reply))
            .await
            .map_err(|_| StoreError::Poisoned)?;
        answer.await.map_err(|_| StoreError::Poisoned)?
    }

    /// Events `from_seq..to_seq`.
    pub async fn read_range(
        &self,
        session: &str,
        from_seq: u64,
        to_seq: u64,
    ) -> Result<Vec<Event>, StoreError> {
        let store = Arc::clone(&self.store);
        let session = session.to_owned();
        blocking(move || store.read_range(&session, from_seq, to_seq)).await
    }

    pub async fn head(&self, session: &str) -> Result<Head, StoreError> {
        let store = Arc::clone(&self.store);
        let session = session.to_owned();
        blocking(move || store.head(&session)).await
    }

    /// Follows a session from `from_seq`: every event already stored, then each new one as
    /// it is committed.
    pub async fn tail(&self, session: &str, from_seq: u64) -> Result<Tail, StoreError> {
        let head = self.head(session).await?;
        let receiver = {
            let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            let sender = heads
                .entry(session.to_owned())
                .or_insert_with(|| watch::channel(0).0);
            sender.send_if_modified(|known| {
                let newer = head.next_seq > *known;
                *known = (*known).max(head.next_seq);
                newer
            });
            sender.subscribe()
        };
        Ok(Tail {
            handle: self.clone(),
            session: session.to_owned(),
            next_seq: from_seq,
            heads: receiver,
            buffered: std::collections::VecDeque::new(),
        })
    }
}

/// A subscription to a session's events, from [`StoreHandle::tail`].
pub struct Tail {
    handle: StoreHandle,
    session: String,
    next_seq: u64,
    heads: watch::Receiver<u64>,
    buffered: std::collections::VecDeque<Event>,
}

impl Tail {
    /// The next event, waiting for it to be committed; `None` when the store shuts down.
    pub async fn next(&mut self) -> Option<Result<Event, StoreError>> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                self.next_seq = event.seq + 1;
                return Some(Ok(event));
            }
            let head = *self.heads.borrow_and_update();
            if head > self.next_seq {
                let read = self
                    .handle
                    .read_range(&self.session, self.next_seq, head)
                    .await;
                match read {
                    Ok(events) => self.buffered.extend(events),
                    Err(error) => return Some(Err(error)),
                }
                continue;
            }
            if self.heads.changed().await.is_err() {
                return None;
            }
        }
    }
}

async fn writer_task(
    store: Arc<Store>,
    mut receiver: mpsc::Receiver<(AppendRequest, Reply)>,
    heads: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
) {
    while let Some(first) = receiver.recv().await {
        let mut group = vec![first];
        while group.len() < GROUP_BATCHES_MAX {
            match receiver.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let (requests, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
        let store_for_group = Arc::clone(&store);
        let results = tokio::task::spawn_blocking(move || store_for_group.append_group(requests))
            .await
            .unwrap_or_else(|join| {
                // A panic in the store poisons it through the same path as an I/O failure.
                let message = format!("the writer panicked: {join}");
                replies
                    .iter()
                    .map(|_| Err(StoreError::Storage(message.clone())))
                    .collect()
            });
        for (reply, result) in replies.into_iter().zip(results) {
            if let Ok(ack) = &result {
                publish_head(&heads, ack);
            }
            // A caller that stopped waiting does not undo a durable append.
            let _ = reply.send(result);
        }
    }
}

fn publish_head(heads: &Mutex<HashMap<String, watch::Sender<u64>>>, ack: &AppendAck) {
    let heads = heads.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sender) = heads.get(&ack.session) {
        sender.send_if_modified(|known| {
            let newer = ack.next_seq > *known;
            *known = (*known).max(ack.next_seq);
            newer
        });
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|join| {
        Err(StoreError::Storage(format!(
            "a store task panicked: {join}"
        )))
    })
}
