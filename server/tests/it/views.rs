//! The console's views over HTTP: the sessions page, compact requests, tokens and the paged
//! transcript, each compared whole with the engine's `--json` document of the same session
//! (what the CLI prints), on redb and (when configured) PostgreSQL.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use sessionlog_engine::audit::audit_stored;
use sessionlog_engine::documents;
use sessionlog_engine::log_store::LogStore;
use sessionlog_engine::requests::RequestOptions;
use sessionlog_engine::show::ShowOptions;
use sessionlog_engine::stored;
use sessionlog_format::SessionHeader;

use crate::harness::postgres_url;
use crate::server::{append_batches, generated_session, runtime, TestServer};

/// The engine's documents of one stored session, as the CLI prints them.
struct Expected {
    audit: Value,
    requests: Value,
    tokens: Value,
    transcript: Value,
}

async fn expected(store: &Arc<dyn LogStore>, session: &str) -> Expected {
    let store = Arc::clone(store);
    let session = session.to_owned();
    tokio::task::spawn_blocking(move || {
        let store = store.as_ref();
        let audit = documents::audit_row(&audit_stored(store, &session).unwrap());
        let report = stored::requests(store, &session, RequestOptions::default()).unwrap();
        let tokens = stored::tokens(store, &session).unwrap();
        let source = sessionlog_engine::replay::SessionSource::Store {
            store,
            session: &session,
        };
        let transcript = sessionlog_engine::show::show(source, ShowOptions::default()).unwrap();
        Expected {
            audit,
            requests: documents::requests(&report).unwrap(),
            tokens: documents::tokens(&tokens),
            transcript: documents::transcript(&transcript),
        }
    })
    .await
    .unwrap()
}

/// Every row of a paged route, following `page.nextFrom`, under `key`.
async fn all_pages(server: &TestServer, path: &str, key: &str, limit: u64) -> (Vec<Value>, Value) {
    let mut rows = Vec::new();
    let mut from = 0;
    loop {
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, page) = server
            .get(&format!("{path}{sep}from={from}&limit={limit}"))
            .await;
        assert_eq!(status, 200, "{page}");
        let got = page[key].as_array().unwrap();
        assert!(got.len() as u64 <= limit);
        rows.extend(got.iter().cloned());
        match page["page"]["nextFrom"].as_u64() {
            Some(next) => from = next,
            None => return (rows, page),
        }
    }
}

async fn session(server: &TestServer, test: &str, n_events: u64) -> SessionHeader {
    let (header, batches) = generated_session(test, n_events);
    server.create(&header).await;
    append_batches(server, &header, &batches).await;
    header
}

/// A compact row is the full row less what repeats per header and the bodies.
fn compact(row: &Value) -> Value {
    let mut row = row.clone();
    let object = row.as_object_mut().unwrap();
    for key in [
        "config",
        "tools",
        "adapterDefaults",
        "context",
        "messages",
        "body",
    ] {
        object.remove(key);
    }
    row
}

/// Long enough for compactions and prunes, whose markers a transcript page must wait for.
const SESSION_EVENTS: u64 = 1200;

async fn check_views(server: &TestServer, test: &str) {
    let header = session(server, &format!("{test}-a"), SESSION_EVENTS).await;
    let id = &header.id;
    let want = expected(&server.store, id).await;

    // Compact requests, in pages of 7 rows: the `requests` rows less the dropped members.
    let path = format!("/v1/sessions/{id}/requests?compact=true");
    let (rows, last) = all_pages(server, &path, "requests", 7).await;
    let full: Vec<Value> = want.requests["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(compact)
        .collect();
    assert!(full.len() > 7, "the session spans pages");
    assert_eq!(rows, full);
    assert_eq!(last["summary"], want.requests["summary"]);

    // Tokens, in pages of 5.
    let (rows, last) = all_pages(server, &format!("/v1/sessions/{id}/tokens"), "requests", 5).await;
    assert_eq!(Value::Array(rows), want.tokens["requests"]);
    assert_eq!(last["head"], want.tokens["head"]);

    // The transcript, in pages of 13 entries, and a filtered history.
    let kinds_of = |entries: &Value| -> Vec<String> {
        let mut kinds: Vec<String> = entries
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    };
    let present = kinds_of(&want.transcript["entries"]);
    for kind in ["compaction", "prune", "prompt-append"] {
        assert!(present.iter().any(|k| k == kind), "{kind} in {present:?}");
    }
    let (entries, _) = all_pages(server, &format!("/v1/sessions/{id}/show"), "entries", 13).await;
    assert_eq!(Value::Array(entries), want.transcript["entries"]);
    let kinds = "prompt,prompt-append,prompt-rewrite,prompt-clear,compaction";
    let (history, _) = all_pages(
        server,
        &format!("/v1/sessions/{id}/show?kinds={kinds}"),
        "entries",
        3,
    )
    .await;
    let filtered: Vec<Value> = want.transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| kinds.split(',').any(|k| e["kind"] == k))
        .cloned()
        .collect();
    assert!(!filtered.is_empty(), "the session has a prompt");
    assert_eq!(history, filtered);

    // The sessions page: the `audit` row plus the head and the last event's time.
    let (status, page) = server.get(&format!("/v1/audit?filter={id}")).await;
    assert_eq!(status, 200, "{page}");
    let (_, head) = server.get(&format!("/v1/sessions/{id}/head")).await;
    let mut row = want.audit.clone();
    row["nextSeq"] = head["nextSeq"].clone();
    row["headHash"] = head["headHash"].clone();
    let (_, last_event) = server
        .get(&format!(
            "/v1/sessions/{id}/events?from={}&to={SESSION_EVENTS}",
            SESSION_EVENTS - 1
        ))
        .await;
    row["lastActivity"] = last_event["events"][0]["time"].clone();
    assert_eq!(page["sessions"], json!([row]));
    assert_eq!(
        page["page"],
        json!({ "from": 0, "limit": 50, "nextFrom": null, "total": 1 })
    );

    check_sorting(server, test, id).await;
    check_refusals(server, id).await;
    check_live_change(server, &header).await;
}

/// Three sessions of different sizes sort by events both ways, page by one, and filter.
async fn check_sorting(server: &TestServer, test: &str, big: &str) {
    let small = session(server, &format!("{test}-b"), 80).await.id;
    let middle = session(server, &format!("{test}-c"), 200).await.id;
    let filter = test;
    let order = |page: &Value| -> Vec<String> {
        page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["session"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, page) = server
        .get(&format!("/v1/audit?filter={filter}&sort=events&order=desc"))
        .await;
    assert_eq!(
        order(&page),
        [big.to_owned(), middle.clone(), small.clone()]
    );
    let (_, page) = server
        .get(&format!(
            "/v1/audit?filter={filter}&sort=events&from=1&limit=1"
        ))
        .await;
    assert_eq!(order(&page), std::slice::from_ref(&middle));
    assert_eq!(page["page"]["nextFrom"], 2);
    assert_eq!(page["page"]["total"], 3);
    let (_, page) = server
        .get(&format!("/v1/audit?filter={filter}&order=desc"))
        .await;
    let mut by_id = vec![big.to_owned(), middle, small];
    by_id.sort();
    by_id.reverse();
    assert_eq!(order(&page), by_id);
}

async fn check_refusals(server: &TestServer, id: &str) {
    for path in [
        "/v1/audit?limit=0".to_owned(),
        "/v1/audit?limit=1001".to_owned(),
        "/v1/audit?sort=colour".to_owned(),
        format!("/v1/audit?filter={}", "x".repeat(257)),
        format!("/v1/sessions/{id}/tokens?limit=20001"),
        format!("/v1/sessions/{id}/requests?compact=true&limit=10001"),
        format!("/v1/sessions/{id}/requests?compact=true&bodies=true"),
        format!("/v1/sessions/{id}/show?kinds=message,nonsense"),
        format!("/v1/sessions/{id}/show?maxBodyBytes=0"),
        format!("/v1/sessions/{id}/show?limit=2001"),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 400, "{path}: {body}");
    }
    for path in ["tokens", "show", "requests?compact=true"] {
        let (status, body) = server.get(&format!("/v1/sessions/nobody/{path}")).await;
        assert_eq!(
            (status, body["error"].clone()),
            (404, json!("unknown-session"))
        );
    }
}

/// After an append, the kept folds are not served: the views describe the new head.
async fn check_live_change(server: &TestServer, header: &SessionHeader) {
    let id = &header.id;
    let (_, before) = server.get(&format!("/v1/sessions/{id}/tokens")).await;
    let (_, audit_before) = server.get(&format!("/v1/audit?filter={id}")).await;
    let next_seq = before["nextSeq"].as_u64().unwrap();
    let (status, ack) = server
        .append(id, next_seq, &[crate::support::title(next_seq)])
        .await;
    assert_eq!(status, 200, "{ack}");
    let (_, after) = server.get(&format!("/v1/sessions/{id}/tokens")).await;
    assert_eq!(after["nextSeq"], next_seq + 1);
    let (_, audit_after) = server.get(&format!("/v1/audit?filter={id}")).await;
    assert_eq!(
        audit_after["sessions"][0]["events"],
        audit_before["sessions"][0]["events"].as_u64().unwrap() + 1
    );
    assert_eq!(audit_after["sessions"][0]["headHash"], ack["headHash"]);
}

// Goal: every console view equals the CLI's document of the same session, page by page, and
// follows an append. Method: generated sessions served from redb; pages concatenated and
// compared whole with the engine's documents.
#[test]
fn http_console_views_on_redb() {
    runtime().block_on(async {
        let server = TestServer::redb(None).await;
        check_views(&server, "views").await;
        server.stop().await;
    });
}

// Goal: the same on PostgreSQL (skipped without a database outside CI).
#[test]
fn http_console_views_on_postgres() {
    let Some(url) = postgres_url("http_console_views_on_postgres") else {
        return;
    };
    runtime().block_on(async {
        let server = TestServer::postgres(&url).await;
        check_views(&server, &crate::harness::unique_id("views-pg")).await;
        server.stop().await;
    });
}

// Goal: the console's page and assets are served open (they hold no data) with a strict
// content policy, while its data routes still want the token.
#[test]
fn http_console_assets_are_open_and_strict() {
    runtime().block_on(async {
        let server = TestServer::redb(Some("s3cret")).await;
        for (path, kind) in [
            ("/", "text/html"),
            ("/console/app.js", "text/javascript"),
            ("/console/app.css", "text/css"),
        ] {
            let response = server.client.get(server.url(path)).send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200, "{path}");
            let headers = response.headers();
            let content_type = headers["content-type"].to_str().unwrap();
            assert!(content_type.starts_with(kind), "{path}: {content_type}");
            let policy = headers["content-security-policy"].to_str().unwrap();
            assert!(policy.contains("script-src 'self'"), "{policy}");
            assert!(!response.text().await.unwrap().is_empty());
        }
        let (status, _) = server.get("/v1/audit").await;
        assert_eq!(status, 401);
        server.stop().await;
    });
}
