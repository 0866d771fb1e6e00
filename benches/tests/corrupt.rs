//! The CI-sized corruption campaign: the `corrupt` binary with a few hundred trials
//! (RELIABILITY.md has the 10k run).

use std::process::Command;

// Goal: random bit flips, overwrites, truncations and zero-filled tails of a store file and of
// exported files are never undetected in checksummed data, never panic, and verify names the
// seq of every damaged live record; a flipped bit or overwritten run anywhere in a crash
// image's WAL never loses an acknowledged event silently.
// Method: run the campaign binary (it fails on any of those) and require success.
#[test]
fn corruption_campaign_detects_everything() {
    let output = Command::new(env!("CARGO_BIN_EXE_corrupt"))
        .args(["--trials", "120", "--seed", "5"])
        .output()
        .expect("the corrupt binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("store file: 120 trials") && stdout.contains(", 0 undetected, 0 panics"),
        "{stdout}"
    );
    assert!(
        stdout.contains("wal: 40 trials:")
            && stdout.contains(" 0 silent losses, 0 undetected, 0 panics"),
        "{stdout}"
    );
}
