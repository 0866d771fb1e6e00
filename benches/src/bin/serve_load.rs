//! The service-mode load check (issue #13): an in-process `serve` on 127.0.0.1 (port 0), N
//! concurrent HTTP clients each appending single-event batches to its own session while an SSE
//! tail follows each session. Reports commits/s, append latency p50/p99 and tail lag p50/p99,
//! for the embedded store and, with `--postgres URL`, for PostgreSQL.
//!
//! Bounded: at most `--clients` x `--appends` appends and `--seconds` of appending per backend;
//! loopback only.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin serve_load -- --clients 16 --appends 200 \
//!     [--postgres postgres://postgres@127.0.0.1:PORT/postgres]
//! ```
//!
//! With `--hostile` it runs the issue #20 check instead, on the embedded store with the default
//! [`ServerLimits`]: 1,000 idle connections, 200 tails that never read (of a 50k-event
//! session, so each fills its socket), and 16 concurrent verifies of that session, while a
//! probe on its own thread times `/health` every 50 ms and the process's RSS is sampled. It
//! prints the `/health` latency p50/p99/max (over the run, by phase and by 10 s window), the
//! peak RSS, and how long the verifies took; it stops by itself after the verifies (and
//! `--hold` seconds) or `--seconds`. `--idle`, `--tails` and `--verifies` set each load (at
//! most the defaults), `--verifies-max` the server's `VERIFIES_MAX`. It needs about 2,500 file
//! descriptors (both ends of every connection are in this process): run it under
//! `ulimit -n 4096`.
//!
//! ```text
//! cargo run --release -p sessionlog-benches --bin serve_load -- --hostile [--events 50000] \
//!     [--idle N] [--tails N] [--verifies N] [--hold SECONDS] [--verifies-max N]
//! ```

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{json, Value};
use sessionlog_engine::log_service::LogService;
use sessionlog_engine::pg_store::PgStore;
use sessionlog_engine::store::Store;
use sessionlog_format::{Event, EventType, FormatVersion, SessionHeader};
use sessionlog_server::{serve, ServerLimits, ServerOptions};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    clients: usize,
    appends: u64,
    seconds: u64,
    postgres: Option<String>,
    hostile: bool,
    events: u64,
    /// The hostile run's idle connections, stalled tails and concurrent verifies.
    idle: usize,
    tails: usize,
    verifies: usize,
    /// Seconds the hostile run goes on probing after its connections are open, at least.
    hold: u64,
    /// The server's verifies at once (default: `VERIFIES_MAX`).
    verifies_max: Option<usize>,
}

/// What one backend's run measured.
struct Outcome {
    backend: &'static str,
    commits: u64,
    elapsed: Duration,
    latencies_us: Vec<u64>,
    lags_us: Vec<u64>,
    conflicts: u64,
}

/// When each appended event was acknowledged to its client.
type Acks = Arc<Mutex<HashMap<(usize, u64), Instant>>>;

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        clients: 16,
        appends: 200,
        seconds: 60,
        postgres: None,
        hostile: false,
        events: 50_000,
        idle: IDLE_CONNECTIONS,
        tails: STALLED_TAILS,
        verifies: CONCURRENT_VERIFIES,
        hold: 0,
        verifies_max: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{arg}: {e}"));
        match arg.as_str() {
            "--clients" => options.clients = number(value()?)?.clamp(1, 256) as usize,
            "--appends" => options.appends = number(value()?)?.clamp(1, 100_000),
            "--seconds" => options.seconds = number(value()?)?.clamp(1, 600),
            "--postgres" => options.postgres = Some(value()?),
            "--hostile" => options.hostile = true,
            "--events" => options.events = number(value()?)?.clamp(1, 1_000_000),
            "--idle" => options.idle = number(value()?)?.min(IDLE_CONNECTIONS as u64) as usize,
            "--tails" => options.tails = number(value()?)?.min(STALLED_TAILS as u64) as usize,
            "--hold" => options.hold = number(value()?)?.min(600),
            "--verifies-max" => {
                options.verifies_max = Some(number(value()?)?.clamp(1, 16) as usize)
            }
            "--verifies" => {
                options.verifies = number(value()?)?.min(CONCURRENT_VERIFIES as u64) as usize
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

fn title(seq: u64) -> Value {
    let event = Event::other(
        seq,
        0,
        EventType::SessionTitle,
        json!({"title": "load", "messageSeqs": [], "source": {"kind": "user"}}),
    );
    let mut out = Vec::new();
    sessionlog_format::row::encode_row(&event, FormatVersion::V3, &mut out);
    serde_json::from_slice(&out).expect("a row is JSON")
}

/// One client: creates its session, then appends one event at a time until done or out of
/// time, recording each latency and ack instant.
async fn appender(
    base: String,
    client_idx: usize,
    options: (u64, Instant),
    acks: Acks,
) -> (Vec<u64>, u64) {
    let (appends, deadline) = options;
    let client = reqwest::Client::new();
    let session = format!("load-{client_idx}");
    let mut latencies = Vec::with_capacity(appends as usize);
    let mut conflicts = 0;
    let mut seq = 0;
    while seq < appends && Instant::now() < deadline {
        let body = json!({ "expectedNextSeq": seq, "events": [title(seq)] });
        let started = Instant::now();
        let response = client
            .post(format!("{base}/v1/sessions/{session}/events"))
            .body(body.to_string())
            .send()
            .await
            .expect("the server answers");
        let status = response.status().as_u16();
        let _ = response.bytes().await;
        let now = Instant::now();
        match status {
            200 => {
                latencies.push((now - started).as_micros() as u64);
                acks.lock()
                    .expect("no panics")
                    .insert((client_idx, seq), now);
                seq += 1;
            }
            409 => conflicts += 1,
            other => panic!("append answered {other}"),
        }
    }
    (latencies, conflicts)
}

/// One tail per session: the lag of each event after its ack (0 when the tail was first).
async fn tailer(
    base: String,
    client_idx: usize,
    until_seq: Arc<Mutex<Option<u64>>>,
    acks: Acks,
) -> Vec<u64> {
    let client = reqwest::Client::new();
    let session = format!("load-{client_idx}");
    let response = client
        .get(format!("{base}/v1/sessions/{session}/tail?from=0"))
        .send()
        .await
        .expect("the tail opens");
    let mut stream = response.bytes_stream().eventsource();
    let mut lags = Vec::new();
    let mut pending: Vec<(u64, Instant)> = Vec::new();
    loop {
        let target = *until_seq.lock().expect("no panics");
        if target.is_some_and(|t| pending.len() as u64 >= t) {
            break;
        }
        match tokio::time::timeout(Duration::from_millis(500), stream.next()).await {
            Ok(Some(Ok(message))) if message.event == "event" => {
                let seq: u64 = message.id.parse().expect("ids are seqs");
                pending.push((seq, Instant::now()));
            }
            Ok(Some(Ok(_))) | Err(_) => {}
            Ok(Some(Err(_))) | Ok(None) => break,
        }
    }
    let acks = acks.lock().expect("no panics");
    for (seq, received) in pending {
        if let Some(acked) = acks.get(&(client_idx, seq)) {
            lags.push(received.saturating_duration_since(*acked).as_micros() as u64);
        }
    }
    lags
}

async fn run_backend(backend: &'static str, service: LogService, options: &Options) -> Outcome {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let base = format!("http://{}", listener.local_addr().expect("bound"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        service.clone(),
        ServerOptions::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let client = reqwest::Client::new();
    for client_idx in 0..options.clients {
        let header = SessionHeader::new_v3(format!("load-{client_idx}"), 1_700_000_000_000);
        let response = client
            .post(format!("{base}/v1/sessions"))
            .body(serde_json::to_string(&header).expect("a header serializes"))
            .send()
            .await
            .expect("the server answers");
        assert_eq!(response.status().as_u16(), 201, "session create");
    }
    let acks: Acks = Arc::new(Mutex::new(HashMap::new()));
    let targets: Vec<Arc<Mutex<Option<u64>>>> = (0..options.clients)
        .map(|_| Arc::new(Mutex::new(None)))
        .collect();
    let tails: Vec<_> = (0..options.clients)
        .map(|i| {
            tokio::spawn(tailer(
                base.clone(),
                i,
                Arc::clone(&targets[i]),
                Arc::clone(&acks),
            ))
        })
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(options.seconds);
    let appenders: Vec<_> = (0..options.clients)
        .map(|i| {
            tokio::spawn(appender(
                base.clone(),
                i,
                (options.appends, deadline),
                Arc::clone(&acks),
            ))
        })
        .collect();
    let mut latencies = Vec::new();
    let mut conflicts = 0;
    for (client_idx, task) in appenders.into_iter().enumerate() {
        let (mut l, c) = task.await.expect("an appender");
        *targets[client_idx].lock().expect("no panics") = Some(l.len() as u64);
        latencies.append(&mut l);
        conflicts += c;
    }
    let elapsed = started.elapsed();
    let mut lags = Vec::new();
    for task in tails {
        lags.append(&mut task.await.expect("a tailer"));
    }
    let _ = stop.send(());
    server.await.expect("the server task").expect("the server");
    Outcome {
        backend,
        commits: latencies.len() as u64,
        elapsed,
        latencies_us: latencies,
        lags_us: lags,
        conflicts,
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx] as f64 / 1000.0
}

fn report(outcome: &mut Outcome) {
    outcome.latencies_us.sort_unstable();
    outcome.lags_us.sort_unstable();
    let rate = outcome.commits as f64 / outcome.elapsed.as_secs_f64();
    println!(
        "| {} | {} | {:.1} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
        outcome.backend,
        outcome.commits,
        outcome.elapsed.as_secs_f64(),
        rate,
        percentile(&outcome.latencies_us, 0.50),
        percentile(&outcome.latencies_us, 0.99),
        percentile(&outcome.lags_us, 0.50),
        percentile(&outcome.lags_us, 0.99),
        outcome.lags_us.len(),
    );
    if outcome.conflicts > 0 {
        println!("(unexpected conflicts: {})", outcome.conflicts);
    }
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("serve_load: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if options.hostile {
        return runtime.block_on(hostile(&options));
    }
    println!(
        "{} clients x {} appends of 1 event, a tail per session, at most {} s per backend",
        options.clients, options.appends, options.seconds
    );
    println!("| backend | commits | seconds | commits/s | append p50 ms | append p99 ms | tail lag p50 ms | tail lag p99 ms | tailed |");
    println!("|---|---|---|---|---|---|---|---|---|");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Arc::new(Store::open(&dir.path().join("load.redb")).expect("a store"));
        let mut outcome = run_backend("redb", LogService::new(store), &options).await;
        report(&mut outcome);
        if let Some(url) = &options.postgres {
            let url = url.clone();
            let store = tokio::task::spawn_blocking(move || PgStore::connect(&url))
                .await
                .expect("connect task")
                .expect("the database");
            clear_postgres(&options);
            let mut outcome =
                run_backend("postgres", LogService::new(Arc::new(store)), &options).await;
            report(&mut outcome);
        }
    });
    ExitCode::SUCCESS
}

/// Removes the `load-N` sessions of an earlier run from the database.
fn clear_postgres(options: &Options) {
    let Some(url) = &options.postgres else { return };
    let url = url.clone();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("the database");
        for table in [
            "sessionlog_checkpoints",
            "sessionlog_events",
            "sessionlog_sessions",
        ] {
            let sql = format!("DELETE FROM {table} WHERE session_id LIKE 'load-%'");
            client.execute(sql.as_str(), &[]).expect("a cleanup");
        }
    })
    .join()
    .expect("the cleanup thread");
}

/// Idle connections the hostile run holds open.
const IDLE_CONNECTIONS: usize = 1000;
/// Tails that never read.
const STALLED_TAILS: usize = 200;
/// Verifies of the big session at once.
const CONCURRENT_VERIFIES: usize = 16;
/// How often the probe asks `/health`.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Longest a `/health` answer is waited for before it counts as a timeout.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The process's resident set and its peak, in MiB, from /proc/self/status (0 elsewhere).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The soft file limit, from /proc/self/limits (`None` where it cannot be read).
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

async fn hostile(options: &Options) -> ExitCode {
    let (n_idle, n_tails, n_verifies) = (options.idle, options.tails, options.verifies);
    let needed = (n_idle + n_tails + n_verifies) as u64 * 2 + 64;
    if let Some(limit) = open_files_limit().filter(|limit| *limit < needed) {
        eprintln!("serve_load: the file limit is {limit}, the run needs {needed}: ulimit -n 4096");
        return ExitCode::from(2);
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Arc::new(Store::open(&dir.path().join("hostile.redb")).expect("a store"));
    let mut generator =
        sessionlog_format::gen::Generator::new(sessionlog_format::gen::GenOptions {
            events: options.events,
            seed: 20,
        });
    let mut header = generator.header();
    header.id = "big".to_owned();
    store.create_session(&header).expect("create");
    let mut next_seq = 0;
    while let Some(batch) = generator.next_batch() {
        let n = batch.len() as u64;
        store.append("big", next_seq, batch).expect("append");
        next_seq += n;
    }
    let (rss_loaded, _) = rss_mib();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    let base = format!("http://{addr}");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut limits = ServerLimits::default();
    if let Some(verifies_max) = options.verifies_max {
        limits.verifies_max = verifies_max;
    }
    let server = tokio::spawn(serve(
        listener,
        LogService::new(store),
        ServerOptions {
            token: None,
            limits: limits.clone(),
        },
        async {
            let _ = stopped.await;
        },
    ));
    println!(
        "hostile run: {next_seq} events in session big; {n_idle} idle connections, \
         {n_tails} stalled tails, {n_verifies} concurrent verifies; limits: \
         header {:?}, write stall {:?}, {} verifies at once",
        limits.header_read_timeout, limits.write_stall_timeout, limits.verifies_max
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(options.seconds);
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // The probe runs on its own thread and runtime, as an outside monitor would: its own
    // scheduling is then not queued behind the clients of this process.
    let probe = {
        let (base, probing) = (base.clone(), Arc::clone(&probing));
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a probe runtime")
                .block_on(probe_health(base, probing, started))
        })
    };
    let peak = Arc::new(Mutex::new(0.0f64));
    let sampler = {
        let probing = Arc::clone(&probing);
        let peak = Arc::clone(&peak);
        tokio::spawn(async move {
            while probing.load(std::sync::atomic::Ordering::Relaxed) {
                let (rss, _) = rss_mib();
                {
                    let mut peak = peak.lock().expect("no panics");
                    *peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut idle = Vec::with_capacity(n_idle);
    for _ in 0..n_idle {
        idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    let mut stalled = Vec::with_capacity(n_tails);
    for _ in 0..n_tails {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = "GET /v1/sessions/big/tail?from=0 HTTP/1.1\r\nHost: x\r\n\r\n";
        stream.write_all(request.as_bytes()).await.expect("send");
        stalled.push(stream);
    }
    let connected = started.elapsed();
    let verifies: Vec<_> = (0..n_verifies)
        .map(|_| {
            let base = base.clone();
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let started = Instant::now();
                let response = client
                    .get(format!("{base}/v1/sessions/big/verify"))
                    .send()
                    .await
                    .expect("the server answers");
                let status = response.status().as_u16();
                let doc: Value = response.json().await.unwrap_or(Value::Null);
                let ok = status == 200 && doc["sessions"][0]["ok"] == true;
                (ok, started.elapsed())
            })
        })
        .collect();
    let mut verify_times = Vec::new();
    let mut verifies_ok = 0;
    for task in verifies {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if let Ok(Ok((ok, elapsed))) = tokio::time::timeout(remaining, task).await {
            verifies_ok += usize::from(ok);
            verify_times.push(elapsed.as_micros() as u64);
        }
    }
    let verified = started.elapsed();
    let held = connected + Duration::from_secs(options.hold);
    tokio::time::sleep(held.saturating_sub(started.elapsed())).await;
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let health = probe.join().expect("the probe");
    let _ = sampler.await;
    let (rss_end, hwm) = rss_mib();
    verify_times.sort_unstable();
    let timeouts = health.iter().filter(|(_, us)| *us == u64::MAX).count();
    // All probes, those sent while the connections were being opened (the tails stream
    // into their sockets then), and those sent while only the verifies ran.
    let answered = |phase: &dyn Fn(Duration) -> bool| {
        let mut out: Vec<u64> = health
            .iter()
            .filter(|(at, us)| *us != u64::MAX && phase(*at))
            .map(|(_, us)| *us)
            .collect();
        out.sort_unstable();
        out
    };
    let phases = [
        ("all", answered(&|_| true)),
        ("while connecting", answered(&|at| at < connected)),
        ("once connected", answered(&|at| at >= connected)),
    ];
    // And by window of the run, to show when the slow answers came.
    let windows: Vec<(u64, Vec<u64>)> = (0..=health.last().map_or(0, |(at, _)| at.as_secs() / 10))
        .map(|window| {
            let within = |at: Duration| at.as_secs() / 10 == window;
            (window * 10, answered(&within))
        })
        .collect();
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| connections opened (idle + tails) in | {:.2} s |",
        connected.as_secs_f64()
    );
    println!("| verifies ok | {verifies_ok} of {n_verifies} |");
    println!(
        "| verify latency p50 / max | {:.0} / {:.0} ms |",
        percentile(&verify_times, 0.5),
        percentile(&verify_times, 1.0)
    );
    println!(
        "| run (to the last verify) | {:.1} s |",
        verified.as_secs_f64()
    );
    println!(
        "| /health probes, answered / timed out | {} / {timeouts} |",
        phases[0].1.len()
    );
    for (phase, answered) in &phases {
        println!(
            "| /health latency p50 / p99 / max, {phase} ({} probes) | {:.2} / {:.2} / {:.2} ms |",
            answered.len(),
            percentile(answered, 0.5),
            percentile(answered, 0.99),
            percentile(answered, 1.0)
        );
    }
    for (from_s, answered) in &windows {
        println!(
            "| /health latency p50 / p99 / max, {from_s}-{} s ({} probes) | {:.2} / {:.2} / {:.2} ms |",
            from_s + 10,
            answered.len(),
            percentile(answered, 0.5),
            percentile(answered, 0.99),
            percentile(answered, 1.0)
        );
    }
    println!("| RSS after loading the session | {rss_loaded:.0} MiB |");
    println!(
        "| RSS peak during the run (sampled) / at the end / VmHWM | {:.0} / {rss_end:.0} / {hwm:.0} MiB |",
        *peak.lock().expect("no panics")
    );
    drop(idle);
    drop(stalled);
    let _ = stop.send(());
    let stopping = Instant::now();
    server.await.expect("the server task").expect("the server");
    println!(
        "| shutdown after the run | {:.2} s |",
        stopping.elapsed().as_secs_f64()
    );
    if verifies_ok == n_verifies && timeouts == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Times `/health` every [`PROBE_INTERVAL`] until `probing` is cleared: `(when it was sent
/// after `run_started`, its latency in us)`; a probe that gets no answer within
/// [`PROBE_TIMEOUT`] is recorded as `u64::MAX`. Each probe opens a new connection, as a fresh
/// client would.
async fn probe_health(
    base: String,
    probing: Arc<std::sync::atomic::AtomicBool>,
    run_started: Instant,
) -> Vec<(Duration, u64)> {
    let mut out = Vec::new();
    while probing.load(std::sync::atomic::Ordering::Relaxed) {
        let client = reqwest::Client::new();
        let started = Instant::now();
        let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
            let response = client.get(format!("{base}/health")).send().await.ok()?;
            (response.status().as_u16() == 200).then_some(())
        })
        .await;
        let latency_us = match answer {
            Ok(Some(())) => started.elapsed().as_micros() as u64,
            _ => u64::MAX,
        };
        out.push((started - run_started, latency_us));
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
    out
}
