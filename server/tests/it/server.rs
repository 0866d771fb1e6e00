//! The HTTP suite: a real `serve` on 127.0.0.1 (port 0) and reqwest clients. Appends,
//! conflicts with the head, refusals with seq and rule, range reads, SSE tails resumed with
//! Last-Event-ID, the derived views, auth, body limits, racing appenders with exactly one
//! winner per seq, and a graceful shutdown that ends tails and keeps every acknowledged
//! append. The same suite runs once against PostgreSQL when it is configured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_engine::inspect::fold_session;
use sessionlog_engine::log_service::LogService;
use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::pg_store::PgStore;
use sessionlog_engine::replay::SessionSource;
use sessionlog_engine::store::Store;
use sessionlog_format::{Event, FormatVersion, SessionHeader, SurfaceOp};
use sessionlog_server::{serve, ServerLimits, ServerOptions, BODY_BYTES_MAX};
use tokio::sync::oneshot;

use crate::harness::{postgres_url, unique_id};
use crate::support::*;

/// A server on loopback and the means to stop it.
pub(crate) struct TestServer {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    pub(crate) store: Arc<dyn LogStore>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    pub(crate) async fn redb(token: Option<&str>) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("store.redb")).unwrap());
        let service = LogService::new(Arc::clone(&store) as _);
        TestServer::start(service, store, token, Some(dir)).await
    }

    /// A redb server with `limits` instead of the defaults.
    async fn limited(limits: ServerLimits) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("store.redb")).unwrap());
        let service = LogService::new(Arc::clone(&store) as _);
        let options = ServerOptions {
            token: None,
            limits,
        };
        TestServer::start_with(service, store, options, Some(dir)).await
    }

    pub(crate) async fn postgres(url: &str) -> TestServer {
        let url = url.to_owned();
        let store = tokio::task::spawn_blocking(move || PgStore::connect(&url))
            .await
            .unwrap()
            .unwrap();
        let store: Arc<dyn LogStore> = Arc::new(store);
        let service = LogService::new(Arc::clone(&store) as _);
        TestServer::start(service, store, None, None).await
    }

    async fn start(
        service: LogService,
        store: Arc<dyn LogStore>,
        token: Option<&str>,
        dir: Option<tempfile::TempDir>,
    ) -> TestServer {
        let options = ServerOptions {
            token: token.map(str::to_owned),
            limits: ServerLimits::default(),
        };
        TestServer::start_with(service, store, options, dir).await
    }

    pub(crate) async fn start_with(
        service: LogService,
        store: Arc<dyn LogStore>,
        options: ServerOptions,
        dir: Option<tempfile::TempDir>,
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, service, options, async move {
            let _ = stop.await;
        }));
        TestServer {
            base,
            client: reqwest::Client::new(),
            store,
            shutdown: Some(shutdown),
            task,
            _dir: dir,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn create(&self, header: &SessionHeader) {
        let body = serde_json::to_value(header).unwrap();
        let (status, answer) = self.post("/v1/sessions", &body).await;
        assert_eq!(status, 201, "{answer}");
        assert_eq!(answer["nextSeq"], 0);
    }

    pub(crate) async fn append(
        &self,
        session: &str,
        expected: u64,
        events: &[Event],
    ) -> (u16, Value) {
        let rows: Vec<Value> = events.iter().map(row).collect();
        let body = json!({ "expectedNextSeq": expected, "events": rows });
        self.post(&format!("/v1/sessions/{session}/events"), &body)
            .await
    }

    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        (&mut self.task).await.unwrap().unwrap();
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An event as its canonical V3 row.
pub(crate) fn row(event: &Event) -> Value {
    let mut out = Vec::new();
    sessionlog_format::row::encode_row(event, FormatVersion::V3, &mut out);
    serde_json::from_slice(&out).unwrap()
}

pub(crate) fn generated_session(test: &str, n_events: u64) -> (SessionHeader, Vec<Vec<Event>>) {
    let (mut header, batches) = generated(n_events, 3);
    header.id = unique_id(test);
    (header, batches)
}

pub(crate) async fn append_batches(
    server: &TestServer,
    header: &SessionHeader,
    batches: &[Vec<Event>],
) {
    let mut next_seq = 0u64;
    for batch in batches {
        let (status, ack) = server.append(&header.id, next_seq, batch).await;
        assert_eq!(status, 200, "{ack}");
        assert_eq!(ack["firstSeq"], next_seq);
        next_seq += batch.len() as u64;
        assert_eq!(ack["nextSeq"], next_seq);
    }
}

/// Reads SSE `event` messages of a tail until `n` have arrived: `(id, row)` pairs.
async fn read_tail(
    server: &TestServer,
    session: &str,
    query: &str,
    last_event_id: Option<u64>,
    n: usize,
) -> Vec<(u64, Value)> {
    let mut request = server
        .client
        .get(server.url(&format!("/v1/sessions/{session}/tail{query}")));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while out.len() < n {
        let message = events.next().await.expect("the tail stays open").unwrap();
        assert_eq!(message.event, "event", "{}", message.data);
        let row: Value = serde_json::from_str(&message.data).unwrap();
        out.push((message.id.parse().unwrap(), row));
    }
    out
}

/// The suite every backend passes: append and read, conflict, refusals, tail resume, views.
async fn check_core(server: &TestServer, test: &str) {
    let (header, batches) = generated_session(test, 400);
    let events: Vec<Event> = batches.iter().flatten().cloned().collect();
    server.create(&header).await;
    let (status, again) = server
        .post("/v1/sessions", &serde_json::to_value(&header).unwrap())
        .await;
    assert_eq!(
        (status, again["error"].clone()),
        (409, json!("session-exists"))
    );
    append_batches(server, &header, &batches).await;
    let id = &header.id;
    let n = events.len() as u64;

    // Range reads.
    let (status, read) = server
        .get(&format!("/v1/sessions/{id}/events?from=10&to=20"))
        .await;
    assert_eq!(status, 200);
    let expected: Vec<Value> = events[10..20].iter().map(row).collect();
    assert_eq!(read["events"], Value::Array(expected));
    assert_eq!(read["nextSeq"], n);

    // The head, and a conflict that carries it.
    let (_, head) = server.get(&format!("/v1/sessions/{id}/head")).await;
    assert_eq!(head["nextSeq"], n);
    let (status, conflict) = server.append(id, n - 1, &[title(n - 1)]).await;
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["error"], "conflict");
    assert_eq!(conflict["nextSeq"], n);
    assert_eq!(conflict["headHash"], head["headHash"]);

    // Refusals: a rule (a system message outside any open step) and an envelope.
    let bad = system(n + 1, 99, 99, "x", SurfaceOp::Append);
    let (status, refused) = server.append(id, n, &[title(n), bad]).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"], "rejected");
    assert_eq!(refused["seq"], n + 1);
    assert!(refused["rule"].as_str().is_some_and(|r| !r.is_empty()));
    let body = json!({ "expectedNextSeq": n, "events": [{"type": "session/title"}] });
    let (status, envelope) = server
        .post(&format!("/v1/sessions/{id}/events"), &body)
        .await;
    assert_eq!(
        (status, envelope["seq"].clone()),
        (422, json!(n)),
        "{envelope}"
    );
    let (_, unchanged) = server.get(&format!("/v1/sessions/{id}/head")).await;
    assert_eq!(unchanged, head, "a refused batch writes nothing");

    // A tail from 0 read halfway, then resumed with Last-Event-ID.
    let first = read_tail(server, id, "?from=0", None, 150).await;
    let ids: Vec<u64> = first.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(ids, (0..150).collect::<Vec<_>>());
    let resumed = read_tail(server, id, "?from=0", Some(149), 10).await;
    assert_eq!(resumed[0], (150, row(&events[150])));
    assert_eq!(resumed.len(), 10);

    // The views equal the library's folds of the same backend.
    let store = Arc::clone(&server.store);
    let session = id.clone();
    let folded = tokio::task::spawn_blocking(move || {
        let source = SessionSource::Store {
            store: store.as_ref(),
            session: &session,
        };
        fold_session(source, Some(200)).unwrap()
    })
    .await
    .unwrap();
    let (status, messages) = server
        .get(&format!("/v1/sessions/{id}/messages?at=200"))
        .await;
    assert_eq!(status, 200);
    let expected: Vec<Value> = folded
        .messages()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(messages["messages"], Value::Array(expected));
    assert_eq!(messages["atSeq"], 200);
    let (_, surface) = server
        .get(&format!("/v1/sessions/{id}/surface?at=200"))
        .await;
    assert_eq!(surface["nodes"], json!(folded.nodes()));
    let (status, past) = server
        .get(&format!("/v1/sessions/{id}/surface?at={}", n + 5))
        .await;
    assert_eq!(
        (status, past["error"].clone()),
        (404, json!("seq-out-of-range"))
    );
    let (status, requests) = server.get(&format!("/v1/sessions/{id}/requests")).await;
    assert_eq!(status, 200);
    assert!(requests["summary"]["requests"].as_u64().unwrap() > 0);
    let (status, verify) = server.get(&format!("/v1/sessions/{id}/verify")).await;
    assert_eq!(status, 200);
    assert_eq!(verify["sessions"][0]["ok"], true, "{verify}");
    assert_eq!(verify["sessions"][0]["events"], n);
    assert_eq!(verify["sessions"][0]["headHash"], head["headHash"]);
    let (status, missing) = server.get("/v1/sessions/no-such-session/head").await;
    assert_eq!(
        (status, missing["error"].clone()),
        (404, json!("unknown-session"))
    );
    check_client_errors(server, id, n).await;
}

/// Issue #20, finding 3: client errors are 4xx with a stable code. A read from the head or
/// past it is an empty range (it answered 500 "the store is corrupt: ... the record is
/// missing"), and a create body whose id breaks the session-id rule is 422
/// `invalid-session-id` (it answered 500 "storage"; a space and a right-to-left override were
/// accepted).
async fn check_client_errors(server: &TestServer, id: &str, n: u64) {
    for from_seq in [n, n + 1, n + 1000, u64::MAX] {
        let (status, past) = server
            .get(&format!("/v1/sessions/{id}/events?from={from_seq}"))
            .await;
        assert_eq!(status, 200, "from={from_seq}: {past}");
        assert_eq!(past["events"], json!([]));
        assert_eq!(
            (past["fromSeq"].clone(), past["nextSeq"].clone()),
            (json!(from_seq), json!(n))
        );
    }
    let long = "x".repeat(300);
    let refused = [
        " ",
        "\u{3000}",
        "abc\u{202E}fdp",
        "a\u{2067}b",
        "\u{200F}",
        "a\u{7}b",
        "a/b",
        "..",
        &long,
    ];
    for bad in refused {
        let header = SessionHeader::new_v3(bad, 1);
        let (status, answer) = server
            .post("/v1/sessions", &serde_json::to_value(&header).unwrap())
            .await;
        assert_eq!(status, 422, "{bad:?}: {answer}");
        assert_eq!(answer["error"], "invalid-session-id", "{bad:?}");
        assert_eq!(answer["session"], bad);
    }
    let (_, listed) = server.get("/v1/sessions").await;
    let ids = listed["sessions"].as_array().unwrap();
    assert!(ids
        .iter()
        .all(|listed| !refused.contains(&listed.as_str().unwrap())));
}

// Goal: the core suite on the embedded store.
#[test]
fn http_core_on_redb() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        check_core(&server, "http-core").await;
        server.stop().await;
    });
}

// Goal: the core suite on PostgreSQL (skipped without a database outside CI).
#[test]
fn http_core_on_postgres() {
    let Some(url) = postgres_url("http_core_on_postgres") else {
        return;
    };
    runtime().block_on(async {
        let server = TestServer::postgres(&url).await;
        check_core(&server, "http-core-pg").await;
        server.stop().await;
    });
}

/// 8 clients race to append 60 single-event batches to one session; returns the winner of
/// each seq.
async fn race(server: &TestServer, session: &str) -> BTreeMap<u64, usize> {
    let server_base = server.base.clone();
    let mut tasks = Vec::new();
    for client_idx in 0..8usize {
        let base = server_base.clone();
        let session = session.to_owned();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut wins = Vec::new();
            loop {
                let head: Value = client
                    .get(format!("{base}/v1/sessions/{session}/head"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let next = head["nextSeq"].as_u64().unwrap();
                if next >= 60 {
                    return (client_idx, wins);
                }
                let body = json!({ "expectedNextSeq": next, "events": [row(&title(next))] });
                let response = client
                    .post(format!("{base}/v1/sessions/{session}/events"))
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap();
                match response.status().as_u16() {
                    200 => wins.push(next),
                    409 => {
                        let conflict: Value = response.json().await.unwrap();
                        assert!(conflict["nextSeq"].as_u64().unwrap() > next);
                    }
                    other => panic!("unexpected status {other}"),
                }
            }
        }));
    }
    let mut winners = BTreeMap::new();
    for task in tasks {
        let (client_idx, wins) = task.await.unwrap();
        for seq in wins {
            let previous = winners.insert(seq, client_idx);
            assert_eq!(previous, None, "seq {seq} was won twice");
        }
    }
    winners
}

// Goal: concurrent appenders on one session: every seq has exactly one winner, the losers get
// 409 with a newer head, and the session verifies.
// Method: 8 clients, each reading the head and appending at it until 60 events exist.
#[test]
fn http_racing_appenders_have_one_winner_per_seq() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        let id = unique_id("race");
        server.create(&header(&id)).await;
        let winners = race(&server, &id).await;
        assert_eq!(
            winners.keys().copied().collect::<Vec<_>>(),
            (0..60).collect::<Vec<_>>()
        );
        let (_, verify) = server.get(&format!("/v1/sessions/{id}/verify")).await;
        assert_eq!(verify["sessions"][0]["ok"], true);
        assert_eq!(verify["sessions"][0]["events"], 60);
        server.stop().await;
    });
    let Some(url) = postgres_url("http_racing_appenders_have_one_winner_per_seq") else {
        return;
    };
    runtime().block_on(async {
        // Two servers on one database: the race crosses processes.
        let a = TestServer::postgres(&url).await;
        let b = TestServer::postgres(&url).await;
        let id = unique_id("race-pg");
        a.create(&header(&id)).await;
        let (first, second) = tokio::join!(race(&a, &id), race(&b, &id));
        let mut all: Vec<u64> = first.keys().chain(second.keys()).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..60).collect::<Vec<_>>(), "one winner per seq");
        a.stop().await;
        b.stop().await;
    });
}

// Goal: with a token, every endpoint but /health wants it; without one, nothing does.
#[test]
fn http_bearer_token_guards_everything_but_health() {
    runtime().block_on(async {
        let server = TestServer::redb(Some("s3cret-token")).await;
        let (status, health) = server.get("/health").await;
        assert_eq!((status, health["status"].clone()), (200, json!("ok")));
        let (status, denied) = server.get("/v1/sessions").await;
        assert_eq!(
            (status, denied["error"].clone()),
            (401, json!("unauthorized"))
        );
        let wrong = server
            .client
            .get(server.url("/v1/sessions"))
            .bearer_auth("s3cret-tokeN")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
        let right = server
            .client
            .get(server.url("/v1/sessions"))
            .bearer_auth("s3cret-token")
            .send()
            .await
            .unwrap();
        assert_eq!(right.status().as_u16(), 200);
        let openapi = server
            .client
            .get(server.url("/openapi.json"))
            .send()
            .await
            .unwrap();
        let doc: Value = openapi.json().await.unwrap();
        assert_eq!(doc["openapi"], "3.0.3");
        assert!(doc["paths"]["/v1/sessions/{session}/events"]["post"].is_object());
        server.stop().await;
    });
}

// Goal: a body over BODY_BYTES_MAX is refused with 413, a batch over BATCH_EVENTS_MAX too,
// a malformed body with 400; the store is unchanged.
#[test]
fn http_limits_refuse_oversized_requests() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        let id = unique_id("limits");
        server.create(&header(&id)).await;
        let huge = vec![b' '; BODY_BYTES_MAX + 1];
        let response = server
            .client
            .post(server.url(&format!("/v1/sessions/{id}/events")))
            .body(huge)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 413);
        let many: Vec<Event> = (0..65_537u64).map(title).collect();
        let (status, too_many) = server.append(&id, 0, &many).await;
        assert_eq!(
            (status, too_many["error"].clone()),
            (413, json!("batch-too-large"))
        );
        let (status, _) = server
            .post(&format!("/v1/sessions/{id}/events"), &json!({"events": 3}))
            .await;
        assert_eq!(status, 400);
        let (_, head) = server.get(&format!("/v1/sessions/{id}/head")).await;
        assert_eq!(head["nextSeq"], 0);
        server.stop().await;
    });
}

// Goal: a live tail sees each commit; shutdown ends open tails, waits for requests in flight,
// and every acknowledged append is in the store afterwards.
// Method: follow an empty session and append three batches; then stop the server while the
// tail is open and four clients are appending; reopen the store, count and verify.
#[test]
fn http_live_tail_and_graceful_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let id = unique_id("shutdown");
    let acked = runtime().block_on(async {
        let store = Arc::new(Store::open(&path).unwrap());
        let service = LogService::new(Arc::clone(&store) as _);
        let store_dyn: Arc<dyn LogStore> = store;
        let server = TestServer::start(service, store_dyn, None, None).await;
        server.create(&header(&id)).await;
        let response = server
            .client
            .get(server.url(&format!("/v1/sessions/{id}/tail")))
            .send()
            .await
            .unwrap();
        let mut tail = response.bytes_stream().eventsource();
        for seq in 0..3u64 {
            let (status, _) = server.append(&id, seq, &[title(seq)]).await;
            assert_eq!(status, 200);
            let message = tail.next().await.unwrap().unwrap();
            assert_eq!(
                (message.event.as_str(), message.id.as_str()),
                ("event", &*seq.to_string())
            );
        }
        // Appenders keep going while the server stops; each counts its acknowledgements.
        let mut appenders = Vec::new();
        let total = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for client_idx in 0..4 {
            let session = format!("{id}-{client_idx}");
            server.create(&header(&session)).await;
            let base = server.base.clone();
            let total = Arc::clone(&total);
            appenders.push(tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut acked = 0u64;
                loop {
                    let body = json!({ "expectedNextSeq": acked, "events": [row(&title(acked))] });
                    let sent = client
                        .post(format!("{base}/v1/sessions/{session}/events"))
                        .body(body.to_string())
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status().as_u16() == 200 => {
                            acked += 1;
                            total.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        _ => return (session, acked),
                    }
                }
            }));
        }
        // Stop once the appenders are well under way (at least 20 commits between them).
        while total.load(std::sync::atomic::Ordering::SeqCst) < 20 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        server.stop().await;
        // The tail ended with the server.
        let rest: Vec<_> = tail.collect().await;
        assert!(rest
            .iter()
            .all(|m| m.is_err() || m.as_ref().unwrap().event != "event"));
        let mut acked = Vec::new();
        for appender in appenders {
            acked.push(appender.await.unwrap());
        }
        acked
    });
    let store = Store::open(&path).unwrap();
    let report = store
        .verify(std::slice::from_ref(&id))
        .unwrap()
        .pop()
        .unwrap();
    assert!(report.ok(), "{:?}", report.faults);
    assert_eq!(report.events, 3);
    for (session, n_acked) in acked {
        // Nothing acknowledged is lost (a commit whose answer the client never read may add one).
        let head = store.head(&session).unwrap();
        assert!(
            head.next_seq >= n_acked,
            "{session}: {} < {n_acked}",
            head.next_seq
        );
        assert!(store.verify(std::slice::from_ref(&session)).unwrap()[0].ok());
    }
}

// Goal: on a shared backend a tail sees commits made by another server process on the same
// database (it polls heads; nothing relies on LISTEN/NOTIFY).
// Method: two servers on one PostgreSQL database; a tail on the second, appends on the first.
#[test]
fn http_tail_on_postgres_follows_another_servers_commits() {
    let Some(url) = postgres_url("http_tail_on_postgres_follows_another_servers_commits") else {
        return;
    };
    runtime().block_on(async {
        let writer = TestServer::postgres(&url).await;
        let reader = TestServer::postgres(&url).await;
        let id = unique_id("tail-pg");
        writer.create(&header(&id)).await;
        let (status, _) = writer.append(&id, 0, &[title(0)]).await;
        assert_eq!(status, 200);
        let response = reader
            .client
            .get(reader.url(&format!("/v1/sessions/{id}/tail?from=0")))
            .send()
            .await
            .unwrap();
        let mut tail = response.bytes_stream().eventsource();
        let first = tail.next().await.unwrap().unwrap();
        assert_eq!(first.id, "0");
        for seq in 1..4u64 {
            let (status, _) = writer.append(&id, seq, &[title(seq)]).await;
            assert_eq!(status, 200);
            let message = tail.next().await.unwrap().unwrap();
            assert_eq!(
                (message.event, message.id),
                ("event".to_owned(), seq.to_string())
            );
        }
        drop(tail);
        writer.stop().await;
        reader.stop().await;
    });
}

/// The address part of a test server's base URL.
fn addr(server: &TestServer) -> String {
    server.base.trim_start_matches("http://").to_owned()
}

/// Everything a raw connection receives until the server closes it; `None` when it is still
/// open after `wait`.
async fn until_closed(stream: &mut tokio::net::TcpStream, wait: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let read = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    match read {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

async fn raw(server: &TestServer, request: &[u8]) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr(server)).await.unwrap();
    stream.write_all(request).await.unwrap();
    stream
}

fn small_limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(500),
        write_stall_timeout: Duration::from_millis(500),
        shutdown_grace: Duration::from_secs(1),
        connections_max: 64,
        tails_max: 3,
        tails_per_token_max: 2,
        decoded_bytes_max: 1024 * 1024,
        ..ServerLimits::default()
    }
}

async fn open_tail(server: &TestServer, session: &str) -> (u16, reqwest::Response) {
    let response = server
        .client
        .get(server.url(&format!("/v1/sessions/{session}/tail")))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response)
}

// Goal: issue #20, finding 2, at CI size: the limits fire. An idle connection and a
// slowloris header are closed by the header timeout; a lying Content-Length is answered 408
// `body-timeout` by the body timeout; the per-token tail cap answers 429 `too-many-tails` and
// the overall cap 503 `tails-full`; an append whose events would decode far beyond their
// bytes (a wide array) is 413 `decoded-too-large` and writes nothing; `/health` answers
// throughout. Method: a server with small limits (hundreds of milliseconds, 2 and 3 tails),
// raw TCP clients for the malformed ones, every wait bounded.
#[test]
fn http_limits_close_slow_clients_and_cap_tails() {
    runtime().block_on(async {
        let server = TestServer::limited(small_limits()).await;
        let id = unique_id("limits-fire");
        server.create(&header(&id)).await;

        let mut idle = raw(&server, b"").await;
        let mut slowloris = raw(&server, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow:").await;
        let lying = format!(
            "POST /v1/sessions/{id}/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{\"expe"
        );
        let mut lying = raw(&server, lying.as_bytes()).await;
        let (status, _) = server.get("/health").await;
        assert_eq!(status, 200);
        let wait = Duration::from_secs(5);
        assert!(until_closed(&mut idle, wait).await.is_some(), "idle stays open");
        assert!(until_closed(&mut slowloris, wait).await.is_some(), "slowloris stays open");
        let answer = until_closed(&mut lying, wait).await.expect("lying body stays open");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"body-timeout\""), "{answer}");

        let (first, _a) = open_tail(&server, &id).await;
        let (second, _b) = open_tail(&server, &id).await;
        assert_eq!((first, second), (200, 200));
        let (status, refused) = open_tail(&server, &id).await;
        let refused: Value = refused.json().await.unwrap();
        assert_eq!((status, refused["error"].clone()), (429, json!("too-many-tails")));

        let wide = format!("[{}1]", "1,".repeat(20_000));
        let body = format!("{{\"expectedNextSeq\":0,\"events\":[{wide}]}}");
        let response = server
            .client
            .post(server.url(&format!("/v1/sessions/{id}/events")))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 413);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"], "decoded-too-large", "{answer}");
        let (_, head) = server.get(&format!("/v1/sessions/{id}/head")).await;
        assert_eq!(head["nextSeq"], 0);
        server.stop().await;

        // The overall cap, with a per-token share above it.
        let server = TestServer::limited(ServerLimits {
            tails_per_token_max: 10,
            ..small_limits()
        })
        .await;
        server.create(&header(&id)).await;
        let mut open = Vec::new();
        for _ in 0..3 {
            let (status, tail) = open_tail(&server, &id).await;
            assert_eq!(status, 200);
            open.push(tail);
        }
        let (status, refused) = open_tail(&server, &id).await;
        let refused: Value = refused.json().await.unwrap();
        assert_eq!((status, refused["error"].clone()), (503, json!("tails-full")));
        server.stop().await;
    });
}

// Goal: the connection cap answers 503 `too-many-connections` and closes, and SIGTERM's
// shutdown ends within the grace while a client holds a request open (a body that never
// arrives, with a body timeout far longer than the grace). Method: 4 connections allowed,
// header and body timeouts of 10 s, a grace of 1 s; the stop is timed.
#[test]
fn http_connection_cap_and_bounded_shutdown() {
    runtime().block_on(async {
        let server = TestServer::limited(ServerLimits {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            connections_max: 4,
            ..small_limits()
        })
        .await;
        let id = unique_id("cap");
        server.create(&header(&id)).await;
        let stalled = format!(
            "POST /v1/sessions/{id}/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{"
        );
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(raw(&server, stalled.as_bytes()).await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut over = raw(&server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let answer = until_closed(&mut over, Duration::from_secs(5))
            .await
            .expect("the connection over the cap is closed");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("\"too-many-connections\""), "{answer}");
        let started = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(5), server.stop())
            .await
            .expect("shutdown ends within the grace");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        for mut stream in held {
            assert!(until_closed(&mut stream, Duration::from_secs(2))
                .await
                .is_some());
        }
    });
}

// Goal: `requests` answers pages (issue #20: `requests?bodies=true` of a 10k-event session
// answered 541 MB): `limit` rows from `from`, `page.nextFrom`, the whole-session summary,
// and a limit over the maximum is 400. Method: a generated session, pages of one row with
// bodies against the unpaged library report.
#[test]
fn http_requests_are_paged() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        let (header, batches) = generated_session("requests-page", 400);
        server.create(&header).await;
        append_batches(&server, &header, &batches).await;
        let id = &header.id;
        let store = Arc::clone(&server.store);
        let session = id.clone();
        let all = tokio::task::spawn_blocking(move || {
            let options = sessionlog_engine::requests::RequestOptions { bodies: true };
            sessionlog_engine::stored::requests(store.as_ref(), &session, options).unwrap()
        })
        .await
        .unwrap();
        let n = all.summary.requests;
        assert!(n >= 2, "the session has requests");
        let (status, page) = server
            .get(&format!(
                "/v1/sessions/{id}/requests?bodies=true&from=1&limit=1"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        let rows = page["requests"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["index"], 1);
        let expected = sessionlog_engine::documents::requests(&all).unwrap();
        assert_eq!(rows[0], expected["requests"][1]);
        assert_eq!(page["summary"], expected["summary"]);
        let next = if n > 2 { json!(2) } else { Value::Null };
        assert_eq!(
            page["page"],
            json!({ "from": 1, "limit": 1, "nextFrom": next })
        );
        let (status, _) = server
            .get(&format!("/v1/sessions/{id}/requests?bodies=true&limit=65"))
            .await;
        assert_eq!(status, 400);
        let (status, past) = server
            .get(&format!("/v1/sessions/{id}/requests?from={n}"))
            .await;
        assert_eq!((status, past["requests"].clone()), (200, json!([])));
        server.stop().await;
    });
}

// Goal: an interrupted import (issue #20, finding 4) is no session to the server: the list
// leaves it out, every route of it answers 409 `import-interrupted` naming it, a create of
// its id too, and its verify reports the `import` fault.
// Method: a store with an import begun and one batch appended, served; each route asked.
#[test]
fn http_hides_and_refuses_an_interrupted_import() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("store.redb")).unwrap());
        let (header, batches) = generated_session("http-import", 600);
        store.begin_import(&header, false).unwrap();
        store
            .append_import(&header.id, 0, batches[0].clone())
            .unwrap();
        let service = LogService::new(Arc::clone(&store) as _);
        let server = TestServer::start(service, store, None, Some(dir)).await;
        let id = header.id.clone();
        let (status, list) = server.get("/v1/sessions").await;
        assert_eq!((status, list), (200, json!({ "sessions": [] })));
        for route in [
            "",
            "/head",
            "/events?from=0",
            "/messages",
            "/surface",
            "/requests",
        ] {
            let (status, body) = server.get(&format!("/v1/sessions/{id}{route}")).await;
            assert_eq!(status, 409, "{route}: {body}");
            assert_eq!(body["error"], "import-interrupted", "{route}: {body}");
            assert_eq!(body["session"], id.as_str(), "{route}: {body}");
        }
        let (status, body) = server.append(&id, 0, &batches[0]).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &json!("import-interrupted"))
        );
        let created = serde_json::to_value(&header).unwrap();
        let (status, body) = server.post("/v1/sessions", &created).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &json!("import-interrupted"))
        );
        let (status, body) = server.get(&format!("/v1/sessions/{id}/verify")).await;
        assert_eq!(status, 200, "{body}");
        let report = &body["sessions"][0];
        assert_eq!(report["ok"], false, "{body}");
        assert_eq!(report["events"], batches[0].len(), "{body}");
        assert_eq!(report["faults"][0]["kind"], "import", "{body}");
        server.stop().await;
    });
}

/// An event as its canonical row of `version`.
fn row_of(event: &Event, version: FormatVersion) -> Value {
    let mut out = Vec::new();
    sessionlog_format::row::encode_row(event, version, &mut out);
    serde_json::from_slice(&out).unwrap()
}

// Goal: a V4 session is served like a V3 one (issue #22 item 4): created from its V4 header,
// appended with V4 rows (decoded by the session's version), read back and tailed as V4 rows,
// verified; a V3 plugin source, which the V4 rules refuse, is refused with its seq and
// dsh's text, and changes nothing.
// Method: a generated V4 log through the HTTP API of a redb server.
#[test]
fn http_serves_a_v4_session() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        let mut generator = sessionlog_format::gen::Generator::for_version(
            sessionlog_format::gen::GenOptions {
                events: 300,
                seed: 4,
            },
            FormatVersion::V4,
        )
        .unwrap();
        let mut header = generator.header();
        header.id = unique_id("v4-http");
        let mut events = Vec::new();
        while let Some(batch) = generator.next_batch() {
            events.extend(batch);
        }
        server.create(&header).await;
        let id = &header.id;
        let rows: Vec<Value> = events
            .iter()
            .map(|e| row_of(e, FormatVersion::V4))
            .collect();
        let body = json!({ "expectedNextSeq": 0, "events": rows });
        let (status, ack) = server
            .post(&format!("/v1/sessions/{id}/events"), &body)
            .await;
        assert_eq!(status, 200, "{ack}");
        assert_eq!(ack["nextSeq"], 300);
        let (_, info) = server.get(&format!("/v1/sessions/{id}")).await;
        assert_eq!(info["header"]["version"], 4);
        let (status, read) = server
            .get(&format!("/v1/sessions/{id}/events?from=0&to=300"))
            .await;
        assert_eq!(status, 200);
        assert_eq!(read["events"], Value::Array(rows.clone()));
        let tailed = read_tail(&server, id, "?from=290", None, 10).await;
        let tailed: Vec<Value> = tailed.into_iter().map(|(_, row)| row).collect();
        assert_eq!(tailed, rows[290..].to_vec());
        let (status, verified) = server.get(&format!("/v1/sessions/{id}/verify")).await;
        assert_eq!(status, 200, "{verified}");
        assert_eq!(verified["sessions"][0]["ok"], true, "{verified}");
        assert_eq!(verified["sessions"][0]["events"], 300);

        // A V3 plugin source, which V4 replaced by producer-owned kinds.
        let v3_result = json!({"type":"user/message","seq":300,"time":1,
            "data":{"id":"m-v3","role":"user","source":{"kind":"plugin","plugin":"x"},
                    "content":[{"type":"text","text":"hi"}]},
            "surfaceOp":"append"});
        let body = json!({ "expectedNextSeq": 300, "events": [v3_result] });
        let (status, refused) = server
            .post(&format!("/v1/sessions/{id}/events"), &body)
            .await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["seq"], 300);
        assert!(
            refused["message"]
                .as_str()
                .unwrap_or_default()
                .contains("format v4 message requires a producer-owned source kind"),
            "{refused}"
        );
        let (_, head) = server.get(&format!("/v1/sessions/{id}/head")).await;
        assert_eq!(head["nextSeq"], 300);
        server.stop().await;
    });
}
