//! Helpers shared by the integration tests.

use std::path::PathBuf;

/// `../shared/fixtures/dsh` beside the workspace, or `None` (with a note) on a fresh clone.
pub fn fixtures_dir() -> Option<PathBuf> {
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

/// One row of `MANIFEST.tsv`.
#[derive(Debug, Clone)]
pub struct ManifestRow {
    pub path: PathBuf,
    pub version: String,
    /// `accept`, `refuse: ...` or `either: ...`.
    pub expect: String,
}

/// The manifest rows, header excluded.
pub fn manifest(dir: &std::path::Path) -> Vec<ManifestRow> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("MANIFEST.tsv is readable");
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .expect("the manifest has a header")
        .split('\t')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .expect("manifest column")
    };
    let (path_idx, version_idx, expect_idx) =
        (column("path"), column("format_version"), column("expect"));
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            ManifestRow {
                path: dir.join(cells[path_idx]),
                version: cells[version_idx].to_owned(),
                expect: cells[expect_idx].to_owned(),
            }
        })
        .collect()
}

/// The header of [`sample_batches`].
pub fn sample_header() -> sessionlog_format::SessionHeader {
    sessionlog_format::SessionHeader::new_v3("sample-session", 1_700_000_000_000)
}

/// A small valid V3 session of one turn, in three batches: turn/start, step/start and the
/// system head; the request header and a user message; an assistant message with a stream,
/// step/end and turn/end. Eight events, seqs 0 to 7.
pub fn sample_batches() -> Vec<Vec<sessionlog_format::Event>> {
    use serde_json::json;
    use sessionlog_format::payload::{
        AssistantMessageData, CallConfig, EpochHeader, RequestHeaderData, StepRef,
        SystemMessageData, TurnEnd, TurnStart,
    };
    use sessionlog_format::stream::{
        BlockEnd, BlockStart, Finish, RawChunk, StreamChunk, StreamRecord, TextChunks, TokenUsage,
    };
    use sessionlog_format::{ContentBlock, Event, EventData, Extra, SurfaceOp};

    let time = 1_700_000_000_100;
    let step = StepRef {
        turn: 1,
        step: 1,
        extra: Extra::new(),
    };
    let system = SystemMessageData {
        turn: 1,
        step: 1,
        message: text_message(
            "m-system",
            "system",
            plugin_source("sample-plugin"),
            "Be brief.",
        ),
        extra: Extra::new(),
    };
    let header = RequestHeaderData {
        header: EpochHeader {
            config: CallConfig {
                provider: Some("sample-provider".to_owned()),
                model: "sample-model".to_owned(),
                reasoning_effort: None,
                temperature: None,
                max_tokens: None,
                stop: None,
                extra: Extra::new(),
            },
            adapter_defaults: None,
            tools: Some(json!([{"name": "bash", "parameters": {"type": "object"}}])),
            system: None,
            extra: Extra::new(),
        },
        reason: "initial".to_owned(),
        starts_series: None,
        extra: Extra::new(),
    };
    let user = text_message("m-user", "user", plain_source("user"), "Say hello.");
    let chunk = |time: i64, chunk: StreamChunk| {
        StreamRecord::Chunk(RawChunk {
            time,
            chunk,
            extra: Extra::new(),
        })
    };
    let stream = vec![
        chunk(
            time + 10,
            StreamChunk::BlockStart(BlockStart {
                index: 0,
                block_type: "text".to_owned(),
                extra: Extra::new(),
            }),
        ),
        StreamRecord::TextChunks(TextChunks {
            time0: time + 11,
            index: 0,
            dt: vec![4].into(),
            texts: ["Hel", "lo."].into_iter().collect(),
            extra: Extra::new(),
        }),
        chunk(
            time + 16,
            StreamChunk::BlockEnd(BlockEnd {
                index: 0,
                block: ContentBlock::text("Hello."),
                extra: Extra::new(),
            }),
        ),
        chunk(
            time + 17,
            StreamChunk::Finish(Finish {
                reason: json!({"kind": "stop"}),
                replay_state: None,
                extra: Extra::new(),
            }),
        ),
    ];
    let mut model = plain_source("model");
    model.provider = Some("sample-provider".to_owned());
    model.model = Some("sample-model".to_owned());
    let assistant = AssistantMessageData {
        turn: 1,
        step: 1,
        message: text_message("m-assistant", "assistant", model, "Hello."),
        stream: Some(stream),
        usage: Some(TokenUsage {
            input_tokens: 12,
            output_tokens: 2,
            cache_read_tokens: None,
            reasoning_tokens: None,
            total_tokens: Some(14),
            extra: Extra::new(),
        }),
        interrupted: None,
        extra: Extra::new(),
    };
    let turn_end = TurnEnd {
        turn: 1,
        reason: json!({"kind": "completed"}),
        extra: Extra::new(),
    };
    vec![
        vec![
            Event::new(
                0,
                time,
                EventData::TurnStart(Box::new(TurnStart {
                    turn: 1,
                    extra: Extra::new(),
                })),
            ),
            Event::new(1, time + 1, EventData::StepStart(Box::new(step.clone()))),
            Event::new(2, time + 2, EventData::SystemMessage(Box::new(system)))
                .with_surface_op(SurfaceOp::Append),
        ],
        vec![
            Event::new(3, time + 3, EventData::RequestHeader(Box::new(header))),
            Event::new(4, time + 4, EventData::UserMessage(Box::new(user)))
                .with_surface_op(SurfaceOp::Append),
        ],
        vec![
            Event::new(
                5,
                time + 20,
                EventData::AssistantMessage(Box::new(assistant)),
            )
            .with_surface_op(SurfaceOp::Append),
            Event::new(6, time + 21, EventData::StepEnd(Box::new(step))),
            Event::new(7, time + 22, EventData::TurnEnd(Box::new(turn_end))),
        ],
    ]
}

/// A message with one text block.
pub fn text_message(
    id: &str,
    role: &str,
    source: sessionlog_format::Source,
    text: &str,
) -> sessionlog_format::Message {
    sessionlog_format::Message {
        id: Some(id.to_owned()),
        role: Some(role.to_owned()),
        content: vec![sessionlog_format::ContentBlock::text(text)],
        source: Some(source),
        extra: Default::default(),
    }
}

/// A source of the given kind with no other member.
pub fn plain_source(kind: &str) -> sessionlog_format::Source {
    sessionlog_format::Source {
        kind: kind.to_owned(),
        plugin: None,
        provider: None,
        model: None,
        call_id: None,
        extra: Default::default(),
    }
}

/// A `plugin` source naming `plugin`.
pub fn plugin_source(plugin: &str) -> sessionlog_format::Source {
    let mut source = plain_source("plugin");
    source.plugin = Some(plugin.to_owned());
    source
}

/// A log written by `LogWriter`, with the output length after each record group.
#[derive(Debug, Clone)]
pub struct Written {
    pub bytes: Vec<u8>,
    /// `ends[0]` is the end of the header; `ends[i]` the end of batch `i` (1-based).
    pub ends: Vec<usize>,
}

/// Writes `header` and `batches` through `LogWriter`, noting the output length after the
/// header and after every `append_batch`.
pub fn write_log(
    header: &sessionlog_format::SessionHeader,
    batches: &[Vec<sessionlog_format::Event>],
    compression: sessionlog_format::Compression,
) -> Written {
    let out = SharedBuf::default();
    let mut writer = sessionlog_format::LogWriter::new(out.clone(), header, compression)
        .expect("writing to memory cannot fail");
    let mut ends = vec![out.len()];
    for batch in batches {
        writer
            .append_batch(batch)
            .expect("the batch passes admission");
        ends.push(out.len());
    }
    writer.into_inner().expect("flushing memory cannot fail");
    let bytes = out.0.borrow().clone();
    Written { bytes, ends }
}

/// A `Write` into a buffer that the test can still read while a writer owns a handle.
#[derive(Debug, Clone, Default)]
struct SharedBuf(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl SharedBuf {
    fn len(&self) -> usize {
        self.0.borrow().len()
    }
}

impl std::io::Write for SharedBuf {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How a [`read_trace`] reader runs its row stage.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    Inline,
    /// `LogReader::pipelined`.
    Pipelined,
    /// `LogReader::parallel_in_chunks` with chunks of this many bytes of text.
    Parallel(usize),
}

/// Everything a reader of `bytes` yields, as text: each event (or error) with the reader's line
/// after it, then the snapshot mode and the withheld fault. Equal texts mean equal reads.
pub fn read_trace(
    bytes: &[u8],
    options: sessionlog_format::ReadOptions,
    stage: Stage,
) -> Vec<String> {
    read_trace_as(bytes, options, stage, Read::Whole)
}

/// How a [`read_trace_as`] reader decodes its rows, and how its events are written down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Decoded whole; written down whole.
    Whole,
    /// Decoded whole; written down without the packed runs' contents
    /// (`sessionlog_format::skim::as_skimmed`).
    WholeSkimmedView,
    /// Skimmed (`LogReader::skimming`); written down as they come.
    Skimmed,
}

/// [`read_trace`], decoding and writing down as `read` says.
pub fn read_trace_as(
    bytes: &[u8],
    options: sessionlog_format::ReadOptions,
    stage: Stage,
    read: Read,
) -> Vec<String> {
    let reader =
        match sessionlog_format::LogReader::new(std::io::Cursor::new(bytes.to_vec()), options) {
            Ok(reader) => reader,
            Err(error) => return vec![format!("open: {error:?}")],
        };
    let reader = match read {
        Read::Skimmed => reader.skimming(),
        Read::Whole | Read::WholeSkimmedView => reader,
    };
    let mut reader = match stage {
        Stage::Inline => reader,
        Stage::Pipelined => reader.pipelined(),
        Stage::Parallel(chunk_bytes) => reader.parallel_in_chunks(chunk_bytes),
    };
    let mut trace = Vec::new();
    while let Some(event) = reader.next_event() {
        let event = match (read, event) {
            (Read::WholeSkimmedView, Ok(event)) => Ok(sessionlog_format::skim::as_skimmed(event)),
            (_, event) => event,
        };
        trace.push(format!("{} {event:?}", reader.line()));
    }
    trace.push(format!(
        "end {} snapshot={} compressed={} withheld={:?}",
        reader.line(),
        reader.snapshot(),
        reader.compressed(),
        reader.withheld()
    ));
    trace
}

/// Asserts that pipelined and parallel readers of `bytes` (the latter in chunks of one line and
/// of a few lines) yield exactly what an inline one does, under every
/// recovery policy and snapshot mode.
pub fn assert_staged_reads_agree(bytes: &[u8], name: &str) {
    use sessionlog_format::{ReadOptions, Recovery, SnapshotMode};
    let stages = [Stage::Pipelined, Stage::Parallel(1), Stage::Parallel(4096)];
    for recovery in [Recovery::Strict, Recovery::Recoverable] {
        for snapshot in [SnapshotMode::Auto, SnapshotMode::On, SnapshotMode::Off] {
            let options = ReadOptions { recovery, snapshot };
            let inline = read_trace(bytes, options, Stage::Inline);
            for stage in stages {
                let staged = read_trace(bytes, options, stage);
                assert!(
                    inline == staged,
                    "{name} {options:?}: inline and {stage:?} reads differ\ninline: {:?}\nstaged: {:?}",
                    inline.iter().zip(&staged).find(|(a, b)| a != b),
                    (inline.len(), staged.len())
                );
            }
            assert_skimmed_reads_agree(bytes, options, name);
        }
    }
}

/// Asserts that a skimming reader of `bytes` (inline and beside a helper thread) yields what a
/// whole one does, its events' packed runs aside: the same events otherwise, and the same
/// faults, lines, snapshot mode and withheld fault, byte for byte.
pub fn assert_skimmed_reads_agree(
    bytes: &[u8],
    options: sessionlog_format::ReadOptions,
    name: &str,
) {
    let whole = read_trace_as(bytes, options, Stage::Inline, Read::WholeSkimmedView);
    for stage in [Stage::Inline, Stage::Parallel(4096)] {
        let skimmed = read_trace_as(bytes, options, stage, Read::Skimmed);
        assert!(
            whole == skimmed,
            "{name} {options:?}: whole and skimmed {stage:?} reads differ\nwhole: {:?}\nskimmed: {:?}",
            whole.iter().zip(&skimmed).find(|(a, b)| a != b),
            (whole.len(), skimmed.len())
        );
    }
}
