//! SVG scaling curves of the comparison, drawn with plotters' SVG backend (text is written as
//! SVG `<text>`, so no font library is needed).

use std::path::Path;

use plotters::prelude::*;

use crate::compare::report::Cell;

/// One curve: a name and its `(x, y)` points.
type Series = (String, Vec<(f64, f64)>);

/// Writes every plot of `cells` into `dir`; returns the files written.
pub fn write_plots(dir: &Path, cells: &[Cell]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for batch_events in [1, 10, 100] {
        let cells: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.workload == "append" && c.param("batchEvents") == Some(batch_events))
            .collect();
        let name = format!("append-b{batch_events}.svg");
        let title = format!("durable append, batches of {batch_events}");
        if draw(
            dir,
            &name,
            &title,
            "concurrent sessions",
            "batches/s",
            series(&cells, "sessions"),
        )? {
            written.push(name);
        }
    }
    let per_scale = [
        ("import", "bulk import", "events/s"),
        ("cold-open-derive", "cold open + derive messages", "seconds"),
        ("derive-after-append", "derive after one append", "seconds"),
        ("point-in-time", "messages at a random seq", "seconds"),
        ("verify", "full verify", "MiB/s"),
        ("size", "size on disk", "bytes"),
        ("migrate-v0", "migrate V0 -> V3", "MiB/s"),
        ("migrate-v2", "migrate V2 -> V3", "MiB/s"),
    ];
    for (workload, title, unit) in per_scale {
        let cells: Vec<&Cell> = cells.iter().filter(|c| c.workload == workload).collect();
        let name = format!("{workload}.svg");
        if draw(dir, &name, title, "events", unit, series(&cells, "events"))? {
            written.push(name);
        }
    }
    Ok(written)
}

/// sessionlog's curve and each baseline's, over the cells' `x_param`.
fn series(cells: &[&Cell], x_param: &str) -> Vec<Series> {
    let Some(first) = cells.first() else {
        return Vec::new();
    };
    let point = |c: &Cell, y: f64| (c.param(x_param).unwrap_or(0) as f64, y);
    let mut out = vec![(
        "sessionlog".to_owned(),
        cells.iter().map(|c| point(c, c.ours.median())).collect(),
    )];
    for (name, _) in &first.baselines {
        let points = cells
            .iter()
            .filter_map(|c| {
                let (_, stat) = c.baselines.iter().find(|(n, _)| n == name)?;
                Some(point(c, stat.median()))
            })
            .collect();
        out.push(((*name).to_owned(), points));
    }
    out
}

/// Draws one log-log chart; false (and nothing written) when there is nothing to draw.
fn draw(
    dir: &Path,
    name: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: Vec<Series>,
) -> Result<bool, String> {
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, p)| p.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    if points.is_empty() {
        return Ok(false);
    }
    let (x_min, x_max) = bounds(points.iter().map(|p| p.0));
    let (y_min, y_max) = bounds(points.iter().map(|p| p.1));
    let path = dir.join(name);
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = SVGBackend::new(&path, (760, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(
            (x_min / 1.5..x_max * 1.5).log_scale(),
            (y_min / 2.0..y_max * 2.0).log_scale(),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.3e}"))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (idx, (label, points)) in series.into_iter().enumerate() {
        let color = Palette99::pick(idx).to_rgba();
        let points: Vec<(f64, f64)> = points
            .into_iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}
