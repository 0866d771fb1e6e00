//! One measured cell of the comparison (a workload at one scale), its ratios, and the
//! report as JSON and as markdown tables.

use serde_json::{json, Map, Value};

/// The repeated runs of one side of a cell.
#[derive(Debug, Clone)]
pub struct Stat {
    pub samples: Vec<f64>,
    /// Peak resident memory of the runs, in KiB (see [`crate::measure`]); 0 when unknown.
    pub peak_kib: u64,
}

impl Stat {
    pub fn new(samples: Vec<f64>, peak_kib: u64) -> Stat {
        assert!(!samples.is_empty(), "a stat needs samples");
        Stat { samples, peak_kib }
    }

    pub fn median(&self) -> f64 {
        crate::measure::median(&self.samples)
    }

    fn to_json(&self) -> Value {
        json!({"median": self.median(), "samples": self.samples, "peakKiB": self.peak_kib})
    }
}

/// A target on one cell: `ours` against `against`, as "ours is N x", at least `ratio_min`
/// (or, for sizes, at most `ratio_max`).
#[derive(Debug, Clone)]
pub struct Target {
    pub against: &'static str,
    pub bound: Bound,
}

#[derive(Debug, Clone, Copy)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

/// One workload at one scale: sessionlog and every baseline, measured in the same run.
#[derive(Debug, Clone)]
pub struct Cell {
    pub workload: &'static str,
    /// What varies between the cells of a workload (`events`, `batchEvents`, `sessions`).
    pub params: Map<String, Value>,
    pub unit: &'static str,
    /// Rates are better higher; times and sizes lower. Ratios always read "ours is N x":
    /// above 1 is better for ours.
    pub higher_is_better: bool,
    pub ours: Stat,
    pub baselines: Vec<(&'static str, Stat)>,
    pub targets: Vec<Target>,
    pub note: String,
}

impl Cell {
    /// Ours against `baseline`: above 1 means ours is better (faster, or a higher rate).
    /// Sizes are the plain quotient ours / baseline (lower is better) so that the size target
    /// reads as written ("<= 1.2x").
    pub fn ratio(&self, baseline: &str) -> Option<f64> {
        let (_, stat) = self.baselines.iter().find(|(n, _)| *n == baseline)?;
        let (ours, theirs) = (self.ours.median(), stat.median());
        Some(if self.higher_is_better || self.unit == "bytes" {
            ours / theirs
        } else {
            theirs / ours
        })
    }

    pub fn param(&self, name: &str) -> Option<u64> {
        self.params.get(name).and_then(Value::as_u64)
    }

    fn target_json(&self, target: &Target) -> Value {
        let ratio = self.ratio(target.against);
        let (bound, met) = match target.bound {
            Bound::AtLeast(min) => (format!(">= {min}x"), ratio.map(|r| r >= min)),
            Bound::AtMost(max) => (format!("<= {max}x"), ratio.map(|r| r <= max)),
        };
        json!({"against": target.against, "bound": bound, "ratio": ratio, "met": met})
    }

    pub fn to_json(&self) -> Value {
        let baselines: Map<String, Value> = self
            .baselines
            .iter()
            .map(|(name, stat)| ((*name).to_owned(), stat.to_json()))
            .collect();
        let ratios: Map<String, Value> = self
            .baselines
            .iter()
            .map(|(name, _)| ((*name).to_owned(), json!(self.ratio(name))))
            .collect();
        let targets: Vec<Value> = self.targets.iter().map(|t| self.target_json(t)).collect();
        json!({
            "workload": self.workload,
            "params": self.params,
            "unit": self.unit,
            "higherIsBetter": self.higher_is_better,
            "ours": self.ours.to_json(),
            "baselines": baselines,
            "ratios": ratios,
            "targets": targets,
            "note": self.note,
        })
    }
}

/// Builds a params map from `(name, value)` pairs.
pub fn params(pairs: &[(&str, u64)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect()
}

/// Targets that span cells (flatness across scales, group commit across session counts).
#[derive(Debug, Clone)]
pub struct Summary {
    pub name: &'static str,
    pub value: Option<f64>,
    pub bound: Bound,
    pub note: String,
}

impl Summary {
    pub fn met(&self) -> Option<bool> {
        self.value.map(|v| match self.bound {
            Bound::AtLeast(min) => v >= min,
            Bound::AtMost(max) => v <= max,
        })
    }
}

/// Markdown: one table per workload, then the cross-cell targets.
pub fn markdown(cells: &[Cell], summaries: &[Summary]) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = cells.iter().map(|c| c.workload).collect();
    workloads.dedup();
    for workload in workloads {
        let rows: Vec<&Cell> = cells.iter().filter(|c| c.workload == workload).collect();
        let names: Vec<&str> = rows[0].baselines.iter().map(|(n, _)| *n).collect();
        out.push_str(&format!(
            "\n### {workload} ({})\n\n| params | sessionlog |",
            rows[0].unit
        ));
        for name in &names {
            out.push_str(&format!(" {name} | ratio |"));
        }
        out.push_str(" peak RSS (ours) | targets |\n|---|---|");
        out.push_str(&"---|---|".repeat(names.len()));
        out.push_str("---|---|\n");
        for cell in rows {
            let params: Vec<String> = cell
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.push_str(&format!(
                "| {} | {} |",
                params.join(" "),
                number(cell.ours.median())
            ));
            for name in &names {
                let stat = cell
                    .baselines
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, s)| s);
                let ratio = cell
                    .ratio(name)
                    .map_or("-".to_owned(), |r| format!("{r:.2}x"));
                let value = stat.map_or("-".to_owned(), |s| number(s.median()));
                out.push_str(&format!(" {value} | {ratio} |"));
            }
            let targets: Vec<String> = cell
                .targets
                .iter()
                .map(|t| {
                    let v = cell.target_json(t);
                    let met = match v["met"].as_bool() {
                        Some(true) => "met",
                        Some(false) => "**missed**",
                        None => "n/a",
                    };
                    format!(
                        "{} vs {}: {met}",
                        v["bound"].as_str().unwrap_or(""),
                        t.against
                    )
                })
                .collect();
            out.push_str(&format!(
                " {} MiB | {} |\n",
                cell.ours.peak_kib / 1024,
                targets.join("; ")
            ));
        }
    }
    out.push_str("\n### cross-cell targets\n\n| target | value | bound | met | note |\n|---|---|---|---|---|\n");
    for s in summaries {
        let bound = match s.bound {
            Bound::AtLeast(min) => format!(">= {min}"),
            Bound::AtMost(max) => format!("<= {max}"),
        };
        let value = s.value.map_or("-".to_owned(), |v| format!("{v:.2}"));
        let met = match s.met() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        out.push_str(&format!(
            "| {} | {value} | {bound} | {met} | {} |\n",
            s.name, s.note
        ));
    }
    out
}

fn number(value: f64) -> String {
    if value >= 1000.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else if value >= 0.001 || value == 0.0 {
        format!("{value:.5}")
    } else {
        // Three significant digits for the microsecond cells (derive after one append).
        format!("{value:.2e}")
    }
}

/// The whole report as one JSON document.
pub fn json_document(meta: Value, cells: &[Cell], summaries: &[Summary]) -> Value {
    let summaries: Vec<Value> = summaries
        .iter()
        .map(|s| {
            let bound = match s.bound {
                Bound::AtLeast(min) => format!(">= {min}"),
                Bound::AtMost(max) => format!("<= {max}"),
            };
            json!({"name": s.name, "value": s.value, "bound": bound, "met": s.met(), "note": s.note})
        })
        .collect();
    json!({
        "meta": meta,
        "workloads": cells.iter().map(Cell::to_json).collect::<Vec<_>>(),
        "summaries": summaries,
    })
}
