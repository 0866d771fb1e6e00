//! Benchmark inputs: generated sessions, their JSONL rows, and the files the baselines read.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde_json::Value;
use sessionlog_format::gen::{GenOptions, Generator};
use sessionlog_format::row::encode_row;
use sessionlog_format::{Compression, Event, FormatVersion, LogWriter, SessionHeader};

/// A generated V3 session of exactly `n_events` events (seed `seed`), flattened.
pub fn session_events(seed: u64, n_events: u64) -> (SessionHeader, Vec<Event>) {
    let mut generator = Generator::new(GenOptions {
        events: n_events,
        seed,
    });
    let header = generator.header();
    let mut events = Vec::with_capacity(usize::try_from(n_events).unwrap_or(0));
    while let Some(batch) = generator.next_batch() {
        events.extend(batch);
    }
    (header, events)
}

/// Appends the V3 JSONL row of each event, one line each, to `out`.
pub fn encode_rows(events: &[Event], out: &mut Vec<u8>) {
    for event in events {
        encode_row(event, FormatVersion::V3, out);
        out.push(b'\n');
    }
}

/// The header line (with its newline) that starts the V3 log of `header`.
pub fn header_line(header: &SessionHeader) -> Vec<u8> {
    LogWriter::new(Vec::new(), header, Compression::None)
        .and_then(LogWriter::into_inner)
        .expect("writing to memory cannot fail")
}

/// Writes a generated log of `version` (V0, V2 or V3; seed `seed`, `n_events` before V0's
/// stream expansion) to `path` through [`LogWriter`], and fsyncs it.
pub fn write_generated_log(path: &Path, version: FormatVersion, n_events: u64, seed: u64) {
    let options = GenOptions {
        events: n_events,
        seed,
    };
    let mut generator = Generator::for_version(options, version).expect("a generated version");
    let file = File::create(path).expect("the source file");
    let out = BufWriter::with_capacity(1 << 20, file);
    let mut writer =
        LogWriter::new(out, &generator.header(), Compression::None).expect("the header");
    while let Some(batch) = generator.next_batch() {
        writer.append_batch(&batch).expect("a generated batch");
    }
    let out = writer.into_inner().expect("the writer");
    let file = out.into_inner().expect("flushed");
    file.sync_all().expect("fsync");
}

/// The migration baseline: every line of `source` parsed into a `Value` and serialized again
/// into `out`, then fsynced.
pub fn reserialize(source: &Path, out: &Path) {
    let input = BufReader::with_capacity(1 << 20, File::open(source).expect("the source"));
    let file = File::create(out).expect("the baseline output");
    let mut output = BufWriter::with_capacity(1 << 20, file);
    for line in input.lines() {
        let line = line.expect("a line");
        let value: Value = serde_json::from_str(&line).expect("a JSON line");
        serde_json::to_writer(&mut output, &value).expect("written");
        output.write_all(b"\n").expect("written");
    }
    let file = output.into_inner().expect("flushed");
    file.sync_all().expect("fsync");
}

/// A `Read` over a header line followed by rows handed out one at a time (each without its
/// newline), so a [`sessionlog_format::LogReader`] can stream rows from a database cursor.
pub struct RowsReader<I> {
    rows: I,
    current: Vec<u8>,
    offset: usize,
}

impl<I: Iterator<Item = Vec<u8>>> RowsReader<I> {
    pub fn new(header_line: Vec<u8>, rows: I) -> RowsReader<I> {
        RowsReader {
            rows,
            current: header_line,
            offset: 0,
        }
    }
}

impl<I: Iterator<Item = Vec<u8>>> Read for RowsReader<I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.offset == self.current.len() {
            match self.rows.next() {
                Some(mut row) => {
                    row.push(b'\n');
                    self.current = row;
                    self.offset = 0;
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.offset);
        buf[..n].copy_from_slice(&self.current[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_reader_yields_the_header_and_each_row_on_its_own_line() {
        let rows = vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()];
        let mut reader = RowsReader::new(b"H\n".to_vec(), rows.into_iter());
        let mut text = String::new();
        reader.read_to_string(&mut text).expect("in memory");
        assert_eq!(text, "H\n{\"a\":1}\n{\"b\":2}\n");
    }

    #[test]
    fn session_events_are_dense_from_zero() {
        let (header, events) = session_events(7, 50);
        assert_eq!(events.len(), 50);
        assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
        assert!(header_line(&header).ends_with(b"\n"));
    }
}
