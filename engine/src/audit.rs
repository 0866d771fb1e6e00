//! `audit`: one row per session file (or stored session): is it intact, what did the model
//! see, and how much of each request's prefix could the provider cache reuse.
//!
//! A file is read strictly and streamed through the migration chain (any version), so the
//! integrity status covers decoding, every admission rule, and the migration with its proof;
//! the V3 events that come out feed the request analysis and the counters, one batch at a time,
//! so memory stays bounded. A stored session (of any backend) is verified and then replayed
//! into the same counters, a range at a time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sessionlog_format::rules::RuleContext;
use sessionlog_format::{
    Event, EventData, FormatVersion, ReadOptions, Recovery, SnapshotMode, SurfaceOp,
};

use crate::error::Error;
use crate::files::open_log;
use crate::log_store::LogStore;
use crate::migrate::Sink;
use crate::replay::{Flow, Projection, SessionSource};
use crate::requests::{RequestAnalyzer, RequestOptions, RequestSummary};

/// Whether a session is intact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    Ok,
    /// The first fault: the file could not be read, broke a rule, or its store records failed
    /// verification. `line` for files (the header is line 1), `seq` when known.
    Corrupt {
        line: Option<u64>,
        seq: Option<u64>,
        message: String,
    },
    /// The file is intact as written but its migration to V3 was refused.
    Refused {
        line: Option<u64>,
        message: String,
    },
}

impl Integrity {
    pub fn is_ok(&self) -> bool {
        matches!(self, Integrity::Ok)
    }

    /// `ok`, `corrupt` or `refused`.
    pub fn name(&self) -> &'static str {
        match self {
            Integrity::Ok => "ok",
            Integrity::Corrupt { .. } => "corrupt",
            Integrity::Refused { .. } => "refused",
        }
    }
}

/// One audited session.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// The file, for a file; rows are keyed by it because ids repeat across files.
    pub path: Option<PathBuf>,
    /// The file's path relative to the walked root it was found under (the file name for a
    /// file given directly).
    pub relative: Option<PathBuf>,
    pub session: Option<String>,
    /// The stored format version (3 for a stored session).
    pub version: Option<u64>,
    /// Events as stored (before migration).
    pub events: u64,
    pub turns: u64,
    /// The request analysis; default (zero) when the session could not be read through.
    pub requests: RequestSummary,
    /// System-prompt versions: the first prompt, in-history appends and head rewrites.
    pub prompt_versions: u64,
    pub compactions: u64,
    pub integrity: Integrity,
}

/// The session log files under `path` (a file is itself), in path order, each with its path
/// relative to `path`, and what the walk skipped ([`crate::walk`]).
pub fn session_files(path: &Path) -> Result<crate::walk::Walk, Error> {
    crate::walk::walk(path)
}

/// Counts what a row shows, over V3 events, and feeds the request analysis.
struct Counter {
    analyzer: RequestAnalyzer,
    turns: u64,
    compactions: u64,
    system_nodes: u64,
    /// The first analysis fault (an event the fold refused), if any.
    fault: Option<(u64, String)>,
}

impl Counter {
    fn new(session: &str, ctx: RuleContext) -> Counter {
        Counter {
            analyzer: RequestAnalyzer::new(session, ctx, RequestOptions::default()),
            turns: 0,
            compactions: 0,
            system_nodes: 0,
            fault: None,
        }
    }

    fn event(&mut self, event: &Event) {
        match &event.data {
            EventData::TurnStart(_) => self.turns += 1,
            EventData::CompactionStart(_) => self.compactions += 1,
            EventData::SystemMessage(data) => {
                // Every non-empty prompt written is a version: the first, each in-history
                // append, each head rewrite. A clear (empty node) is not.
                let written = matches!(
                    event.surface_op,
                    Some(SurfaceOp::Append | SurfaceOp::Replace { .. })
                );
                if written && !data.message.content.is_empty() {
                    self.system_nodes += 1;
                }
            }
            _ => {}
        }
        if self.fault.is_none() {
            if let Err(violation) = self.analyzer.push(event) {
                self.fault = Some((event.seq, violation.to_string()));
            }
        }
    }
}

/// A stored session streams into the counter (which records a fault rather than refuse).
impl Projection for Counter {
    type Error = std::convert::Infallible;

    fn push(&mut self, event: Arc<Event>) -> Result<Flow, Self::Error> {
        self.event(&event);
        Ok(Flow::Continue)
    }
}

impl Sink for Counter {
    fn take(&mut self, events: &mut Vec<Event>, _path: &Path) -> Result<(), Error> {
        for event in events.drain(..) {
            self.event(&event);
        }
        Ok(())
    }
}

/// Audits one file of any version; `relative` is how the row names it.
pub fn audit_file(path: &Path, relative: &Path, snapshot: SnapshotMode) -> AuditRow {
    let mut row = AuditRow {
        path: Some(path.to_owned()),
        relative: Some(relative.to_owned()),
        session: None,
        version: None,
        events: 0,
        turns: 0,
        requests: RequestSummary::default(),
        prompt_versions: 0,
        compactions: 0,
        integrity: Integrity::Ok,
    };
    let options = ReadOptions {
        recovery: Recovery::Strict,
        snapshot,
    };
    let reader = match open_log(path, options) {
        Ok(reader) => reader,
        Err(error) => {
            row.integrity = corrupt(error);
            return row;
        }
    };
    row.version = Some(reader.version().number());
    row.session = Some(reader.header().id.clone());
    let read_snapshot = reader.snapshot();
    let streamed = crate::migrate::stream(reader, path, true, &mut |_| {}, |header| {
        let version = header.version.and_then(FormatVersion::from_number);
        let ctx = RuleContext {
            version: version.unwrap_or(FormatVersion::V3),
            snapshot: read_snapshot,
        };
        Ok(Counter::new(&header.id, ctx))
    });
    match streamed {
        Ok(Ok((summary, counter))) => {
            row.events = summary.source_events;
            fill(&mut row, counter);
        }
        Ok(Err(refused)) => {
            row.integrity = Integrity::Refused {
                line: refused.line,
                message: refused.reason,
            };
        }
        Err(error) => row.integrity = corrupt(error),
    }
    row
}

/// Audits every session of a store (or the named ones): verify, then the analysis.
pub fn audit_store(store: &dyn LogStore, sessions: &[String]) -> Result<Vec<AuditRow>, Error> {
    let ids = if sessions.is_empty() {
        store.sessions()?
    } else {
        sessions.to_vec()
    };
    ids.iter().map(|id| audit_stored(store, id)).collect()
}

/// Audits one stored session: verify, then (when its records are intact) the analysis.
pub fn audit_stored(store: &dyn LogStore, id: &str) -> Result<AuditRow, Error> {
    let report = store.verify(&[id.to_owned()])?;
    let mut row = AuditRow {
        path: None,
        relative: None,
        session: Some(id.to_owned()),
        version: Some(3),
        events: report.first().map_or(0, |r| r.events),
        turns: 0,
        requests: RequestSummary::default(),
        prompt_versions: 0,
        compactions: 0,
        integrity: Integrity::Ok,
    };
    if let Some(fault) = report.first().and_then(|r| r.faults.first()) {
        row.integrity = Integrity::Corrupt {
            line: None,
            seq: fault.seq,
            message: fault.message.clone(),
        };
        return Ok(row);
    }
    let source = SessionSource::Store { store, session: id };
    let counter = source.replay(|opening| Counter::new(opening.session(), opening.rules()))?;
    fill(&mut row, counter);
    Ok(row)
}

fn fill(row: &mut AuditRow, counter: Counter) {
    row.turns = counter.turns;
    row.compactions = counter.compactions;
    row.prompt_versions = counter.system_nodes;
    if let Some((seq, message)) = counter.fault.clone() {
        row.integrity = Integrity::Corrupt {
            line: None,
            seq: Some(seq),
            message,
        };
    }
    let report = counter.analyzer.finish();
    row.requests = report.summary;
}

fn corrupt(error: Error) -> Integrity {
    match error {
        Error::Read { source, .. } => match source.fault() {
            Some(fault) => Integrity::Corrupt {
                line: Some(fault.line),
                seq: fault.seq,
                message: fault.message.clone(),
            },
            None => Integrity::Corrupt {
                line: Some(1),
                seq: None,
                message: source.to_string(),
            },
        },
        other => Integrity::Corrupt {
            line: None,
            seq: None,
            message: other.to_string(),
        },
    }
}

/// Totals over audited rows.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AuditTotals {
    pub sessions: u64,
    pub ok: u64,
    pub corrupt: u64,
    pub refused: u64,
    pub events: u64,
    pub requests: u64,
    /// Predicted reuse over all requests: reused estimated tokens / estimated tokens.
    pub predicted_reuse_ratio: f64,
}

/// Sums `rows`.
pub fn totals(rows: &[AuditRow]) -> AuditTotals {
    let mut totals = AuditTotals::default();
    let (mut reused, mut estimated) = (0u64, 0u64);
    for row in rows {
        totals.sessions += 1;
        match row.integrity {
            Integrity::Ok => totals.ok += 1,
            Integrity::Corrupt { .. } => totals.corrupt += 1,
            Integrity::Refused { .. } => totals.refused += 1,
        }
        totals.events += row.events;
        totals.requests += row.requests.requests;
        reused += row.requests.predicted_reused_tokens;
        estimated += row.requests.estimated_tokens;
    }
    if estimated > 0 {
        totals.predicted_reuse_ratio = reused as f64 / estimated as f64;
    }
    totals
}
