//! What one client may cost the server: timeouts, connection and tail caps, and the memory
//! bounds of request bodies and whole-session work. Each bound is a named constant with its
//! unit; [`ServerLimits`] carries them so tests can shrink them.

use std::time::Duration;

use sessionlog_format::budget;

/// Longest wait for a request's header, from the moment a connection waits for one (a new
/// connection, or a keep-alive one between requests) to its last header byte. An idle
/// connection and a slowloris client are closed when it passes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a keep-alive connection stays open without a request. hyper times the wait for
/// the next request with the header timer, so the idle timeout is [`HEADER_READ_TIMEOUT`].
pub const IDLE_TIMEOUT: Duration = HEADER_READ_TIMEOUT;
/// Longest time to receive a whole request body, from its header to its last byte; a body
/// that is slower (or a `Content-Length` that lies) is answered 408 and the connection closed.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a write to a client may make no progress (the client stopped reading and the
/// socket buffer is full); the connection is then closed. This is what drops tails that
/// stop reading.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// After SIGTERM, how long requests in flight have to finish before their connections are
/// dropped; shutdown takes at most this long after the signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Most open connections; one more is answered 503 `too-many-connections` and closed. The
/// process needs a file limit (`ulimit -n`) above this plus the store's few files.
pub const CONNECTIONS_MAX: usize = 2048;
/// Most open tails (SSE streams) over all clients; one more is answered 503 `tails-full`.
pub const TAILS_MAX: usize = 512;
/// Most open tails of one bearer token (all clients share one bucket when the server has no
/// token); one more is answered 429 `too-many-tails`.
pub const TAILS_PER_TOKEN_MAX: usize = 256;
/// Short store calls (a range read, a head, a tail's next 256 events) running at once on the
/// blocking pool; more wait for a turn. Verifies and folds are bounded apart, below.
pub use sessionlog_engine::log_service::STORE_CALLS_MAX;
/// Events a tail reads from the store at a time: what a tail that stops reading holds, with
/// its socket buffer, until [`WRITE_STALL_TIMEOUT`] drops it.
pub use sessionlog_engine::log_service::TAIL_READ_EVENTS_MAX;
/// Verifies running at once; more wait for a turn. Each holds one block of the session it
/// walks and that session's fold (the walk streams: `store::verify`). One, because a verify
/// keeps a core busy for seconds: with two on the 2-core machine, `/health` answered at a p99
/// of 182 ms under the load run (RELIABILITY.md, "Server load"), with one at 82 ms.
pub const VERIFIES_MAX: usize = 1;
/// Whole-session folds (`messages`, `surface`, `requests`) running at once; more wait.
pub const FOLDS_MAX: usize = 4;
/// Largest append body accepted, in bytes; a larger one is answered 413 `body-too-large`.
pub const BODY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Largest create body (one session header), in bytes.
pub const HEADER_BODY_BYTES_MAX: usize = 64 * 1024;
/// Bytes of request bodies held at once over all requests; a body waits for its share (its
/// `Content-Length`, or [`BODY_BYTES_MAX`] without one) within [`BODY_READ_TIMEOUT`].
pub const BODIES_IN_FLIGHT_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Estimated decoded size of one append's events, in bytes: a batch over it is answered 413
/// `decoded-too-large` before any event is decoded (a 15 MiB body of `[1,1,...]` used to
/// decode to about 1 GB). See [`DECODED_VALUE_BYTES`].
pub const DECODED_BYTES_MAX: u64 = 128 * 1024 * 1024;
/// What one JSON value (a number, a string, an array or object, a member) is counted to cost
/// once decoded, in bytes, on top of the row's text; measured at about 130 for a wide array
/// of small numbers.
pub const DECODED_VALUE_BYTES: u64 = budget::DECODED_BYTES_PER_VALUE_MAX;
/// Rows of `requests` in one answer by default, and at most (`?limit=`).
pub const REQUESTS_PAGE_ROWS_DEFAULT: u64 = 100;
pub const REQUESTS_PAGE_ROWS_MAX: u64 = 1000;
/// The same with `?bodies=true`: each row then carries its whole message list.
pub const REQUESTS_BODIES_PAGE_ROWS_DEFAULT: u64 = 8;
pub const REQUESTS_BODIES_PAGE_ROWS_MAX: u64 = 64;

/// The same with `?compact=true` (no bodies, nothing repeated per header: about 300 bytes a
/// row), what the console's requests chart pages through.
pub const REQUESTS_COMPACT_PAGE_ROWS_DEFAULT: u64 = 1000;
pub const REQUESTS_COMPACT_PAGE_ROWS_MAX: u64 = 10_000;
/// Rows of `tokens` in one answer by default, and at most (about 130 bytes a row).
pub const TOKENS_PAGE_ROWS_DEFAULT: u64 = 1000;
pub const TOKENS_PAGE_ROWS_MAX: u64 = 20_000;
/// Entries of `show` in one answer by default, and at most; each body is cut at
/// `?maxBodyBytes=` (default 2000, at most [`SHOW_BODY_BYTES_MAX`]).
pub const SHOW_PAGE_ENTRIES_DEFAULT: u64 = 200;
pub const SHOW_PAGE_ENTRIES_MAX: u64 = 2000;
pub const SHOW_BODY_BYTES_MAX: u64 = 1024 * 1024;

/// Rows of the sessions page in one answer by default, and at most (`?limit=`).
pub const AUDIT_PAGE_ROWS_DEFAULT: u64 = 50;
pub const AUDIT_PAGE_ROWS_MAX: u64 = 1000;
/// Longest `?filter=`, in bytes (a session id is at most 256).
pub const AUDIT_FILTER_BYTES_MAX: usize = 256;

/// Sessions whose compact requests and tokens (`requests?compact=true`, `tokens`) are kept
/// between pages; the least recently asked for is dropped first.
pub const DERIVED_SESSIONS_MAX: usize = 4;

/// The bounds a server enforces; [`Default`] is the constants above.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub write_stall_timeout: Duration,
    pub shutdown_grace: Duration,
    pub connections_max: usize,
    pub tails_max: usize,
    pub tails_per_token_max: usize,
    pub verifies_max: usize,
    pub folds_max: usize,
    pub body_bytes_max: usize,
    pub bodies_in_flight_bytes_max: usize,
    pub decoded_bytes_max: u64,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
            shutdown_grace: SHUTDOWN_GRACE,
            connections_max: CONNECTIONS_MAX,
            tails_max: TAILS_MAX,
            tails_per_token_max: TAILS_PER_TOKEN_MAX,
            verifies_max: VERIFIES_MAX,
            folds_max: FOLDS_MAX,
            body_bytes_max: BODY_BYTES_MAX,
            bodies_in_flight_bytes_max: BODIES_IN_FLIGHT_BYTES_MAX,
            decoded_bytes_max: DECODED_BYTES_MAX,
        }
    }
}

/// The estimated decoded size of one JSON text: its bytes plus [`DECODED_VALUE_BYTES`] per
/// value, its values counted by the reader's own pre-scan ([`budget::count_values`]: the
/// separators and openers outside strings, plus one), a slight overcount that needs no parse.
pub fn decoded_cost(text: &[u8]) -> u64 {
    let values = budget::count_values(text, u64::MAX).saturating_add(1);
    (text.len() as u64).saturating_add(values.saturating_mul(DECODED_VALUE_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the pre-scan counts values outside strings only, so text costs its length and a
    // wide array costs per element.
    #[test]
    fn decoded_cost_counts_values_outside_strings() {
        assert_eq!(decoded_cost(b"1"), 1 + DECODED_VALUE_BYTES);
        assert_eq!(decoded_cost(b"[1,1]"), 5 + 3 * DECODED_VALUE_BYTES);
        let text = br#"{"a":"x,y:[{\"z\",","b":[]}"#;
        assert_eq!(
            decoded_cost(text),
            text.len() as u64 + 6 * DECODED_VALUE_BYTES
        );
        let wide = format!("[{}1]", "1,".repeat(1000));
        assert_eq!(
            decoded_cost(wide.as_bytes()),
            wide.len() as u64 + 1002 * DECODED_VALUE_BYTES
        );
    }
}
