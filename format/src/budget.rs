//! The decoded-size budget of one JSON line: how many values a row or header may hold.
//!
//! A row's bytes are bounded ([`crate::reader::ROW_SIZE_BYTES_MAX`]), but what a row costs once
//! decoded depends on its shape: a 30 MiB row `[1,1,1,...]` is 15 million values, each a
//! `serde_json::Value` of 32 bytes in a vector that doubles as it grows, and took 2.35 GB to
//! check (issue #20). So before a line is decoded, its values are counted in one pass over the
//! bytes (no allocation), and a line with more than [`JSON_VALUES_MAX`] is refused with a
//! `too-large` fault. Decoding an admitted line then costs at most about
//! [`DECODED_BYTES_PER_VALUE_MAX`] bytes per value on top of the line's own bytes.
//!
//! The count is every `[`, `{`, `:` and `,` outside strings: an array of n elements has one
//! bracket and n - 1 commas, an object of m members one brace, m colons and m - 1 commas, so
//! the count is within one per container of the number of arrays, objects, member names and
//! element or member values. Strings are skipped with `memchr`, so the pass runs at memory
//! speed. A line that is not valid JSON is counted all the same; the decoder then refuses it.

/// Most JSON values (arrays, objects, member names, elements and member values) one row or
/// header may hold: 1,048,576. The busiest row of the dsh fixtures holds 268, and the budget
/// keeps a decoded row under about 128 MiB beyond its bytes.
pub const JSON_VALUES_MAX: u64 = 1 << 20;

/// The most a decoded value costs beyond the bytes of its text, as a planning figure for
/// [`JSON_VALUES_MAX`]: a 32-byte `Value`, the slack of a doubling vector, and an ordered map's
/// entry and index for a member.
pub const DECODED_BYTES_PER_VALUE_MAX: u64 = 128;

/// Counts the values of `line` as described in the module text, stopping at `limit + 1`.
pub fn count_values(line: &[u8], limit: u64) -> u64 {
    let mut count = 0u64;
    let mut pos = 0;
    while pos < line.len() {
        match line[pos] {
            b'"' => pos = string_end(line, pos + 1),
            b'[' | b'{' | b':' | b',' => {
                count += 1;
                if count > limit {
                    return count;
                }
                pos += 1;
            }
            _ => pos += 1,
        }
    }
    count
}

/// The index just past the string whose content starts at `pos` (the end of the line when it
/// is never closed).
fn string_end(line: &[u8], mut pos: usize) -> usize {
    while let Some(found) = memchr::memchr2(b'"', b'\\', &line[pos..]) {
        let at = pos + found;
        if line[at] == b'"' {
            return at + 1;
        }
        // An escape: skip the backslash and the byte it escapes.
        pos = at + 2;
        if pos >= line.len() {
            return line.len();
        }
    }
    line.len()
}

/// Refuses a line whose value count passes [`JSON_VALUES_MAX`]; the message names the limit.
///
/// Every counted value is one byte of the line, so a line of at most [`JSON_VALUES_MAX`] bytes
/// is within the budget without a scan: the scan runs only for the rare line longer than
/// that, and costs the ordinary read nothing.
pub fn check_values(line: &[u8]) -> Result<(), String> {
    if line.len() as u64 <= JSON_VALUES_MAX {
        return Ok(());
    }
    let count = count_values(line, JSON_VALUES_MAX);
    if count > JSON_VALUES_MAX {
        return Err(format!(
            "the line holds more than {JSON_VALUES_MAX} JSON values (arrays, objects, member \
             names and values); refused before decoding"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the count matches the number of values of ordinary shapes, within one per
    // container, and ignores structural bytes inside strings, escaped quotes included.
    #[test]
    fn counts_values_and_skips_strings() {
        assert_eq!(count_values(b"[1,2,3]", u64::MAX), 3);
        assert_eq!(count_values(br#"{"a":1,"b":[true,null]}"#, u64::MAX), 6);
        assert_eq!(count_values(br#"{"a":"[,:{\"],"}"#, u64::MAX), 2);
        assert_eq!(count_values(br#""\\",[""#, u64::MAX), 2);
        assert_eq!(count_values(br#""unterminated [,,,"#, u64::MAX), 0);
        assert_eq!(count_values(br#""ends in \"#, u64::MAX), 0);
    }

    // Goal: a wide array one past the budget is refused, one at the budget is not, and the
    // count stops early instead of scanning the rest.
    #[test]
    fn budget_is_exact_at_the_limit() {
        let wide = |n: u64| {
            let mut line = b"[".to_vec();
            for idx in 0..n {
                line.extend_from_slice(if idx == 0 { b"1" } else { b",1" });
            }
            line.push(b']');
            line
        };
        // `[` plus n - 1 commas: n values.
        assert!(check_values(&wide(JSON_VALUES_MAX)).is_ok());
        let refused = check_values(&wide(JSON_VALUES_MAX + 1)).unwrap_err();
        assert!(refused.contains("1048576 JSON values"), "{refused}");
        assert_eq!(count_values(&wide(10), 3), 4);
    }

    // Goal: the short cut of `check_values` is exact: a count never passes the line's length,
    // so a line of at most the budget's bytes needs no scan. Method: the densest shapes (every
    // byte structural) count exactly their length, and nothing counts more.
    #[test]
    fn a_count_never_passes_the_line_length() {
        for line in [
            &b"[[[[[["[..],
            b",,,,,,",
            b"{:{:{:",
            b"[,{:",
            b"",
            b"\"[\"[,",
        ] {
            assert!(
                count_values(line, u64::MAX) <= line.len() as u64,
                "{line:?}"
            );
        }
        assert_eq!(count_values(b"[,{:[,{:", u64::MAX), 8);
        let dense = vec![b','; JSON_VALUES_MAX as usize];
        assert_eq!(count_values(&dense, u64::MAX), JSON_VALUES_MAX);
        assert!(check_values(&dense).is_ok());
    }
}
