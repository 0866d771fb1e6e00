//! Eight bytes of JSON text at a time: which bytes of a little-endian word end a plain run of
//! string text (`"`, `\`, a control character), for the stripping pass's scans
//! ([`crate::strip`]) and for writing strings that need no escape
//! ([`crate::surface`]'s rewrite identity).

/// Whether a JSON string holding `text` needs no escape: no `"`, `\` or control character,
/// the bytes serde_json escapes. Eight bytes at a time.
pub(crate) fn needs_no_escape(text: &[u8]) -> bool {
    let mut words = text.chunks_exact(8);
    let plain_words = words
        .by_ref()
        .all(|chunk| special_bytes(u64::from_le_bytes(chunk.try_into().expect("8 bytes"))) == 0);
    plain_words && (words.remainder().iter()).all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// The bytes of `word` that are `"` or `\`, marked as [`special_bytes`] marks them.
#[inline]
pub(crate) fn quote_or_backslash_bytes(word: u64) -> u64 {
    zero_bytes(word ^ (ONES * u64::from(b'"'))) | zero_bytes(word ^ (ONES * u64::from(b'\\')))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` below `bound` (at most 0x80), each marked by its high bit; the lowest
/// mark is exact.
#[inline]
fn bytes_below(word: u64, bound: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(bound)) & !word & HIGHS
}

/// The zero bytes of `word`, marked as [`bytes_below`] marks them.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    bytes_below(word, 1)
}

/// The bytes of `word` (read little-endian: its lowest byte first in the text) that are `"`,
/// `\` or a control character, each marked by its high bit. The lowest mark is exact, so
/// `trailing_zeros() / 8` is the index of the first such byte; a mark above it may be a
/// borrow's, which is never read. Bytes of 0x80 and above (UTF-8 beyond ASCII) are never
/// marked.
#[inline]
pub(crate) fn special_bytes(word: u64) -> u64 {
    bytes_below(word, 0x20) | quote_or_backslash_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the eight-byte check marks exactly the bytes that end a plain run, at every
    // position of the word, and its lowest mark is the first of them.
    // Method: every byte value at every position of a word of plain letters, then two
    // special bytes in one word.
    #[test]
    fn the_word_check_finds_the_first_special_byte() {
        for position in 0..8 {
            for byte in 0..=255u8 {
                let mut word = *b"abcdefgh";
                word[position] = byte;
                let marks = special_bytes(u64::from_le_bytes(word));
                let special = byte < 0x20 || byte == b'"' || byte == b'\\';
                assert_eq!(marks != 0, special, "byte {byte:#04x} at {position}");
                if special {
                    assert_eq!(marks.trailing_zeros() / 8, position as u32);
                }
            }
        }
        for (first, second) in [(0usize, 1usize), (2, 3), (3, 7), (6, 7)] {
            for (a, b) in [(0x00u8, b'"'), (b'\\', 0x1f), (b'"', b'"'), (0x01, 0x00)] {
                let mut word = *b"\xff\x80zzzzzz";
                word[first] = a;
                word[second] = b;
                let marks = special_bytes(u64::from_le_bytes(word));
                assert_eq!(marks.trailing_zeros() / 8, first as u32);
            }
        }
    }

    // Goal: `needs_no_escape` answers what the byte-at-a-time definition answers, whatever the
    // length and wherever the byte that needs an escape is.
    // Method: every length from 0 to 24; for each, plain text, then every escaped byte kind
    // and a byte beyond ASCII at every position.
    #[test]
    fn needs_no_escape_is_the_bytewise_check() {
        let bytewise = |text: &[u8]| text.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\');
        for len in 0..=24 {
            let plain = vec![b'a'; len];
            assert!(needs_no_escape(&plain), "length {len}");
            for position in 0..len {
                for byte in [0x00, 0x1f, b'"', b'\\', 0x7f, 0x80, 0xff] {
                    let mut text = plain.clone();
                    text[position] = byte;
                    assert_eq!(
                        needs_no_escape(&text),
                        bytewise(&text),
                        "{byte:#04x} at {position} of {len}"
                    );
                }
            }
        }
    }
}
