//! The CI smoke run of the comparison harness: `compare --quick --json` completes and prints
//! one JSON document with every workload. No timing is asserted (performance lives in
//! BENCHMARKS.md, not in tests).

use std::collections::BTreeSet;
use std::process::Command;

use sessionlog_benches::compare::WORKLOADS;

// Goal: the harness runs every workload end to end against every store and reports it.
// Method: run the quick path in a temporary directory, parse stdout, and check that each
// workload is present with sessionlog's median and a ratio to each of its baselines.
#[test]
fn compare_quick_prints_every_workload_as_json() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = Command::new(env!("CARGO_BIN_EXE_compare"))
        .args(["--quick", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .expect("the compare binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let document: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    let workloads = document["workloads"].as_array().expect("a workloads array");
    let present: BTreeSet<&str> = workloads
        .iter()
        .filter_map(|w| w["workload"].as_str())
        .collect();
    let expected: BTreeSet<&str> = WORKLOADS.into_iter().collect();
    assert_eq!(present, expected);
    for workload in workloads {
        assert!(workload["ours"]["median"].is_number(), "{workload}");
        let baselines = workload["baselines"].as_object().expect("baselines");
        let ratios = workload["ratios"].as_object().expect("ratios");
        assert!(!baselines.is_empty(), "{workload}");
        let names: BTreeSet<&String> = baselines.keys().collect();
        assert_eq!(names, ratios.keys().collect::<BTreeSet<_>>(), "{workload}");
    }
    let append_cells = workloads
        .iter()
        .filter(|w| w["workload"] == "append")
        .count();
    assert_eq!(
        append_cells, 9,
        "batches of 1, 10, 100 from 1, 4, 16 sessions"
    );
    assert!(document["summaries"].is_array());
    // The work directory is left empty.
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("the dir").collect();
    assert!(left.is_empty(), "{left:?}");
}
