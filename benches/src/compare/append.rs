//! Durable append: batches of B events from S concurrent sessions, every store side by side.
//!
//! Each round hands every store the same `batches_per_round` batches of each session; the
//! stores take turns within a round (the order rotates per round) so machine noise hits all
//! alike, and the cells of one batch size take their rounds in turns (`append_cells`), since
//! group commit compares them with each other. sessionlog appends through `Store::append` for
//! one session and through `engine::log_service::LogService` (group commit: one WAL fsync per
//! drained group) for more; every baseline runs one thread per session, each fsyncing (or
//! committing) its own batches. sessionlog's turn ends when its sealer has done the work the
//! turn's appends made due (`Store::settle`, timed with the turn): the blocks a turn fills are
//! sealed in its own time, never in the next side's or the next cell's.

use std::path::Path;
use std::sync::Arc;

use sessionlog_engine::log_service::LogService;
use sessionlog_engine::store::Store;
use sessionlog_format::Event;

use crate::backends::{Writer, BASELINES};
use crate::compare::report::{params, Bound, Cell, Stat, Target};
use crate::data::session_events;
use crate::measure::measure;

/// The shape of one append cell.
#[derive(Debug, Clone, Copy)]
pub struct AppendShape {
    pub batch_events: usize,
    pub n_sessions: usize,
    pub rounds: usize,
    pub batches_per_round: usize,
}

/// Runs the append cells of `shapes` under `dir` (one subfolder and one store per side
/// each), their rounds in turns: round `r` of every cell before round `r + 1` of any. The
/// cells of one batch size (1, 4 and 16 sessions) are compared with each other (group commit,
/// a ratio of two cells), so they are measured over the same minutes: a disk that slows for a
/// while slows all of them alike, as the stores within a cell already take turns.
pub fn append_cells(dir: &Path, shapes: &[AppendShape]) -> Vec<Cell> {
    let mut runs: Vec<AppendRun> = shapes
        .iter()
        .map(|shape| {
            let sub = dir.join(format!(
                "append-{}-{}",
                shape.batch_events, shape.n_sessions
            ));
            AppendRun::new(&sub, *shape)
        })
        .collect();
    let n_rounds = shapes.iter().map(|s| s.rounds).max().unwrap_or(0);
    for round in 0..n_rounds {
        for run in runs.iter_mut().filter(|run| round < run.shape.rounds) {
            run.round(round);
        }
    }
    runs.into_iter().map(AppendRun::finish).collect()
}

/// One append cell: its sessions' batches, one store per side, and the samples so far.
struct AppendRun {
    dir: std::path::PathBuf,
    shape: AppendShape,
    batches: Vec<Vec<Vec<Event>>>,
    ours: Ours,
    writers: Vec<Writer>,
    samples: Vec<Vec<f64>>,
    peaks: Vec<u64>,
}

impl AppendRun {
    /// The cell's stores under `dir`, each with its sessions created.
    fn new(dir: &Path, shape: AppendShape) -> AppendRun {
        let batches_total = shape.rounds * shape.batches_per_round;
        let n_events = (batches_total * shape.batch_events) as u64;
        let sessions: Vec<_> = (0..shape.n_sessions)
            .map(|s| session_events(100 + s as u64, n_events))
            .collect();
        let headers: Vec<_> = sessions.iter().map(|(h, _)| h.clone()).collect();
        let batches: Vec<Vec<Vec<Event>>> = sessions
            .iter()
            .map(|(_, events)| {
                events
                    .chunks(shape.batch_events)
                    .map(<[Event]>::to_vec)
                    .collect()
            })
            .collect();
        drop(sessions);
        let ours = Ours::create(&dir.join("sessionlog"), &headers);
        let writers: Vec<Writer> = BASELINES
            .iter()
            .map(|b| {
                let sub = dir.join(b.name());
                std::fs::create_dir_all(&sub).expect("a baseline directory");
                Writer::create(*b, &sub, &headers)
            })
            .collect();
        let n_sides = 1 + writers.len();
        AppendRun {
            dir: dir.to_owned(),
            shape,
            batches,
            ours,
            writers,
            samples: vec![Vec::new(); n_sides],
            peaks: vec![0; n_sides],
        }
    }

    /// Round `round`: every side appends the round's batches of every session, the sides
    /// taking turns in an order that rotates per round.
    fn round(&mut self, round: usize) {
        let shape = self.shape;
        let n_sides = 1 + self.writers.len();
        let range = round * shape.batches_per_round..(round + 1) * shape.batches_per_round;
        let slices: Vec<&[Vec<Event>]> = self.batches.iter().map(|b| &b[range.clone()]).collect();
        for turn in 0..n_sides {
            let side = (turn + round) % n_sides;
            let run = if side == 0 {
                let owned: Vec<Vec<Vec<Event>>> = slices.iter().map(|s| s.to_vec()).collect();
                measure(|| self.ours.append_round(owned))
            } else {
                measure(|| baseline_round(&self.writers[side - 1], &slices))
            };
            let n_batches = (shape.n_sessions * shape.batches_per_round) as f64;
            self.samples[side].push(n_batches / run.seconds);
            // The turn's own memory: the process also holds every round's batches (and the
            // other sides' stores), so its whole high-water mark would be the harness's.
            let grown = run.peak_kib.saturating_sub(run.rss_before_kib);
            self.peaks[side] = self.peaks[side].max(grown);
        }
    }

    /// The cell; its stores are closed and their folder removed.
    fn finish(self) -> Cell {
        let AppendRun {
            dir,
            shape,
            samples,
            peaks,
            ours,
            writers,
            batches,
        } = self;
        drop((ours, writers, batches));
        super::remove(&dir);
        let stat = |side: usize| Stat::new(samples[side].clone(), peaks[side]);
        let targets = append_targets(shape);
        Cell {
            workload: "append",
            params: params(&[
                ("batchEvents", shape.batch_events as u64),
                ("sessions", shape.n_sessions as u64),
            ]),
            unit: "batches/s",
            higher_is_better: true,
            ours: stat(0),
            baselines: BASELINES
                .iter()
                .enumerate()
                .map(|(i, b)| (b.name(), stat(i + 1)))
                .collect(),
            targets,
            note: format!(
                "median of {} rounds of {} batches per session, taken in turns with the other \
                 session counts of this batch size; all sessions' batches/s; peak RSS is \
                 the most resident memory grew during one of the side's turns",
                shape.rounds, shape.batches_per_round
            ),
        }
    }
}

/// The targets of an append cell: issue #12's (at least 0.8x JSONL + fsync, and for batches
/// of 10 and 100 at least 1x SQLite), raised by #23 where it names the cell: one session in
/// batches of 100 at least 1x JSONL, and 4 and 16 sessions in batches of 10 and 100 at least
/// 1.5x SQLite.
fn append_targets(shape: AppendShape) -> Vec<Target> {
    let target = |against, min| Target {
        against,
        bound: Bound::AtLeast(min),
    };
    let jsonl = if shape.batch_events >= 100 && shape.n_sessions == 1 {
        1.0
    } else {
        0.8
    };
    if shape.batch_events == 1 {
        return vec![target("jsonl", jsonl)];
    }
    let sqlite = if shape.n_sessions > 1 { 1.5 } else { 1.0 };
    vec![target("sqlite", sqlite), target("jsonl", jsonl)]
}

fn baseline_round(writer: &Writer, sessions: &[&[Vec<Event>]]) {
    std::thread::scope(|scope| {
        for (idx, batches) in sessions.iter().enumerate() {
            scope.spawn(move || {
                let mut scratch = Vec::new();
                for batch in batches.iter() {
                    writer.append(idx, batch, &mut scratch);
                }
            });
        }
    });
}

/// sessionlog: the store, and for concurrent sessions its service (group commit on its writer thread) on a runtime.
struct Ours {
    store: Arc<Store>,
    runtime: tokio::runtime::Runtime,
    handle: LogService,
    ids: Vec<String>,
    next_seqs: std::sync::Mutex<Vec<u64>>,
}

impl Ours {
    fn create(dir: &Path, headers: &[sessionlog_format::SessionHeader]) -> Ours {
        std::fs::create_dir_all(dir).expect("our directory");
        let store = Arc::new(Store::open(&dir.join("store.redb")).expect("the store"));
        for header in headers {
            store.create_session(header).expect("a session");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let handle = runtime.block_on(async { LogService::new(Arc::clone(&store) as _) });
        Ours {
            store,
            runtime,
            handle,
            ids: headers.iter().map(|h| h.id.clone()).collect(),
            next_seqs: std::sync::Mutex::new(vec![0; headers.len()]),
        }
    }

    fn append_round(&self, sessions: Vec<Vec<Vec<Event>>>) {
        let mut next_seqs = self.next_seqs.lock().expect("no panics");
        if sessions.len() == 1 {
            let mut next = next_seqs[0];
            for batch in sessions.into_iter().flatten() {
                let n = batch.len() as u64;
                self.store
                    .append(&self.ids[0], next, batch)
                    .expect("an append");
                next += n;
            }
            next_seqs[0] = next;
            self.store.settle();
            return;
        }
        let tasks: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(idx, batches)| {
                let handle = self.handle.clone();
                let id = self.ids[idx].clone();
                let mut next = next_seqs[idx];
                self.runtime.spawn(async move {
                    for batch in batches {
                        let n = batch.len() as u64;
                        handle
                            .append_events(&id, next, batch)
                            .await
                            .expect("an append");
                        next += n;
                    }
                    next
                })
            })
            .collect();
        for (idx, task) in tasks.into_iter().enumerate() {
            next_seqs[idx] = self.runtime.block_on(task).expect("the task");
        }
        self.store.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(batch_events: usize, n_sessions: usize) -> Vec<(&'static str, f64)> {
        let shape = AppendShape {
            batch_events,
            n_sessions,
            rounds: 1,
            batches_per_round: 1,
        };
        append_targets(shape)
            .into_iter()
            .map(|t| match t.bound {
                Bound::AtLeast(min) => (t.against, min),
                Bound::AtMost(_) => panic!("an append target is a floor"),
            })
            .collect()
    }

    #[test]
    fn the_append_targets_are_issue_23s_where_it_names_the_cell() {
        assert_eq!(bounds(1, 16), [("jsonl", 0.8)]);
        assert_eq!(bounds(10, 1), [("sqlite", 1.0), ("jsonl", 0.8)]);
        assert_eq!(bounds(100, 1), [("sqlite", 1.0), ("jsonl", 1.0)]);
        for sessions in [4, 16] {
            for batch in [10, 100] {
                assert_eq!(bounds(batch, sessions), [("sqlite", 1.5), ("jsonl", 0.8)]);
            }
        }
    }
}
