//! The migration-edge and surface-operation fuzz targets' bodies (`fuzz/src/lib.rs`, included
//! here by path) run as ordinary tests over the committed seeds (`fuzz/seeds/`) and every
//! truncation and single-bit flip of each, so that the CI gate runs them without the nightly
//! fuzz build. A panic (or a model mismatch in `surface_ops`) fails the test.

use std::path::PathBuf;

#[path = "../../../fuzz/src/lib.rs"]
mod targets;

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "{}: no seeds", dir.display());
    out
}

/// Every seed, up to `cuts` of its truncations, and single-bit flips at as many positions.
fn variants(seed: &[u8], cuts: usize) -> Vec<Vec<u8>> {
    let step = (seed.len() / cuts).max(1);
    let mut out = vec![seed.to_vec()];
    for cut in (0..seed.len()).step_by(step) {
        out.push(seed[..cut].to_vec());
        let mut flipped = seed.to_vec();
        flipped[cut] ^= 1 << (cut % 8);
        out.push(flipped);
    }
    out
}

// Goal: each migration edge survives its seeds and their damaged variants without a panic.
#[test]
fn migration_edges_over_their_seeds() {
    let edges = [
        "migrate_v0_to_v1",
        "migrate_v1_to_v2",
        "migrate_v2_to_v3",
        "migrate_v3_to_v4",
    ];
    let mut n_inputs = 0;
    for (version, name) in edges.iter().enumerate() {
        for seed in seeds(name) {
            for input in variants(&seed, 128) {
                targets::migrate_edge(version, &input);
                n_inputs += 1;
            }
        }
    }
    assert!(n_inputs > 500, "{n_inputs} inputs");
}

// Goal: the V4 reader survives its seeds (a generated V4 log and one of every V4 shape) and
// their damaged variants without a panic.
#[test]
fn v4_reader_over_its_seeds() {
    let mut n_inputs = 0;
    for seed in seeds("rows_v4") {
        for input in variants(&seed, 256) {
            targets::read_v4(&input);
            n_inputs += 1;
        }
    }
    assert!(n_inputs > 500, "{n_inputs} inputs");
}

// Goal: the surface-operation model agrees with the strict reader on every seed and every
// variant: the same refusals, and the same live nodes.
#[test]
fn surface_ops_over_their_seeds() {
    let mut n_inputs = 0;
    for seed in seeds("surface_ops") {
        for input in variants(&seed, 512) {
            targets::surface_ops(&input);
            n_inputs += 1;
        }
    }
    assert!(n_inputs > 50, "{n_inputs} inputs");
    assert_eq!(
        targets::decode_ops(&[2, 0, 255, 1]),
        vec![targets::Op::Replace(0, 255)]
    );
}
