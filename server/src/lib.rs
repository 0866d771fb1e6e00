//! `sessionlog serve`: the store over HTTP (axum on tokio), for services that keep their
//! sessions in sessionlog and reach it across processes.
//!
//! The endpoints (docs/openapi.json, served at `/openapi.json`): create and list sessions,
//! append a batch with an expected next seq (409 with the current head on a conflict, 422
//! with the seq and rule on a refusal), read a range, tail over SSE resumable from a seq,
//! derived messages and surface at the head or a seq, rebuilt requests, verify, and the head
//! chain hash. `/health` is open; with a token every other path wants `Authorization: Bearer`.
//!
//! [`serve`] takes its listener and its shutdown future, so tests run it on port 0 and stop
//! it at will. On shutdown it stops accepting, ends every tail, and waits for the requests in
//! flight, at most [`limits::SHUTDOWN_GRACE`]: an append accepted before the signal is
//! committed either way, and answered unless its client stopped reading.
//!
//! What one client can cost is bounded by [`limits`]: header, idle and body timeouts, a
//! write-stall timeout, caps on connections and tails, a budget of body bytes in flight, the
//! estimated decoded size of an append, semaphores on verifies and whole-session folds, and
//! pages of `requests`.

mod audit_cache;
mod body;
mod console;
mod derived;
mod json;
pub mod limits;
mod listener;
mod routes;
mod tails;
mod views;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use sessionlog_engine::error::Error;
use sessionlog_engine::log_service::LogService;
use sessionlog_engine::open::Location;

pub use self::limits::{ServerLimits, BODY_BYTES_MAX};
/// Longest token file read, in bytes.
pub const TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// The OpenAPI description of the endpoints, committed as docs/openapi.json.
pub const OPENAPI_JSON: &str = include_str!("../../docs/openapi.json");

/// How the server answers.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// The bearer token every endpoint but `/health` wants; `None`: no authentication.
    pub token: Option<String>,
    /// What one client may cost; [`Default`] is the constants of [`limits`].
    pub limits: ServerLimits,
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) service: LogService,
    token: Option<Arc<str>>,
    limits: Arc<ServerLimits>,
    bodies: body::BodyBudget,
    tails: tails::TailSlots,
    verifies: Arc<Semaphore>,
    folds: Arc<Semaphore>,
    audits: Arc<audit_cache::AuditCache>,
    derived: Arc<derived::DerivedCache>,
}

/// The router of every endpoint over `service`.
pub fn router(service: LogService, options: ServerOptions) -> Router {
    let limits = options.limits;
    let state = AppState {
        service,
        token: options.token.map(Arc::from),
        bodies: body::BodyBudget::new(&limits),
        tails: tails::TailSlots::new(limits.tails_max, limits.tails_per_token_max),
        verifies: Arc::new(Semaphore::new(limits.verifies_max)),
        folds: Arc::new(Semaphore::new(limits.folds_max)),
        audits: Arc::default(),
        derived: Arc::default(),
        limits: Arc::new(limits),
    };
    let protected = routes::protected()
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    routes::open()
        .merge(protected)
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Serves `service` on `listener` until `shutdown` resolves, then ends the tails and waits for
/// the requests in flight, at most the shutdown grace.
pub async fn serve(
    listener: TcpListener,
    service: LogService,
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = options.limits.clone();
    let app = router(service.clone(), options);
    listener::serve_connections(listener, app, &limits, shutdown, || service.close()).await
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is called,
/// not when the future is first polled: `run` calls it before it announces its address, so a
/// signal sent as soon as the address is known finds them (the default action would kill the
/// process instead of shutting it down). Must be called inside a tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (interrupt, terminate) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(interrupt) => {}
                () = wait(terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// What `sessionlog serve` runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// A redb file, or a `postgres://` URL.
    pub db: String,
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
}

/// Runs the server until SIGINT or SIGTERM; `on_listening` is told the bound address (the
/// port when 0 was asked for). Logs go to stderr through `tracing`.
pub fn run(config: &ServeConfig, on_listening: impl FnOnce(SocketAddr)) -> Result<(), Error> {
    let token = config.token_file.as_deref().map(read_token).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io(Path::new("<runtime>"), e))?;
    runtime.block_on(async {
        let service = open_service(&config.db).await?;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| Error::io(Path::new(&config.listen.to_string()), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io(Path::new(&config.listen.to_string()), e))?;
        let shutdown = shutdown_signal();
        tracing::info!(%addr, backend = service.store().backend_name(), "listening");
        on_listening(addr);
        let options = ServerOptions {
            token,
            limits: ServerLimits::default(),
        };
        serve(listener, service, options, shutdown)
            .await
            .map_err(|e| Error::io(Path::new(&addr.to_string()), e))?;
        tracing::info!(%addr, "stopped");
        Ok(())
    })
}

/// Opens `db` (a location, [`sessionlog_engine::open::Location`]) as a service.
pub async fn open_service(db: &str) -> Result<LogService, Error> {
    let location = Location::parse(db)?;
    Ok(LogService::open(&location).await?)
}

/// Installs the stderr log subscriber (`info` and up); a second call changes nothing.
pub fn init_logging() {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_max_level(tracing::Level::INFO)
        .try_init();
}

/// Reads the bearer token: the file's contents without surrounding whitespace.
fn read_token(path: &Path) -> Result<String, Error> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut text = String::new();
    file.take(TOKEN_FILE_BYTES_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(path, e))?;
    if text.len() as u64 > TOKEN_FILE_BYTES_MAX {
        return Err(Error::Refused(format!(
            "{}: the token file is longer than {TOKEN_FILE_BYTES_MAX} bytes",
            path.display()
        )));
    }
    let token = text.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::Refused(format!(
            "{}: the token file must hold one token without spaces",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if same_token(token.as_bytes(), expected.as_bytes()) => next.run(request).await,
        _ => {
            let body = json::error_body("unauthorized", "a valid bearer token is required");
            let mut response = (StatusCode::UNAUTHORIZED, body).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

/// Compares tokens in time independent of where they differ.
fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One structured log line per request: method, path, status, elapsed time.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let elapsed_us = started.elapsed().as_micros() as u64;
    tracing::info!(%method, path, status, elapsed_us, "request");
    response
}
