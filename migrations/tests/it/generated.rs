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
            let generator = Generator::for_version(options, FormatVersion::V2).unwrap();
            let header = generator.header();
            let source = generator.into_events();
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

// Goal: a generated V0 log crosses the whole chain (V0 -> V1 -> V2 -> V3) in one streaming
// pass with every request proved, and its streams come back embedded.
// Method: feed a V0 generator's events one by one to a Migrator; count request headers on
// the source and embedded streams on the target.
#[test]
fn generated_v0_crosses_the_chain() {
    use sessionlog_migrations::{Catalog, Migrator, MigratorOptions};
    for seed in [2, 11] {
        let options = GenOptions {
            events: 3_000,
            seed,
        };
        let mut generator = Generator::for_version(options, FormatVersion::V0).unwrap();
        let header = generator.header();
        let (mut migrator, target_header) =
            Migrator::new(&Catalog::released(), header, MigratorOptions::default()).unwrap();
        assert_eq!(target_header.version, Some(3));
        let mut out = Vec::new();
        let mut headers = 0;
        while let Some(batch) = generator.next_batch() {
            for event in batch {
                headers += u64::from(matches!(event.data, EventData::RequestHeader(_)));
                if let Err(refusal) = migrator.push(event, &mut out) {
                    panic!("seed {seed}: {:?}: {refusal}", refusal.seq);
                }
            }
        }
        let summary = migrator.finish(&mut out).unwrap();
        assert_eq!(summary.requests_proved, Some(headers));
        let embedded = out
            .iter()
            .filter(|e| matches!(&e.data, EventData::AssistantMessage(d) if d.stream.as_ref().is_some_and(|s| !s.is_empty())))
            .count();
        assert!(embedded > 10, "seed {seed}: {embedded} streams embedded");
        assert!(out
            .iter()
            .all(|e| !matches!(e.data, EventData::AssistantChunk(_))));
    }
}
