//! The backends under test, shared by the store's and the engine's suites: the redb store in
//! a fresh directory, the in-memory store, and PostgreSQL when `SESSIONLOG_TEST_POSTGRES`
//! names a database (`.ci/run` starts one; under `CI=true` a missing one fails the test).

use std::sync::Arc;

use sessionlog_format::{Event, SessionHeader};
use sessionlog_store::embedded::{AppendRequest, Store};
use sessionlog_store::log_store::LogStore;
use sessionlog_store::mem_store::MemStore;
use sessionlog_store::pg_store::PgStore;

use crate::support::generated;

/// A backend under test, with what keeps it alive.
pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn LogStore>,
    /// The backend persists fold checkpoints (the in-memory store keeps none).
    pub checkpoints: bool,
    _dir: Option<tempfile::TempDir>,
}

/// The PostgreSQL URL of the test database; `None` (with a note) when none is configured
/// outside CI. Under CI a missing database is a failure.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("SESSIONLOG_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: SESSIONLOG_TEST_POSTGRES is unset under CI=true; .ci/run must start \
                 PostgreSQL (.ci/postgres.sh)"
            );
            eprintln!("{test}: skipping the postgres backend: SESSIONLOG_TEST_POSTGRES is unset");
            None
        }
    }
}

/// The redb backend in a fresh directory, the in-memory store, and PostgreSQL when
/// configured.
pub fn backends(test: &str) -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let redb = Store::open(&dir.path().join("store.redb")).unwrap();
    let mut out = vec![
        Backend {
            name: "redb",
            store: Arc::new(redb),
            checkpoints: true,
            _dir: Some(dir),
        },
        Backend {
            name: "memory",
            store: Arc::new(MemStore::new()),
            checkpoints: false,
            _dir: None,
        },
    ];
    if let Some(url) = postgres_url(test) {
        out.push(Backend {
            name: "postgres",
            store: Arc::new(PgStore::connect(&url).unwrap()),
            checkpoints: true,
            _dir: None,
        });
    }
    out
}

/// A session id no other test (or earlier run against the same database) uses.
pub fn unique_id(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// A generated session under a fresh id.
pub fn session(test: &str, n_events: u64) -> (SessionHeader, Vec<Vec<Event>>) {
    let (mut header, batches) = generated(n_events, 7);
    header.id = unique_id(test);
    (header, batches)
}

/// Creates the session of `header` and appends `batches` in order; returns its next seq.
pub fn append_all(store: &dyn LogStore, header: &SessionHeader, batches: &[Vec<Event>]) -> u64 {
    store.create_session(header, false).unwrap();
    let mut next_seq = 0;
    for batch in batches {
        let ack = store
            .append(AppendRequest {
                session: header.id.clone(),
                expected_next_seq: next_seq,
                events: batch.clone(),
            })
            .unwrap();
        assert_eq!(ack.first_seq, next_seq);
        next_seq = ack.next_seq;
    }
    next_seq
}

/// A new empty database beside the suite's (`<db>_<tag>_<pid>_<nanos>`); its URL.
pub fn fresh_database(url: &str, tag: &str) -> String {
    let name = format!(
        "sessionlog_{tag}_{}",
        unique_id("db").replace(['-'], "_").to_lowercase()
    );
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let base = url.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

pub fn count_tables(url: &str) -> i64 {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .query_one(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .unwrap()
        .get(0)
}
