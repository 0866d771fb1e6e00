//! The CI-sized crash soak: the `crash` binary with a few kills (RELIABILITY.md has the long
//! run).

use std::process::Command;

// Goal: across a dozen SIGKILLs of concurrent appenders and an exporter, nothing acknowledged
// is lost, no partial batch is visible, verify passes, and every published export is whole.
// Method: run the soak binary (it checks all of that after each reopen) and require success.
#[test]
fn crash_soak_survives_kills() {
    let output = Command::new(env!("CARGO_BIN_EXE_crash"))
        .args(["--kills", "12", "--seed", "3"])
        .output()
        .expect("the crash binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("12 kills survived"), "{stdout}");
}
