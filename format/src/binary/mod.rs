//! Sessionlog binary JSON, version 1: a compact, validated binary encoding of event payloads.
//!
//! The embedded store keeps each event payload as one binary value. Payloads are JSON-shaped
//! (typed structs whose unknown members are `serde_json::Value`s, opaque `Value` payloads), so
//! the encoding is a self-describing tree driven by serde, and decoding goes through the same
//! hand-written visitors as the JSON path: one model, two codecs. Keys and strings decode
//! zero-copy as `&str` borrowed from the record.
//!
//! # Layout
//!
//! A value is one tag byte followed by the body of that tag. "varint" is an unsigned LEB128
//! integer: seven bits per byte, least significant group first, the high bit set on every byte
//! but the last. A varint is at most 10 bytes, in its shortest form (its last byte is not
//! `0x00` unless it is the only byte), and fits in a u64. Fixed-width numbers are little-endian.
//!
//! | Tag    | Value          | Body                                                          |
//! |--------|----------------|---------------------------------------------------------------|
//! | `0x00` | null           | none                                                          |
//! | `0x01` | false          | none                                                          |
//! | `0x02` | true           | none                                                          |
//! | `0x03` | integer `>= 0` | varint of the value, `0` to `2^64 - 1`                        |
//! | `0x04` | integer `< 0`  | varint of `!v` (that is `-1 - v`), `0` to `2^63 - 1`          |
//! | `0x05` | float          | 8 bytes, IEEE 754 binary64, little-endian                     |
//! | `0x06` | string         | varint byte length, then that many bytes of UTF-8             |
//! | `0x07` | array          | varint element count, then the elements                       |
//! | `0x08` | object         | varint member count, then per member a key and a value        |
//! | `0x09` | bytes          | varint byte length, then the raw bytes                        |
//!
//! - An object key is a string body without a tag: varint byte length, then UTF-8. Members
//!   keep their written order; this layer does not forbid a repeated key (the typed decoders
//!   refuse one, as they do in JSON).
//! - Integers and floats stay distinct, exactly as `serde_json::Number` keeps them: a u64 and a
//!   non-negative i64 are `0x03`, a negative i64 is `0x04`, an f64 (or a widened f32) is
//!   `0x05`, so decoding gives back an equal `Value`. `0x04` holds only negative numbers, so it
//!   stores `!v` rather than a zigzag code: `-1` is `0x00`, and no code is wasted on the
//!   non-negative half. The decoded varint must be at most `i64::MAX`.
//! - A float is finite and never negative zero (JSON cannot hold the first, and the dsh data
//!   model refuses the second, spec 12.1); both are refused on encode and on decode.
//! - Any other tag is invalid. A length or count larger than the bytes that remain is invalid
//!   before anything is allocated, containers nest at most [`DEPTH_MAX`] deep, and a value
//!   fills its buffer exactly: trailing bytes are invalid.
//!
//! Mapping from serde: structs and maps are objects (map keys must be strings), sequences and
//! tuples are arrays, `None` and `()` are null, a unit variant is its name as a string, and a
//! newtype, tuple or struct variant is a one-member object `{variant: value}`, as in
//! serde_json. Both sides report themselves human-readable, as serde_json does, so that a type
//! whose form depends on it (a timestamp, an address) writes the same tree as in JSON. The
//! encoding is deterministic: the same serde calls give the same bytes.
//!
//! For example `{"a":[1,-2,1.5,"x",null,true]}` is
//! `08 01 | 01 61 | 07 06 | 03 01 | 04 01 | 05 00 00 00 00 00 00 f8 3f | 06 01 78 | 00 | 02`.
//!
//! ```
//! use sessionlog_format::binary;
//! use serde_json::{json, Value};
//!
//! let value = json!({"a": [1, -2, 1.5, "x", null, true]});
//! let mut bytes = Vec::new();
//! binary::to_vec(&value, &mut bytes).unwrap();
//! binary::validate(&bytes).unwrap();
//! assert_eq!(binary::from_slice::<Value>(&bytes).unwrap(), value);
//! ```

mod de;
mod ser;
#[cfg(test)]
mod tests;
mod validate;
pub(crate) mod varint;

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeSeed;
use serde::{Deserialize, Serialize};

use de::{Decoder, Reader};
use ser::Encoder;
use validate::skip_value;

/// The version of the layout above. A record that stores binary payloads names it.
pub const VERSION: u8 = 1;

/// Deepest nesting of arrays and objects, on encode and on decode.
pub const DEPTH_MAX: u32 = 128;

const TAG_NULL: u8 = 0x00;
const TAG_FALSE: u8 = 0x01;
const TAG_TRUE: u8 = 0x02;
const TAG_UINT: u8 = 0x03;
const TAG_NEGATIVE_INT: u8 = 0x04;
const TAG_FLOAT: u8 = 0x05;
const TAG_STRING: u8 = 0x06;
const TAG_ARRAY: u8 = 0x07;
const TAG_OBJECT: u8 = 0x08;
const TAG_BYTES: u8 = 0x09;

/// A u64 needs ten groups of seven bits.
const VARINT_SIZE_BYTES_MAX: usize = 10;
const FLOAT_SIZE_BYTES: usize = 8;
/// The bit pattern of -0.0, the one finite float the format refuses.
const NEGATIVE_ZERO_BITS: u64 = 1 << 63;

const _: () = assert!(VARINT_SIZE_BYTES_MAX == (u64::BITS as usize).div_ceil(7));
const _: () = assert!(FLOAT_SIZE_BYTES == std::mem::size_of::<f64>());
const _: () = assert!(NEGATIVE_ZERO_BITS == (-0.0f64).to_bits());
// The tags are dense from 0x00; a new tag takes the next value and bumps VERSION.
const _: () = assert!(TAG_BYTES == TAG_NULL + 9);

/// Why a value could not be encoded or decoded.
///
/// `offset_bytes` is a position in the input when decoding, and in the value's own encoding
/// (from its first byte) when encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BinaryError {
    #[error("input ends inside the item at offset {offset_bytes}")]
    Truncated { offset_bytes: u64 },
    #[error("unknown tag {tag:#04x} at offset {offset_bytes}")]
    UnknownTag { offset_bytes: u64, tag: u8 },
    #[error("varint at offset {offset_bytes} is longer than {VARINT_SIZE_BYTES_MAX} bytes")]
    VarintTooLong { offset_bytes: u64 },
    #[error("varint at offset {offset_bytes} overflows u64")]
    VarintOverflow { offset_bytes: u64 },
    #[error("varint at offset {offset_bytes} is not in its shortest form")]
    VarintNotMinimal { offset_bytes: u64 },
    #[error("integer at offset {offset_bytes} is out of the 64-bit range")]
    IntegerOutOfRange { offset_bytes: u64 },
    #[error("float at offset {offset_bytes} is negative zero")]
    NegativeZero { offset_bytes: u64 },
    #[error("float at offset {offset_bytes} is not finite")]
    NonFiniteFloat { offset_bytes: u64 },
    #[error("length {claimed} at offset {offset_bytes} exceeds the {remaining_bytes} bytes left")]
    LengthExceedsInput {
        offset_bytes: u64,
        claimed: u64,
        remaining_bytes: u64,
    },
    #[error("string at offset {offset_bytes} is not valid UTF-8")]
    InvalidUtf8 { offset_bytes: u64 },
    #[error("container at offset {offset_bytes} nests deeper than {depth_max} levels")]
    TooDeep { offset_bytes: u64, depth_max: u32 },
    #[error("{n_bytes} bytes follow the value that ends at offset {offset_bytes}")]
    TrailingBytes { offset_bytes: u64, n_bytes: u64 },
    /// A visitor returned before reading the whole container.
    #[error("container at offset {offset_bytes} has {n_unread} items its decoder left unread")]
    UnreadItems { offset_bytes: u64, n_unread: u64 },
    /// A serializer wrote a different number of items than it declared.
    #[error("container declared {n_declared} items but wrote {n_written}")]
    LengthMismatch { n_declared: u64, n_written: u64 },
    #[error("object key is not a string")]
    KeyNotString,
    #[error("invalid type: {unexpected}, expected {expected}")]
    InvalidType {
        unexpected: String,
        expected: String,
    },
    /// A message from a `Serialize` or `Deserialize` implementation.
    #[error("{0}")]
    Custom(String),
}

impl serde::de::Error for BinaryError {
    fn custom<T: fmt::Display>(message: T) -> BinaryError {
        BinaryError::Custom(message.to_string())
    }

    fn invalid_type(
        unexpected: serde::de::Unexpected,
        expected: &dyn serde::de::Expected,
    ) -> BinaryError {
        BinaryError::InvalidType {
            unexpected: unexpected.to_string(),
            expected: expected.to_string(),
        }
    }
}

impl serde::ser::Error for BinaryError {
    fn custom<T: fmt::Display>(message: T) -> BinaryError {
        BinaryError::Custom(message.to_string())
    }
}

/// Appends the encoding of `value` to `out`. On error `out` is left as it was.
pub fn to_vec<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), BinaryError> {
    let start = out.len();
    let mut encoder = Encoder {
        out,
        start,
        depth: 0,
    };
    if let Err(error) = value.serialize(&mut encoder) {
        out.truncate(start);
        return Err(error);
    }
    assert_eq!(encoder.depth, 0, "every container closes what it opened");
    assert!(out.len() > start, "a value is at least its tag");
    debug_assert_eq!(validate(&out[start..]), Ok(()));
    Ok(())
}

/// Decodes one value that fills `bytes` exactly.
pub fn from_slice<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, BinaryError> {
    from_slice_seed(bytes, PhantomData)
}

/// Decodes one value that fills `bytes` exactly, through a seed (for a payload whose type
/// depends on its event type).
pub fn from_slice_seed<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> Result<S::Value, BinaryError> {
    let mut decoder = Decoder {
        reader: Reader::new(bytes),
        depth: 0,
    };
    let value = seed.deserialize(&mut decoder)?;
    assert_eq!(
        decoder.depth, 0,
        "every container leaves the depth it entered"
    );
    decoder.reader.finish()?;
    Ok(value)
}

/// Checks that `bytes` hold exactly one valid value, with every check that [`from_slice`]
/// makes on the layout, without building the value or allocating.
pub fn validate(bytes: &[u8]) -> Result<(), BinaryError> {
    let mut reader = Reader::new(bytes);
    skip_value(&mut reader, 0)?;
    reader.finish()
}

/// The float rule shared by both sides: finite, and never negative zero.
#[inline]
fn check_float(value: f64, offset_bytes: u64) -> Result<f64, BinaryError> {
    if value.to_bits() == NEGATIVE_ZERO_BITS {
        return Err(BinaryError::NegativeZero { offset_bytes });
    }
    if !value.is_finite() {
        return Err(BinaryError::NonFiniteFloat { offset_bytes });
    }
    Ok(value)
}
