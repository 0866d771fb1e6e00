//! Pre-wrapper payload shapes: read opaque in V0 and V1 logs, refused from V2 on.

use sessionlog_format::{read_log, EventData, ReadOptions};

fn log(version: u64, row: &str) -> String {
    let seeded = if version >= 2 {
        r#","isSeeded":false"#
    } else {
        ""
    };
    format!(
        "{{\"type\":\"session\",\"version\":{version},\"id\":\"s\",\"createdAt\":1,\
         \"delegationDepth\":0{seeded}}}\n{row}\n"
    )
}

// Goal: a flat assistant message, a flat tool result and an id-less compaction event read as
// opaque payloads in V0 and V1 (for the V0 -> V1 edge to normalise), typed payloads still
// read typed there, and the flat shapes are a decoding fault from V2 on.
// Method: one row of each shape under each version.
#[test]
fn flat_shapes_are_legacy_only() {
    let flat_assistant = r#"{"type":"assistant/message","seq":0,"time":1,"surfaceOp":"append","sourceEventSeqs":[],"data":{"turn":1,"step":1,"content":[],"provenance":{"provider":"p","model":"m"}}}"#;
    let flat_result = r#"{"type":"tool/result","seq":0,"time":1,"surfaceOp":"append","data":{"turn":1,"step":1,"callId":"c","content":[],"isError":false}}"#;
    let idless = r#"{"type":"compaction/start","seq":0,"time":1,"data":{"turn":null}}"#;
    let typed =
        r#"{"type":"compaction/start","seq":0,"time":1,"data":{"turn":null,"compactionId":"c1"}}"#;
    for version in [0, 1] {
        for row in [flat_assistant, flat_result, idless] {
            let read = read_log(log(version, row).as_bytes(), ReadOptions::default())
                .unwrap_or_else(|e| panic!("v{version} {row}: {e}"));
            assert!(
                matches!(read.events[0].data, EventData::Other(_)),
                "v{version} {row}"
            );
        }
        let read = read_log(log(version, typed).as_bytes(), ReadOptions::default()).unwrap();
        assert!(matches!(read.events[0].data, EventData::CompactionStart(_)));
    }
    for row in [flat_result, idless] {
        let error = read_log(log(2, row).as_bytes(), ReadOptions::default()).unwrap_err();
        assert!(error.to_string().contains("missing member"), "{error}");
    }
}
