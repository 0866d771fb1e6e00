//! The whole migration chain on dsh's own V0 recordings: open, migrate, import, verify.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::Value;
use sessionlog_format::fold::SessionFold;
use sessionlog_format::rules::RuleContext;
use sessionlog_format::{read_log, ContentBlock, EventData, FormatVersion, Message, ReadOptions};
use sessionlog_format::{SnapshotMode, Violation};
use sessionlog_store::migrate::{migrate_file, read_as_v3, MigrateOptions, Outcome};
use sessionlog_store::transfer::import_file;

use crate::support::*;

fn fixtures_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/dsh");
    if dir.join("MANIFEST.tsv").is_file() {
        return Some(dir);
    }
    eprintln!(
        "skipping: {} is missing (the dsh fixtures live beside the checkout)",
        dir.display()
    );
    None
}

fn accepted_v0_fixtures(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            (cells.get(1) == Some(&"0") && cells.get(2) == Some(&"accept"))
                .then(|| dir.join(cells[0]))
        })
        .collect()
}

/// The one accepted V0 recording with no order-preserving V3 conversion: its user message
/// precedes the first step, so the V2 -> V3 edge cannot place the system head (spec 10.6).
const NO_HEAD_PLACE: &str = "tool-outcome-unknown/session.expected.jsonl";

/// The accepted V0 recording whose V1 -> V2 artifact the relationship rules refuse: its
/// compaction checkpoint (a `compact` replace) has no `compaction/start` (spec 12.2,
/// compaction transactions 6), so dsh's chain refuses it at that edge too.
const NO_COMPACTION_START: &str = "agent-instructions/session.jsonl";

/// The messages a log derives at its end, folded under its own version's rules, and the
/// last request header's prompt.
fn derive_at_end(events: &[sessionlog_format::Event], ctx: RuleContext) -> (Vec<Message>, String) {
    let mut fold = SessionFold::new(ctx);
    let mut prompt = String::new();
    for event in events {
        if let EventData::RequestHeader(data) = &event.data {
            if let Some(Value::String(text)) = &data.header.system {
                prompt = text.clone();
            }
        }
        fold.admit(Arc::new(event.clone()))
            .unwrap_or_else(|v: Violation| panic!("seq {}: {v}", event.seq));
    }
    (fold.messages().into_iter().cloned().collect(), prompt)
}

// Goal: every V0 recording dsh's manifest accepts opens as V3 through the whole chain,
// derives the V0 messages with the V0 prompt prepended, imports into a store that then
// verifies, and migrates on disk with every request proved; the one with no order-preserving
// conversion is refused with the spec's text at its physical line.
// Method: read_as_v3, fold both sides to the end and compare; import_file + Store::verify;
// migrate_file into a temporary directory.
#[test]
fn v0_fixtures_open_migrate_import_and_verify() {
    let Some(dir) = fixtures_dir() else { return };
    let fixtures = accepted_v0_fixtures(&dir);
    assert_eq!(fixtures.len(), 13);
    let tmp = tempfile::tempdir().unwrap();
    let mut n_migrated = 0;
    for (idx, path) in fixtures.iter().enumerate() {
        let name = path.display().to_string();
        let out_dir = tmp.path().join(format!("out-{idx}"));
        let options = MigrateOptions {
            out_dir: Some(out_dir),
            ..MigrateOptions::default()
        };
        let relative = Path::new(path.file_name().unwrap());
        let outcome = migrate_file(path, relative, &options);
        if name.ends_with(NO_HEAD_PLACE) {
            let reason = "format v2 surface before first step cannot acquire a system head \
                          without changing chronology";
            assert_eq!(
                outcome.outcome,
                Outcome::Refused {
                    line: Some(3),
                    reason: reason.to_owned()
                }
            );
            let error = read_as_v3(path, SnapshotMode::Auto)
                .unwrap_err()
                .to_string();
            assert!(error.ends_with(&format!(":3: {reason}")), "{error}");
            continue;
        }
        if name.ends_with(NO_COMPACTION_START) {
            let reason = "Session migration from v1 to v2 refuses the transformed artifact: \
                          compaction checkpoint at seq 12 has no matching compaction/start \
                          [compaction-unmatched]";
            assert_eq!(
                outcome.outcome,
                Outcome::Refused {
                    line: Some(19),
                    reason: reason.to_owned()
                }
            );
            assert!(read_as_v3(path, SnapshotMode::Auto).is_err(), "{name}");
            continue;
        }
        let Outcome::Converted {
            requests_proved: Some(proved),
        } = outcome.outcome
        else {
            panic!("{name}: {:?}", outcome.outcome);
        };
        assert!(proved >= 1, "{name}");
        let written = read_log(
            std::fs::File::open(outcome.target.unwrap()).unwrap(),
            ReadOptions::default(),
        )
        .unwrap();
        assert_eq!(written.version, FormatVersion::V3);

        let source = read_log(std::fs::File::open(path).unwrap(), ReadOptions::default()).unwrap();
        let (header, events, snapshot) = read_as_v3(path, SnapshotMode::Auto).unwrap();
        assert_eq!(events, written.events, "{name}: on disk == in memory");
        let ctx = |version| RuleContext { version, snapshot };
        let (v0_messages, prompt) = derive_at_end(&source.events, ctx(FormatVersion::V0));
        let (v3_messages, _) = derive_at_end(&events, ctx(FormatVersion::V3));
        let offset = usize::from(!prompt.is_empty());
        if offset == 1 {
            assert_eq!(v3_messages[0].role.as_deref(), Some("system"), "{name}");
            assert_eq!(v3_messages[0].content, vec![ContentBlock::text(&prompt)]);
        }
        assert_eq!(v3_messages.len(), v0_messages.len() + offset, "{name}");
        for (old, new) in v0_messages.iter().zip(&v3_messages[offset..]) {
            assert_eq!(
                (&old.id, &old.role, &old.content),
                (&new.id, &new.role, &new.content),
                "{name}"
            );
        }

        // Normalized recordings share the id `{{sessionId}}`: one store each.
        let (_store_dir, store) = temp_store();
        let report = import_file(&store, path, SnapshotMode::Auto, &mut |_| {}).unwrap();
        assert_eq!(report.session, header.id);
        assert_eq!(store.read_range(&header.id, 0, u64::MAX).unwrap(), events);
        let verified = store.verify(std::slice::from_ref(&header.id)).unwrap();
        assert!(verified.iter().all(|r| r.ok()), "{name}: {verified:?}");
        n_migrated += 1;
    }
    assert_eq!(n_migrated, 11);
}
