//! Output conventions shared by the commands: exit codes, JSON documents, progress.

use std::io::{self, Write};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Everything was valid, or the work is done.
pub(crate) const EXIT_OK: u8 = 0;
/// A fault was found: an invalid file, a refusal, a failed verify, or a conflict.
pub(crate) const EXIT_FAULT: u8 = 1;
/// A usage error: bad arguments, or a read command's `--db` naming no store.
pub(crate) const EXIT_USAGE: u8 = 2;

/// The exit code of a command's error: a store location that names no store (a missing
/// store for a read, an unsupported scheme, a missing directory) is a usage error,
/// everything else a fault.
pub(crate) fn exit_code_of(error: &anyhow::Error) -> u8 {
    use sessionlog_engine::store::StoreError;
    let usage = |store: &StoreError| {
        matches!(
            store,
            StoreError::Missing { .. } | StoreError::BadLocation { .. }
        )
    };
    let is_usage = error.chain().any(|cause| {
        cause.downcast_ref::<StoreError>().is_some_and(usage)
            || matches!(
                cause.downcast_ref::<sessionlog_engine::Error>(),
                Some(sessionlog_engine::Error::Store(store)) if usage(store)
            )
    });
    if is_usage {
        EXIT_USAGE
    } else {
        EXIT_FAULT
    }
}

/// Writes one JSON document and a newline to stdout.
pub(crate) fn print_json(document: &serde_json::Value) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, document)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

/// A progress bar on stderr, drawn only when stderr is a terminal and `--quiet` is off.
pub(crate) fn progress(total: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} ({per_sec}, eta {eta})")
        .expect("the progress template is a valid constant");
    bar.set_style(style);
    bar.set_message(what.to_owned());
    bar
}

/// An error and its causes on one line, `a: b: c`, leaving out a cause whose text the
/// message before it already contains (engine errors name their I/O cause themselves).
pub(crate) fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// A closed stdout (`sessionlog cat | head`) is success, not an error.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Notes on stderr for what a walk skipped (unless `--quiet`), one line each.
pub(crate) fn note_skipped(walk: &sessionlog_engine::walk::Walk, quiet: bool) {
    if quiet {
        return;
    }
    for skipped in &walk.skipped {
        let kind = if skipped.reason.is_fault() {
            "error"
        } else {
            "note"
        };
        eprintln!(
            "{}: {kind}: skipped: {}",
            skipped.path.display(),
            skipped.reason
        );
    }
}

/// What a walk skipped, for `--json`: `[{path, reason, message}]`.
pub(crate) fn skipped_json(walk: &sessionlog_engine::walk::Walk) -> serde_json::Value {
    walk.skipped
        .iter()
        .map(|s| {
            serde_json::json!({
                "path": s.path.display().to_string(),
                "reason": s.reason.name(),
                "message": s.reason.to_string(),
            })
        })
        .collect()
}

/// Lower-case hex of a hash, for `headHash`.
pub(crate) use sessionlog_engine::documents::hex;
