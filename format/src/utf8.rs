//! The UTF-8 check of the strings every reader takes in: a JSONL row as a whole, and each
//! string of a binary body (verify decodes every one). It is SIMD (`simdutf8`) over long text,
//! where the standard library's check took 7% of verify's samples, and gives the standard
//! library's verdict on every input; the callers never used its error detail.

/// `bytes` as text when they are valid UTF-8.
#[inline]
pub(crate) fn text(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::text;

    /// Bytes near the edges of UTF-8: continuation bytes, lead bytes of every length,
    /// surrogates, overlong forms and bytes that never occur, between runs of ASCII long
    /// enough to reach the SIMD path.
    fn edgy_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(vec![b'a'; 70]),
            Just("\u{e9}".as_bytes().to_vec()),
            Just("\u{20ac}".as_bytes().to_vec()),
            Just("\u{1f600}".as_bytes().to_vec()),
            Just(vec![0xed, 0xa0, 0x80]),
            Just(vec![0xc0, 0xaf]),
            Just(vec![0xf4, 0x90, 0x80, 0x80]),
            Just(vec![0xff]),
            Just(vec![0x80]),
            Just(vec![0xe2, 0x82]),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn the_check_agrees_with_the_standard_library(bytes in edgy_bytes()) {
            prop_assert_eq!(text(&bytes), std::str::from_utf8(&bytes).ok());
        }

        #[test]
        fn the_check_agrees_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(text(&bytes), std::str::from_utf8(&bytes).ok());
        }
    }

    #[test]
    fn one_bad_byte_after_a_long_valid_run_is_found() {
        for at in [0, 1, 31, 32, 63, 64, 65, 127, 128, 200] {
            let mut bytes = "\u{e9}x".repeat(100).into_bytes();
            bytes[at] = 0xff;
            assert_eq!(text(&bytes), None, "a bad byte at {at}");
        }
        let valid = "\u{e9}x".repeat(100);
        assert_eq!(text(valid.as_bytes()), Some(valid.as_str()));
    }
}
