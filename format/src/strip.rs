//! Stripping the packed runs out of a row of JSON text before a skimming decode.
//!
//! A skimming decode ([`crate::skim`]) checks the packed runs of an embedded stream (the
//! `texts`/`args` pieces and `dt` gaps of `text-chunks`, `reasoning-chunks` and
//! `tool-call-chunks` records) and keeps nothing of them. For a row of text most of that work
//! is serde_json's, a visitor call per piece of a few bytes. [`strip_runs`] does the same check
//! in one plain pass over the row and hands the parser a copy of it with each run that passes
//! written as `[]`, which decodes to what the skimmed run does: nothing.
//!
//! Only what is certain is stripped:
//! - the row's first member is `"type"`, naming `assistant/message` or `assistant/attempt`;
//! - the run is a member of a record of the `stream` array of the row's `data` object, the
//!   record's first member being its `"type"`;
//! - the run holds what the element visitors take and the parser accepts: strings with no
//!   `\u` escape (one may be a lone surrogate, which only the parser refuses) and no control
//!   character, their escapes among `\" \\ \/ \b \f \n \r \t`; or integers of 1 to 18 digits,
//!   no leading zero, not `-0` (which serde_json reads as a float).
//!
//! Everything else is left to the parser, so a row that the parser then refuses is decoded
//! again from its own text (`row::decode_row`), and every refusal reads as it did: the copy
//! differs from the row only inside arrays this pass found valid, so it parses where the row
//! does, to the same event but for the runs.

use crate::words::{quote_or_backslash_bytes, special_bytes};

/// The row of text `line` with the packed runs of its embedded stream written as `[]`, into
/// `out`; false (and `out` as it was) when there is none to strip.
pub(crate) fn strip_runs(line: &str, out: &mut String) -> bool {
    let mut runs = Vec::new();
    if find_runs(line.as_bytes(), &mut runs).is_none() || runs.is_empty() {
        return false;
    }
    out.clear();
    out.reserve(line.len());
    let mut from = 0;
    for (start, end) in runs {
        out.push_str(&line[from..start]);
        out.push_str("[]");
        from = end;
    }
    out.push_str(&line[from..]);
    true
}

/// The byte ranges of the runs to strip (each from its `[` to past its `]`), in order;
/// `None` where the row is not one this pass reads with certainty.
fn find_runs(text: &[u8], runs: &mut Vec<(usize, usize)>) -> Option<()> {
    let mut first = true;
    object(text, whitespace(text, 0), |key, value| {
        if std::mem::take(&mut first) {
            // The row's `type`, first, and one whose data can hold a stream.
            let (kind, after) = string(text, value).filter(|_| key == b"type")?;
            return matches!(kind, b"assistant/message" | b"assistant/attempt").then_some(after);
        }
        match key {
            b"data" if text.get(value) == Some(&b'{') => data(text, value, runs),
            _ => skip_value(text, value),
        }
    })
    .map(drop)
}

/// Reads the `data` object at `at` (its `{`), finding the runs of its `stream`; returns the
/// index past it.
fn data(text: &[u8], at: usize, runs: &mut Vec<(usize, usize)>) -> Option<usize> {
    object(text, at, |key, value| match key {
        b"stream" if text.get(value) == Some(&b'[') => {
            array_of(text, value, |text, at| match text.get(at) {
                Some(b'{') => record(text, at, runs),
                _ => skip_value(text, at),
            })
        }
        _ => skip_value(text, value),
    })
}

/// Reads the stream record at `at` (its `{`); when it is a packed run with its `type` first,
/// notes its pieces and `dt` arrays that can be stripped. Returns the index past it.
fn record(text: &[u8], at: usize, runs: &mut Vec<(usize, usize)>) -> Option<usize> {
    // The member that holds the pieces: `texts` of text and reasoning runs, `args` of tool-call
    // runs (in any other record a member of that name is an unknown one, kept as it is).
    let mut pieces: Option<&[u8]> = None;
    let mut first = true;
    object(text, at, |key, value| {
        if std::mem::take(&mut first) && key == b"type" {
            if let Some((kind, after)) = string(text, value) {
                pieces = match kind {
                    b"text-chunks" | b"reasoning-chunks" => Some(b"texts"),
                    b"tool-call-chunks" => Some(b"args"),
                    _ => None,
                };
                return Some(after);
            }
        }
        let run = match pieces {
            Some(pieces) if key == pieces => plain_strings(text, value),
            Some(_) if key == b"dt" => small_integers(text, value),
            _ => None,
        };
        match run {
            Some(end) => {
                runs.push((value, end));
                Some(end)
            }
            None => skip_value(text, value),
        }
    })
}

/// The object at `at` (its `{`): `member` is given each member's key (when it has no escape)
/// and the index where its value starts, and returns the index past the value. Returns the
/// index past the object; `None` when the text is not an object of such members or `member`
/// gives up.
fn object(
    text: &[u8],
    at: usize,
    mut member: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    items(text, at, [b'{', b'}'], |text, at| {
        let (key, after) = string(text, at)?;
        let colon = whitespace(text, after);
        if text.get(colon) != Some(&b':') {
            return None;
        }
        member(key, whitespace(text, colon + 1))
    })
}

/// When the value at `at` is a JSON array each of whose elements `element` reads (returning
/// the index past it): the index past the array.
fn array_of(
    text: &[u8],
    at: usize,
    element: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    items(text, at, [b'[', b']'], element)
}

/// The object or array at `at`, between `brackets`, each of whose items (a member, an
/// element) `item` reads from its first byte, returning the index past it: the index past the
/// closing bracket; `None` when the text is not such a sequence or `item` gives up.
fn items(
    text: &[u8],
    at: usize,
    [open, close]: [u8; 2],
    mut item: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    if text.get(at) != Some(&open) {
        return None;
    }
    let mut at = whitespace(text, at + 1);
    if text.get(at) == Some(&close) {
        return Some(at + 1);
    }
    loop {
        at = item(text, at)?;
        match next_item(text, at, close) {
            Ok(next) => at = next,
            Err(end) => return end,
        }
    }
}

/// The string at `at` (its `"`), when it has no escape: its bytes and the index past it.
fn string(text: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let end = quote_or_backslash(text, at + 1)?;
    (text[end] == b'"').then(|| (&text[at + 1..end], end + 1))
}

/// The index past the JSON value at `at`, found without checking it (the parser checks what
/// is not stripped); `None` when the text ends first.
fn skip_value(text: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = at;
    loop {
        match *text.get(at)? {
            b'"' => {
                at += 1;
                loop {
                    at = quote_or_backslash(text, at)?;
                    if text[at] == b'"' {
                        break;
                    }
                    at += 2;
                }
                at += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                at += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                at += 1;
            }
            _ if depth == 0 => {
                // A number or a literal: to the next delimiter.
                while text.get(at).is_some_and(|b| {
                    !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    at += 1;
                }
                return Some(at);
            }
            _ => at += 1,
        }
        if depth == 0 {
            return Some(at);
        }
    }
}

/// The index of the first byte at or after `at` that is not JSON whitespace.
fn whitespace(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// After an item ending before `at`: the index of the next item, or `Err(end)`, the index
/// past the `close` bracket when the sequence closes there.
fn next_item(text: &[u8], at: usize, close: u8) -> Result<usize, Option<usize>> {
    // Compact text first: a comma right after the item and the next one right after it.
    if text.get(at) == Some(&b',')
        && text
            .get(at + 1)
            .is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Ok(at + 1);
    }
    let at = whitespace(text, at);
    match text.get(at) {
        Some(b',') => Ok(whitespace(text, at + 1)),
        Some(&byte) if byte == close => Err(Some(at + 1)),
        _ => Err(None),
    }
}

/// When the value at `at` is a JSON array of strings that the parser and the string visitor
/// take as they are: the index past it.
fn plain_strings(text: &[u8], at: usize) -> Option<usize> {
    array_of(text, at, plain_string)
}

/// When the value at `at` is a JSON array of integers that each fit an `i64` by their length:
/// the index past it.
fn small_integers(text: &[u8], at: usize) -> Option<usize> {
    array_of(text, at, small_integer)
}

/// A string with no `\u` escape, no other escape but the JSON ones and no control character
/// at `at`: the index past it.
fn plain_string(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        // Eight bytes at a time to the next one that is not plain text.
        while let Some(chunk) = text.get(at..at + 8) {
            let special = special_bytes(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
            if special != 0 {
                at += (special.trailing_zeros() / 8) as usize;
                break;
            }
            at += 8;
        }
        match *text.get(at)? {
            b'"' => return Some(at + 1),
            b'\\' => match text.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                _ => return None,
            },
            byte if byte < 0x20 => return None,
            _ => at += 1,
        }
    }
}

/// The index of the first `"` or `\` at or after `at`. Most strings of a row are keys and
/// short values, so the first 32 bytes are looked at eight at a time before `memchr2`, whose
/// call costs more than such a string's whole scan.
fn quote_or_backslash(text: &[u8], mut at: usize) -> Option<usize> {
    for _ in 0..4 {
        let Some(chunk) = text.get(at..at + 8) else {
            break;
        };
        let marks =
            quote_or_backslash_bytes(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        if marks != 0 {
            return Some(at + (marks.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr::memchr2(b'"', b'\\', text.get(at..)?).map(|len| at + len)
}

/// An integer of 1 to 18 digits (so it fits an `i64`), with no leading zero and not `-0`
/// (which serde_json reads as a float) at `at`: the index past it.
fn small_integer(text: &[u8], at: usize) -> Option<usize> {
    let start = at + usize::from(text.get(at) == Some(&b'-'));
    let mut end = start;
    while text.get(end).is_some_and(u8::is_ascii_digit) {
        end += 1;
    }
    let digits = end - start;
    let zero_led = text.get(start) == Some(&b'0') && (digits > 1 || start > at);
    (digits > 0 && digits <= 18 && !zero_led).then_some(end)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The string check one byte at a time, as it was before the eight-byte steps.
    fn plain_string_bytewise(text: &[u8], at: usize) -> Option<usize> {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let mut at = at + 1;
        loop {
            match *text.get(at)? {
                b'"' => return Some(at + 1),
                b'\\' => match text.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                    _ => return None,
                },
                byte if byte < 0x20 => return None,
                _ => at += 1,
            }
        }
    }

    /// `next_item` without its fast path for compact text.
    fn next_item_spaced(text: &[u8], at: usize, close: u8) -> Result<usize, Option<usize>> {
        let at = whitespace(text, at);
        match text.get(at) {
            Some(b',') => Ok(whitespace(text, at + 1)),
            Some(&byte) if byte == close => Err(Some(at + 1)),
            _ => Err(None),
        }
    }

    /// Text near the edges of the two checks: quotes, backslashes and every escape letter,
    /// control characters, bytes just below and above them, UTF-8 of every length, commas,
    /// brackets and whitespace, in runs long enough for the eight-byte steps.
    fn edgy_text() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"\"".to_vec()),
            Just(b"\\".to_vec()),
            Just(b"\\u00e9".to_vec()),
            prop::sample::select(b"\"\\/bfnrtux0 ".to_vec()).prop_map(|b| vec![b'\\', b]),
            (0u8..0x20).prop_map(|b| vec![b]),
            prop::sample::select(vec![0x1f, 0x20, 0x21, 0x22, 0x23, 0x5b, 0x5c, 0x5d, 0x7f])
                .prop_map(|b| vec![b]),
            Just("\u{e9}\u{20ac}\u{1f600}".as_bytes().to_vec()),
            Just(vec![0x80, 0xa2, 0xdc, 0xff]),
            prop::sample::select(b",[] \t\n\r".to_vec()).prop_map(|b| vec![b]),
            "[a-z]{1,40}".prop_map(String::into_bytes),
            Just(b"\",\"".to_vec()),
            Just(b"\", \"".to_vec()),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        // Goal: the eight-byte steps of the string check and of the search for a string's end,
        // and the compact fast path between elements, decide as the byte-at-a-time versions
        // (and `memchr2`) do, on any text, from any start.
        // Method: edgy text; both versions of each function from every index, and the text
        // as an array of strings read by `plain_strings` and by the byte-at-a-time check.
        #[test]
        fn the_word_steps_decide_as_the_byte_steps(text in edgy_text()) {
            for at in 0..=text.len() {
                prop_assert_eq!(plain_string(&text, at), plain_string_bytewise(&text, at));
                for close in [b']', b'}'] {
                    prop_assert_eq!(next_item(&text, at, close), next_item_spaced(&text, at, close));
                }
                let found = memchr::memchr2(b'"', b'\\', &text[at..]).map(|len| at + len);
                prop_assert_eq!(quote_or_backslash(&text, at), found);
            }
            let mut array = b"[\"".to_vec();
            array.extend_from_slice(&text);
            array.extend_from_slice(b"\"]");
            prop_assert_eq!(
                plain_strings(&array, 0),
                array_of(&array, 0, plain_string_bytewise)
            );
        }
    }

    fn stripped(line: &str) -> Option<String> {
        let mut out = String::new();
        strip_runs(line, &mut out).then_some(out)
    }

    // Goal: the runs of a stream's packed records are stripped, and nothing else: not a run
    // whose record has its type last, not a member of that name elsewhere, not a row of
    // another type or with its type not first.
    #[test]
    fn only_the_runs_of_stream_records_are_stripped() {
        let row = |kind: &str, stream: &str| {
            format!(
                r#"{{"type":"{kind}","seq":3,"data":{{"turn":1,"texts":["x"],"stream":[{stream}],"meta":{{"dt":[1]}}}}}}"#
            )
        };
        let runs = r#"{"type":"text-chunks","time0":1,"index":0,"dt":[1, 2],"texts":["a","b\n","c"]},{"type":"chunk","time":2,"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"abc"}}},{"type":"tool-call-chunks","time0":1,"index":1,"dt":[],"id":"c","args":["{\"a\"",":1}"]}"#;
        let want = r#"{"type":"text-chunks","time0":1,"index":0,"dt":[],"texts":[]},{"type":"chunk","time":2,"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"abc"}}},{"type":"tool-call-chunks","time0":1,"index":1,"dt":[],"id":"c","args":[]}"#;
        assert_eq!(
            stripped(&row("assistant/message", runs)),
            Some(row("assistant/message", want))
        );
        assert_eq!(
            stripped(&row("assistant/attempt", runs)),
            Some(row("assistant/attempt", want))
        );
        assert_eq!(stripped(&row("assistant/chunk", runs)), None);
        assert_eq!(stripped(&row("tool/result", runs)), None);
        let late = r#"{"time0":1,"index":0,"dt":[1],"texts":["a","b"],"type":"text-chunks"}"#;
        assert_eq!(stripped(&row("assistant/message", late)), None);
        let other = r#"{"type":"other-chunks","dt":[1],"texts":["a"]}"#;
        assert_eq!(stripped(&row("assistant/message", other)), None);
        // `args` of a text run, `texts` of a tool-call run and any other array are unknown
        // members, kept.
        let crossed = r#"{"type":"text-chunks","args":["a"],"gaps":[1]},{"type":"tool-call-chunks","texts":["a"],"ts":[2]}"#;
        assert_eq!(stripped(&row("assistant/message", crossed)), None);
        let type_last = r#"{"seq":1,"type":"assistant/message","data":{"stream":[{"type":"text-chunks","texts":["a"]}]}}"#;
        assert_eq!(stripped(type_last), None);
        let nested = r#"{"type":"assistant/message","data":{"message":{"stream":[{"type":"text-chunks","texts":["a"]}]}}}"#;
        assert_eq!(stripped(nested), None);
        // A stream under another member of the row, and another member of `data`.
        let beside = r#"{"type":"assistant/message","meta":{"stream":[{"type":"text-chunks","texts":["a"]}]}}"#;
        assert_eq!(stripped(beside), None);
        let renamed = r#"{"type":"assistant/message","data":{"streams":[{"type":"text-chunks","texts":["a"]}]}}"#;
        assert_eq!(stripped(renamed), None);
    }

    // Goal: a run the parser or the visitors could refuse, or read otherwise than as plain
    // strings or integers, is left to them.
    #[test]
    fn runs_that_are_not_plain_are_left_to_the_parser() {
        let row = |member: &str| {
            format!(
                r#"{{"type":"assistant/message","data":{{"stream":[{{"type":"text-chunks",{member}}}]}}}}"#
            )
        };
        for (member, strip) in [
            (r#""texts":[]"#, true),
            (r#""texts":[ "a" ,	"b" ]"#, true),
            (r#""texts":["\"\\\/\b\f\n\r\t"]"#, true),
            (r#""texts":["\u00e9"]"#, false),
            (r#""texts":["\ud800"]"#, false),
            (r#""texts":["\x"]"#, false),
            ("\"texts\":[\"a\u{1}\"]", false),
            (r#""texts":["a",7]"#, false),
            (r#""texts":[null]"#, false),
            (r#""texts":[["a"]]"#, false),
            (r#""texts":"a""#, false),
            (r#""texts":["a""#, false),
            (r#""dt":[0, 17, -17, 123456789012345678]"#, true),
            (r#""dt":[1234567890123456789]"#, false),
            (r#""dt":[-0]"#, false),
            (r#""dt":[01]"#, false),
            (r#""dt":[1.5]"#, false),
            (r#""dt":[1e3]"#, false),
            (r#""dt":["1"]"#, false),
            (r#""dt":[1,]"#, false),
        ] {
            assert_eq!(stripped(&row(member)).is_some(), strip, "{member}");
            if strip {
                serde_json::from_str::<serde_json::Value>(&row(member)).unwrap();
            }
        }
    }

    // Goal: the pass is not idle on the logs dsh writes: every row of generated V3 and V4 logs
    // that carries a run has its runs stripped, and parses.
    #[test]
    fn the_runs_of_generated_logs_are_stripped() {
        use crate::gen::{GenOptions, Generator};
        use crate::{Compression, FormatVersion, LogWriter};
        for version in [FormatVersion::V3, FormatVersion::V4] {
            let options = GenOptions {
                events: 300,
                seed: 3,
            };
            let mut generator = Generator::for_version(options, version).unwrap();
            let mut writer =
                LogWriter::new(Vec::new(), &generator.header(), Compression::None).unwrap();
            while let Some(batch) = generator.next_batch() {
                writer.append_batch(&batch).unwrap();
            }
            let text = String::from_utf8(writer.into_inner().unwrap()).unwrap();
            let (mut with_runs, mut stripped_rows) = (0, 0);
            for line in text.lines().skip(1) {
                if !line.contains(r#""texts":[""#) {
                    continue;
                }
                with_runs += 1;
                if let Some(out) = stripped(line) {
                    stripped_rows += 1;
                    assert!(!out.contains(r#""texts":[""#), "{out}");
                    serde_json::from_str::<serde_json::Value>(&out).unwrap();
                }
            }
            assert!(with_runs > 10, "{version:?}: {with_runs} rows with runs");
            assert_eq!(stripped_rows, with_runs, "{version:?}");
        }
    }

    // Goal: a row the pass cannot read with certainty (damaged, or cut short) is left as it
    // is, whatever its bytes, and the pass never panics.
    #[test]
    fn damaged_rows_are_left_alone_without_a_panic() {
        let row = r#"{"type":"assistant/message","data":{"stream":[{"type":"text-chunks","dt":[1],"texts":["a","b"]}]}}"#;
        for end in 0..row.len() {
            let cut = &row[..end];
            assert_eq!(stripped(cut), None, "{cut}");
        }
        for at in 0..row.len() {
            for byte in [b'"', b'\\', b'[', b']', b'{', b'}', b',', b':', b' ', b'x'] {
                let mut bytes = row.as_bytes().to_vec();
                bytes[at] = byte;
                if let Ok(text) = std::str::from_utf8(&bytes) {
                    let _ = stripped(text);
                }
            }
        }
    }
}
