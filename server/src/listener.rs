//! The accept loop: HTTP/1 connections served by hyper with the header timeout, a cap on open
//! connections, a write-stall timeout, and a shutdown bounded by [`ServerLimits::shutdown_grace`].
//!
//! `axum::serve` has no header timeout, no connection cap and a graceful shutdown that waits
//! forever for a client that stopped reading, so connections are served here with hyper's own
//! builder (hyper and hyper-util, which axum already uses, rather than hand-written HTTP).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use super::limits::ServerLimits;

/// Pause after a failed accept (out of file descriptors, say), so the loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// What a connection over the cap is answered before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\nconnection: close\r\ncontent-length: 80\r\n\r\n\
{\"error\":\"too-many-connections\",\"message\":\"the server has too many connections\"}";

/// Serves `app` on `listener` until `shutdown` resolves; then stops accepting, calls
/// `on_shutdown` (which ends the tails), lets requests in flight finish for at most the
/// shutdown grace, and drops the connections still open.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: &ServerLimits,
    shutdown: impl Future<Output = ()>,
    on_shutdown: impl FnOnce(),
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Best effort: the answer fits any socket buffer; the close is what matters.
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            tracing::warn!("connection refused: too many connections");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(StallGuard::new(stream, limits.write_stall_timeout));
        let service = TowerToHyperService::new(app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        let mut stopping = stopping.clone();
        connections.spawn(async move {
            let _slot = slot;
            let connection = builder.serve_connection(io, service);
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = async {
                    let _ = stopping.wait_for(|stop| *stop).await;
                } => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection closed");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: finishing requests in flight");
    on_shutdown();
    stop.send_replace(true);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "shutdown grace over: dropping the connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// A stream whose writes fail with `TimedOut` when they make no progress for `stall`: a
/// client that stops reading cannot hold a connection (and what it buffers) forever.
struct StallGuard {
    stream: TcpStream,
    stall: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    fn new(stream: TcpStream, stall: Duration) -> StallGuard {
        StallGuard {
            stream,
            stall,
            deadline: None,
        }
    }

    /// Clears the deadline on progress; on `Pending`, arms it and fails once it passes.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.deadline = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let stall = self.stall;
                let deadline = self
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}
