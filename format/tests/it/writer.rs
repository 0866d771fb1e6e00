//! The writer refuses what the reader would refuse, so that nothing it writes is unreadable.
//!
//! Regression: before this, `LogWriter` wrote events with an unsafe `time`, a provenance seq
//! that was not earlier than the event, a duplicate provenance seq, or a negative zero, and
//! headers with unknown members; our own reader then refused the file.

use serde_json::json;
use sessionlog_format::payload::TurnStart;
use sessionlog_format::{
    Compression, Event, EventData, EventType, LogWriter, Rule, SurfaceOp, WriteError,
};

use crate::support::{plain_source, sample_header, text_message};

fn writer() -> LogWriter<Vec<u8>> {
    LogWriter::new(Vec::new(), &sample_header(), Compression::None).unwrap()
}

fn rejected_rule(result: Result<(), WriteError>) -> (Rule, String) {
    match result {
        Err(WriteError::Rejected { violation, .. }) => (violation.rule, violation.message),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn user(seq: u64, sources: Vec<u64>) -> Event {
    let message = text_message("u", "user", plain_source("user"), "hi");
    Event::new(seq, 0, EventData::UserMessage(Box::new(message)))
        .with_surface_op(SurfaceOp::Append)
        .with_sources(sources)
}

// Goal: each value the reader refuses is refused at write time, and nothing is written.
#[test]
fn writer_refuses_what_the_reader_refuses() {
    let turn = TurnStart {
        turn: 1,
        extra: Default::default(),
    };
    let mut late = Event::new(0, 1 << 60, EventData::TurnStart(Box::new(turn)));
    let mut w = writer();
    let (rule, message) = rejected_rule(w.append_batch(std::slice::from_ref(&late)));
    assert_eq!(
        (rule, message.as_str()),
        (
            Rule::Envelope,
            "time 1152921504606846976 is not a safe integer"
        )
    );
    late.time = 5;
    w.append_batch(&[late]).unwrap();
    let (rule, message) = rejected_rule(w.append_batch(&[user(1, vec![7])]));
    assert_eq!(
        (rule, message.as_str()),
        (Rule::SourceSeqs, "source seq 7 is not earlier than seq 1")
    );
    let (rule, message) = rejected_rule(w.append_batch(&[user(1, vec![0, 0])]));
    assert_eq!(
        (rule, message.as_str()),
        (Rule::SourceSeqs, "source seq 0 is listed twice")
    );
    let negative_zero = Event::other(1, 0, EventType::PermissionPreset, json!({ "x": -0.0 }));
    let (rule, message) = rejected_rule(w.append_batch(&[negative_zero]));
    assert_eq!(
        (rule, message.as_str()),
        (Rule::Json, "data: negative zero is not lossless JSON")
    );
    let header_len = serde_json::to_vec(&sample_header()).unwrap().len() + 1;
    let turn_len = w.into_inner().unwrap().len() - header_len;
    assert!(turn_len > 0, "only the accepted turn/start was written");
}

// Goal: a header the reader would refuse is refused by the writer.
#[test]
fn writer_refuses_a_bad_header() {
    let mut header = sample_header();
    header.extra.insert("sandboxMode".to_owned(), json!("x"));
    let error = LogWriter::new(Vec::new(), &header, Compression::None)
        .err()
        .unwrap();
    assert_eq!(
        error.to_string(),
        "header: header has unexpected field `sandboxMode`"
    );
}
