//! Generated V2 logs (`gen --version 2`) migrate and prove.

use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::{EventData, FormatVersion};
use sessionlog_migrations::migrate_v2_to_v3;

// Goal: every generated V2 log passes the source audit, converts, is admitted as V3 and
// proves every request, with head replacements for its prompt rewrites.
// Method: several seeds and sizes (the long one holds prompt rewrites, compactions, prunes
// and retries); count the requests proved and the system events written.
#[test]
fn generated_v2_migrates_and_proves() {
    for seed in [0, 5, 0xabc] {
        for events in [1, 30, 4_000] {
            let options = GenOptions { events, seed };
            let mut generator = Generator::for_version(options, FormatVersion::V2).unwrap();
            let header = generator.header();
            let source: Vec<_> = std::iter::from_fn(|| generator.next_batch())
                .flatten()
                .collect();
            let headers = source
                .iter()
                .filter(|e| matches!(e.data, EventData::RequestHeader(_)))
                .count() as u64;
            let migrated = match migrate_v2_to_v3(header, source) {
                Ok(migrated) => migrated,
                Err(refusal) => panic!("seed {seed} N {events}: {:?}: {refusal}", refusal.seq),
            };
            assert_eq!(migrated.requests_proved, headers, "seed {seed} N {events}");
            let systems = migrated
                .events
                .iter()
                .filter(|e| matches!(e.data, EventData::SystemMessage(_)))
                .count();
            if events == 4_000 {
                assert!(
                    systems > 2,
                    "seed {seed}: the prompt was rewritten ({systems})"
                );
            }
        }
    }
}
