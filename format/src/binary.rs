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
//!   model refuses the second, spec §12.1); both are refused on encode and on decode.
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

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Visitor};
use serde::ser::{self, Serialize};
use serde::Deserialize;

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

impl de::Error for BinaryError {
    fn custom<T: fmt::Display>(message: T) -> BinaryError {
        BinaryError::Custom(message.to_string())
    }

    fn invalid_type(unexpected: de::Unexpected, expected: &dyn de::Expected) -> BinaryError {
        BinaryError::InvalidType {
            unexpected: unexpected.to_string(),
            expected: expected.to_string(),
        }
    }
}

impl ser::Error for BinaryError {
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

/// A cursor over the input. Every read checks bounds and layout rules, and borrows from the
/// input rather than copying. The reads that `validate` makes per item are
/// `#[inline(always)]`: outlined, each returns its `Result` through memory, and the walk is
/// dominated by per-item overhead (payload values average a few bytes).
struct Reader<'de> {
    input: &'de [u8],
    pos: usize,
}

impl<'de> Reader<'de> {
    fn new(input: &'de [u8]) -> Reader<'de> {
        Reader { input, pos: 0 }
    }

    #[inline]
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    #[inline]
    fn remaining_bytes(&self) -> usize {
        self.input.len() - self.pos
    }

    #[inline]
    fn peek_tag(&self) -> Result<u8, BinaryError> {
        match self.input.get(self.pos) {
            Some(&tag) => Ok(tag),
            None => Err(BinaryError::Truncated {
                offset_bytes: self.offset(),
            }),
        }
    }

    #[inline(always)]
    fn read_tag(&mut self) -> Result<u8, BinaryError> {
        let tag = self.peek_tag()?;
        self.pos += 1;
        Ok(tag)
    }

    #[inline(always)]
    fn read_varint(&mut self) -> Result<u64, BinaryError> {
        // Most lengths, counts and integers fit in one byte.
        if let Some(&byte) = self.input.get(self.pos) {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
        }
        self.read_varint_multibyte()
    }

    fn read_varint_multibyte(&mut self) -> Result<u64, BinaryError> {
        let offset_bytes = self.offset();
        let mut value = 0u64;
        for byte_idx in 0..VARINT_SIZE_BYTES_MAX {
            let Some(&byte) = self.input.get(self.pos) else {
                return Err(BinaryError::Truncated { offset_bytes });
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * byte_idx);
            if byte < 0x80 {
                if byte == 0 && byte_idx > 0 {
                    return Err(BinaryError::VarintNotMinimal { offset_bytes });
                }
                // The tenth byte carries bit 63 only.
                if byte_idx == VARINT_SIZE_BYTES_MAX - 1 && byte > 1 {
                    return Err(BinaryError::VarintOverflow { offset_bytes });
                }
                return Ok(value);
            }
        }
        Err(BinaryError::VarintTooLong { offset_bytes })
    }

    #[inline]
    fn read_negative(&mut self) -> Result<i64, BinaryError> {
        let offset_bytes = self.offset();
        let inverted = self.read_varint()?;
        match i64::try_from(inverted) {
            Ok(inverted) => Ok(!inverted),
            Err(_) => Err(BinaryError::IntegerOutOfRange { offset_bytes }),
        }
    }

    #[inline]
    fn read_float(&mut self) -> Result<f64, BinaryError> {
        let offset_bytes = self.offset();
        let Some(bytes) = self.input.get(self.pos..self.pos + FLOAT_SIZE_BYTES) else {
            return Err(BinaryError::Truncated { offset_bytes });
        };
        let bits = u64::from_le_bytes(bytes.try_into().expect("the slice is 8 bytes long"));
        self.pos += FLOAT_SIZE_BYTES;
        check_float(f64::from_bits(bits), offset_bytes)
    }

    /// A length or count, refused before any use when it exceeds the bytes that remain (every
    /// item takes at least one byte).
    #[inline(always)]
    fn read_len(&mut self) -> Result<usize, BinaryError> {
        let offset_bytes = self.offset();
        let claimed = self.read_varint()?;
        let remaining_bytes = self.remaining_bytes() as u64;
        if claimed > remaining_bytes {
            return Err(BinaryError::LengthExceedsInput {
                offset_bytes,
                claimed,
                remaining_bytes,
            });
        }
        Ok(usize::try_from(claimed).expect("a length within the input fits in usize"))
    }

    #[inline]
    fn read_count(&mut self) -> Result<u64, BinaryError> {
        Ok(self.read_len()? as u64)
    }

    #[inline]
    fn read_bytes(&mut self) -> Result<&'de [u8], BinaryError> {
        let size_bytes = self.read_len()?;
        let bytes = &self.input[self.pos..self.pos + size_bytes];
        self.pos += size_bytes;
        Ok(bytes)
    }

    /// A string body: the value of a `0x06` tag, or an object key.
    #[inline]
    fn read_str(&mut self) -> Result<&'de str, BinaryError> {
        let size_bytes = self.read_len()?;
        let offset_bytes = self.offset();
        let bytes = &self.input[self.pos..self.pos + size_bytes];
        self.pos += size_bytes;
        std::str::from_utf8(bytes).map_err(|_| BinaryError::InvalidUtf8 { offset_bytes })
    }

    /// Checks a string body without producing the `&str`: ASCII, the common case, is checked
    /// a word at a time, and only other text goes through the full UTF-8 check.
    #[inline(always)]
    fn skip_str(&mut self) -> Result<(), BinaryError> {
        let size_bytes = self.read_len()?;
        let offset_bytes = self.offset();
        let bytes = &self.input[self.pos..self.pos + size_bytes];
        self.pos += size_bytes;
        if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
            return Ok(());
        }
        Err(BinaryError::InvalidUtf8 { offset_bytes })
    }

    fn finish(&self) -> Result<(), BinaryError> {
        match self.remaining_bytes() {
            0 => Ok(()),
            n_bytes => Err(BinaryError::TrailingBytes {
                offset_bytes: self.offset(),
                n_bytes: n_bytes as u64,
            }),
        }
    }
}

fn check_float(value: f64, offset_bytes: u64) -> Result<f64, BinaryError> {
    if value.to_bits() == NEGATIVE_ZERO_BITS {
        return Err(BinaryError::NegativeZero { offset_bytes });
    }
    if !value.is_finite() {
        return Err(BinaryError::NonFiniteFloat { offset_bytes });
    }
    Ok(value)
}

/// Walks one value without building it, making every check the decoder makes. The walk is a
/// loop over an explicit stack bounded by [`DEPTH_MAX`], so hostile nesting cannot overflow
/// the call stack; `depth` is the nesting the value already sits in.
fn skip_value(reader: &mut Reader<'_>, depth: u32) -> Result<(), BinaryError> {
    assert!(depth <= DEPTH_MAX);
    // The open containers, innermost last: the items each has left, and whether its items
    // are object members (a key, then a value).
    let mut n_remaining = [0u64; DEPTH_MAX as usize];
    let mut keyed = [false; DEPTH_MAX as usize];
    let mut n_open = 0usize;
    loop {
        let offset_bytes = reader.offset();
        match reader.read_tag()? {
            TAG_NULL | TAG_FALSE | TAG_TRUE => {}
            TAG_UINT => {
                reader.read_varint()?;
            }
            TAG_NEGATIVE_INT => {
                reader.read_negative()?;
            }
            TAG_FLOAT => {
                reader.read_float()?;
            }
            TAG_STRING => reader.skip_str()?,
            TAG_BYTES => {
                reader.read_bytes()?;
            }
            tag @ (TAG_ARRAY | TAG_OBJECT) => {
                let n_items = reader.read_count()?;
                if depth + n_open as u32 >= DEPTH_MAX {
                    return Err(BinaryError::TooDeep {
                        offset_bytes,
                        depth_max: DEPTH_MAX,
                    });
                }
                n_remaining[n_open] = n_items;
                keyed[n_open] = tag == TAG_OBJECT;
                n_open += 1;
            }
            tag => return Err(BinaryError::UnknownTag { offset_bytes, tag }),
        }
        // Move to the next value: close finished containers, read a member's key.
        loop {
            let Some(top) = n_open.checked_sub(1) else {
                return Ok(());
            };
            if n_remaining[top] == 0 {
                n_open = top;
                continue;
            }
            n_remaining[top] -= 1;
            if keyed[top] {
                reader.skip_str()?;
            }
            break;
        }
    }
}

/// The serde deserializer over one input.
struct Decoder<'de> {
    reader: Reader<'de>,
    /// Arrays and objects open around the current value.
    depth: u32,
}

impl<'de> Decoder<'de> {
    fn enter(&mut self, offset_bytes: u64) -> Result<(), BinaryError> {
        if self.depth >= DEPTH_MAX {
            return Err(BinaryError::TooDeep {
                offset_bytes,
                depth_max: DEPTH_MAX,
            });
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        assert!(self.depth > 0, "leave follows enter");
        self.depth -= 1;
    }

    fn visit_array<V: Visitor<'de>>(
        &mut self,
        offset_bytes: u64,
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        let n_items = self.reader.read_count()?;
        self.enter(offset_bytes)?;
        let mut items = Items {
            decoder: self,
            n_remaining: n_items,
        };
        let result = visitor.visit_seq(&mut items);
        let n_unread = items.n_remaining;
        self.leave();
        let value = result?;
        if n_unread != 0 {
            return Err(BinaryError::UnreadItems {
                offset_bytes,
                n_unread,
            });
        }
        Ok(value)
    }

    fn visit_object<V: Visitor<'de>>(
        &mut self,
        offset_bytes: u64,
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        let n_members = self.reader.read_count()?;
        self.enter(offset_bytes)?;
        let mut members = Members {
            decoder: self,
            n_remaining: n_members,
            value_pending: false,
        };
        let result = visitor.visit_map(&mut members);
        let n_unread = members.n_remaining + u64::from(members.value_pending);
        self.leave();
        let value = result?;
        if n_unread != 0 {
            return Err(BinaryError::UnreadItems {
                offset_bytes,
                n_unread,
            });
        }
        Ok(value)
    }
}

impl<'de> de::Deserializer<'de> for &mut Decoder<'de> {
    type Error = BinaryError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, BinaryError> {
        let offset_bytes = self.reader.offset();
        match self.reader.read_tag()? {
            TAG_NULL => visitor.visit_unit(),
            TAG_FALSE => visitor.visit_bool(false),
            TAG_TRUE => visitor.visit_bool(true),
            TAG_UINT => visitor.visit_u64(self.reader.read_varint()?),
            TAG_NEGATIVE_INT => visitor.visit_i64(self.reader.read_negative()?),
            TAG_FLOAT => visitor.visit_f64(self.reader.read_float()?),
            TAG_STRING => visitor.visit_borrowed_str(self.reader.read_str()?),
            TAG_ARRAY => self.visit_array(offset_bytes, visitor),
            TAG_OBJECT => self.visit_object(offset_bytes, visitor),
            TAG_BYTES => visitor.visit_borrowed_bytes(self.reader.read_bytes()?),
            tag => Err(BinaryError::UnknownTag { offset_bytes, tag }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, BinaryError> {
        if self.reader.peek_tag()? == TAG_NULL {
            self.reader.pos += 1;
            return visitor.visit_none();
        }
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        let offset_bytes = self.reader.offset();
        match self.reader.peek_tag()? {
            TAG_STRING => {
                self.reader.pos += 1;
                let variant = self.reader.read_str()?;
                visitor.visit_enum(BorrowedStrDeserializer::new(variant))
            }
            TAG_OBJECT => {
                self.reader.pos += 1;
                let n_members = self.reader.read_count()?;
                if n_members != 1 {
                    return Err(de::Error::invalid_length(
                        usize::try_from(n_members).expect("a count within the input fits"),
                        &"an object with exactly one member",
                    ));
                }
                self.enter(offset_bytes)?;
                let result = visitor.visit_enum(VariantAccess { decoder: self });
                self.leave();
                result
            }
            // Any other value: let the visitor name the type it did not expect.
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, BinaryError> {
        skip_value(&mut self.reader, self.depth)?;
        visitor.visit_unit()
    }

    /// As serde_json: see the module documentation.
    fn is_human_readable(&self) -> bool {
        true
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The elements of an array.
struct Items<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
    n_remaining: u64,
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = BinaryError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, BinaryError> {
        if self.n_remaining == 0 {
            return Ok(None);
        }
        self.n_remaining -= 1;
        seed.deserialize(&mut *self.decoder).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        // Bounded by the bytes left, so a hostile count cannot inflate a preallocation.
        usize::try_from(self.n_remaining).ok()
    }
}

/// The members of an object; keys are borrowed from the input.
struct Members<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
    n_remaining: u64,
    /// A key was read and its value was not.
    value_pending: bool,
}

impl<'de> de::MapAccess<'de> for Members<'_, 'de> {
    type Error = BinaryError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, BinaryError> {
        if self.n_remaining == 0 {
            return Ok(None);
        }
        assert!(
            !self.value_pending,
            "a visitor reads a value after each key"
        );
        self.n_remaining -= 1;
        let key = self.decoder.reader.read_str()?;
        self.value_pending = true;
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, BinaryError> {
        assert!(
            self.value_pending,
            "a visitor reads a key before each value"
        );
        self.value_pending = false;
        seed.deserialize(&mut *self.decoder)
    }

    fn size_hint(&self) -> Option<usize> {
        usize::try_from(self.n_remaining).ok()
    }
}

/// The one member of a `{variant: value}` object.
struct VariantAccess<'a, 'de> {
    decoder: &'a mut Decoder<'de>,
}

impl<'de> de::EnumAccess<'de> for VariantAccess<'_, 'de> {
    type Error = BinaryError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self), BinaryError> {
        let variant = self.decoder.reader.read_str()?;
        let variant = seed.deserialize(BorrowedStrDeserializer::new(variant))?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for VariantAccess<'_, 'de> {
    type Error = BinaryError;

    fn unit_variant(self) -> Result<(), BinaryError> {
        <()>::deserialize(&mut *self.decoder)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, BinaryError> {
        seed.deserialize(&mut *self.decoder)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        de::Deserializer::deserialize_any(&mut *self.decoder, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        de::Deserializer::deserialize_any(&mut *self.decoder, visitor)
    }
}

/// The serde serializer, appending to one buffer.
struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    /// Where this value's encoding starts in `out`.
    start: usize,
    /// Arrays and objects open around the current value.
    depth: u32,
}

/// An open array or object.
struct Container {
    /// Where the count is, or its one-byte placeholder when the length was not declared.
    count_pos: usize,
    n_declared: Option<u64>,
    n_written: u64,
}

impl Encoder<'_> {
    fn offset(&self) -> u64 {
        (self.out.len() - self.start) as u64
    }

    fn write_uint(&mut self, value: u64) {
        self.out.push(TAG_UINT);
        write_varint(self.out, value);
    }

    fn write_int(&mut self, value: i64) {
        match u64::try_from(value) {
            Ok(value) => self.write_uint(value),
            Err(_) => {
                self.out.push(TAG_NEGATIVE_INT);
                write_varint(self.out, (!value) as u64);
            }
        }
    }

    fn write_float(&mut self, value: f64) -> Result<(), BinaryError> {
        check_float(value, self.offset())?;
        self.out.push(TAG_FLOAT);
        self.out.extend_from_slice(&value.to_bits().to_le_bytes());
        Ok(())
    }

    fn write_str(&mut self, value: &str) {
        self.out.push(TAG_STRING);
        write_key(self.out, value);
    }

    /// Writes a container's tag and count. An undeclared count gets a one-byte placeholder
    /// that [`Encoder::close`] fills in, moving the items only when the count needs more.
    fn open(&mut self, tag: u8, len: Option<usize>) -> Result<Container, BinaryError> {
        if self.depth >= DEPTH_MAX {
            return Err(BinaryError::TooDeep {
                offset_bytes: self.offset(),
                depth_max: DEPTH_MAX,
            });
        }
        self.depth += 1;
        self.out.push(tag);
        let count_pos = self.out.len();
        let n_declared = len.map(|n| n as u64);
        match n_declared {
            Some(n) => write_varint(self.out, n),
            None => self.out.push(0),
        }
        Ok(Container {
            count_pos,
            n_declared,
            n_written: 0,
        })
    }

    fn close(&mut self, container: Container) -> Result<(), BinaryError> {
        assert!(self.depth > 0, "close follows open");
        assert!(container.count_pos < self.out.len());
        self.depth -= 1;
        let n_written = container.n_written;
        match container.n_declared {
            Some(n_declared) if n_declared == n_written => Ok(()),
            Some(n_declared) => Err(BinaryError::LengthMismatch {
                n_declared,
                n_written,
            }),
            None => {
                let mut count = [0u8; VARINT_SIZE_BYTES_MAX];
                let size_bytes = encode_varint(n_written, &mut count);
                let pos = container.count_pos;
                if size_bytes == 1 {
                    self.out[pos] = count[0];
                } else {
                    self.out
                        .splice(pos..pos + 1, count[..size_bytes].iter().copied());
                }
                Ok(())
            }
        }
    }

    /// Opens the one-member object `{variant: ...}` of a newtype, tuple or struct variant.
    fn open_variant(&mut self, variant: &str) -> Result<Container, BinaryError> {
        let mut container = self.open(TAG_OBJECT, Some(1))?;
        write_key(self.out, variant);
        container.n_written = 1;
        Ok(container)
    }
}

fn encode_varint(mut value: u64, buf: &mut [u8; VARINT_SIZE_BYTES_MAX]) -> usize {
    let mut size_bytes = 0;
    while value >= 0x80 {
        buf[size_bytes] = (value as u8) | 0x80;
        value >>= 7;
        size_bytes += 1;
    }
    buf[size_bytes] = value as u8;
    size_bytes + 1
}

#[inline]
fn write_varint(out: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        out.push(value as u8);
        return;
    }
    let mut buf = [0u8; VARINT_SIZE_BYTES_MAX];
    let size_bytes = encode_varint(value, &mut buf);
    out.extend_from_slice(&buf[..size_bytes]);
}

/// A string body without its tag: an object key, or the rest of a `0x06` value.
#[inline]
fn write_key(out: &mut Vec<u8>, key: &str) {
    write_varint(out, key.len() as u64);
    out.extend_from_slice(key.as_bytes());
}

impl<'s, 'a> ser::Serializer for &'s mut Encoder<'a> {
    type Ok = ();
    type Error = BinaryError;
    type SerializeSeq = Compound<'s, 'a>;
    type SerializeTuple = Compound<'s, 'a>;
    type SerializeTupleStruct = Compound<'s, 'a>;
    type SerializeTupleVariant = Compound<'s, 'a>;
    type SerializeMap = Compound<'s, 'a>;
    type SerializeStruct = Compound<'s, 'a>;
    type SerializeStructVariant = Compound<'s, 'a>;

    /// As serde_json: see the module documentation.
    fn is_human_readable(&self) -> bool {
        true
    }

    fn serialize_bool(self, value: bool) -> Result<(), BinaryError> {
        self.out.push(if value { TAG_TRUE } else { TAG_FALSE });
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result<(), BinaryError> {
        self.serialize_i64(i64::from(value))
    }

    fn serialize_i16(self, value: i16) -> Result<(), BinaryError> {
        self.serialize_i64(i64::from(value))
    }

    fn serialize_i32(self, value: i32) -> Result<(), BinaryError> {
        self.serialize_i64(i64::from(value))
    }

    fn serialize_i64(self, value: i64) -> Result<(), BinaryError> {
        self.write_int(value);
        Ok(())
    }

    fn serialize_i128(self, value: i128) -> Result<(), BinaryError> {
        if let Ok(value) = u64::try_from(value) {
            return self.serialize_u64(value);
        }
        match i64::try_from(value) {
            Ok(value) => self.serialize_i64(value),
            Err(_) => Err(BinaryError::IntegerOutOfRange {
                offset_bytes: self.offset(),
            }),
        }
    }

    fn serialize_u8(self, value: u8) -> Result<(), BinaryError> {
        self.serialize_u64(u64::from(value))
    }

    fn serialize_u16(self, value: u16) -> Result<(), BinaryError> {
        self.serialize_u64(u64::from(value))
    }

    fn serialize_u32(self, value: u32) -> Result<(), BinaryError> {
        self.serialize_u64(u64::from(value))
    }

    fn serialize_u64(self, value: u64) -> Result<(), BinaryError> {
        self.write_uint(value);
        Ok(())
    }

    fn serialize_u128(self, value: u128) -> Result<(), BinaryError> {
        match u64::try_from(value) {
            Ok(value) => self.serialize_u64(value),
            Err(_) => Err(BinaryError::IntegerOutOfRange {
                offset_bytes: self.offset(),
            }),
        }
    }

    fn serialize_f32(self, value: f32) -> Result<(), BinaryError> {
        self.write_float(f64::from(value))
    }

    fn serialize_f64(self, value: f64) -> Result<(), BinaryError> {
        self.write_float(value)
    }

    fn serialize_char(self, value: char) -> Result<(), BinaryError> {
        self.write_str(value.encode_utf8(&mut [0u8; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result<(), BinaryError> {
        self.write_str(value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), BinaryError> {
        self.out.push(TAG_BYTES);
        write_varint(self.out, value.len() as u64);
        self.out.extend_from_slice(value);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), BinaryError> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), BinaryError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), BinaryError> {
        self.out.push(TAG_NULL);
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), BinaryError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
    ) -> Result<(), BinaryError> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), BinaryError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), BinaryError> {
        let container = self.open_variant(variant)?;
        value.serialize(&mut *self)?;
        self.close(container)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'s, 'a>, BinaryError> {
        let container = self.open(TAG_ARRAY, len)?;
        Ok(Compound::new(self, container, None))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'s, 'a>, BinaryError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'a>, BinaryError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'a>, BinaryError> {
        let outer = self.open_variant(variant)?;
        let inner = self.open(TAG_ARRAY, Some(len))?;
        Ok(Compound::new(self, inner, Some(outer)))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'s, 'a>, BinaryError> {
        let container = self.open(TAG_OBJECT, len)?;
        Ok(Compound::new(self, container, None))
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'a>, BinaryError> {
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'a>, BinaryError> {
        let outer = self.open_variant(variant)?;
        let inner = self.open(TAG_OBJECT, Some(len))?;
        Ok(Compound::new(self, inner, Some(outer)))
    }
}

/// An array or object being written; for a tuple or struct variant, also the one-member
/// object around it.
struct Compound<'s, 'a> {
    encoder: &'s mut Encoder<'a>,
    container: Container,
    variant: Option<Container>,
}

impl<'s, 'a> Compound<'s, 'a> {
    fn new(
        encoder: &'s mut Encoder<'a>,
        container: Container,
        variant: Option<Container>,
    ) -> Compound<'s, 'a> {
        Compound {
            encoder,
            container,
            variant,
        }
    }

    fn write_item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        self.container.n_written += 1;
        value.serialize(&mut *self.encoder)
    }

    fn write_member<T: Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), BinaryError> {
        self.container.n_written += 1;
        write_key(self.encoder.out, key);
        value.serialize(&mut *self.encoder)
    }

    fn end(self) -> Result<(), BinaryError> {
        self.encoder.close(self.container)?;
        match self.variant {
            Some(outer) => self.encoder.close(outer),
            None => Ok(()),
        }
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        self.write_item(value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        self.write_item(value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        self.write_item(value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        self.write_item(value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), BinaryError> {
        self.container.n_written += 1;
        key.serialize(KeyEncoder {
            out: self.encoder.out,
        })
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), BinaryError> {
        value.serialize(&mut *self.encoder)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), BinaryError> {
        self.write_member(key, value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = BinaryError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), BinaryError> {
        self.write_member(key, value)
    }

    fn end(self) -> Result<(), BinaryError> {
        Compound::end(self)
    }
}

/// Writes an object key: a string body without a tag. Anything that does not serialize as a
/// string (a char, a unit variant's name, a newtype around one) is refused.
struct KeyEncoder<'a> {
    out: &'a mut Vec<u8>,
}

/// Refuses a non-string key; the arguments are the serializer method's, ignored.
macro_rules! refuse_key {
    ($( $method:ident ( $($arg:ty),* ) -> $ok:ty; )*) => {
        $(
            fn $method(self, $(_: $arg),*) -> Result<$ok, BinaryError> {
                Err(BinaryError::KeyNotString)
            }
        )*
    };
}

impl ser::Serializer for KeyEncoder<'_> {
    type Ok = ();
    type Error = BinaryError;
    type SerializeSeq = ser::Impossible<(), BinaryError>;
    type SerializeTuple = ser::Impossible<(), BinaryError>;
    type SerializeTupleStruct = ser::Impossible<(), BinaryError>;
    type SerializeTupleVariant = ser::Impossible<(), BinaryError>;
    type SerializeMap = ser::Impossible<(), BinaryError>;
    type SerializeStruct = ser::Impossible<(), BinaryError>;
    type SerializeStructVariant = ser::Impossible<(), BinaryError>;

    fn serialize_str(self, value: &str) -> Result<(), BinaryError> {
        write_key(self.out, value);
        Ok(())
    }

    fn serialize_char(self, value: char) -> Result<(), BinaryError> {
        self.serialize_str(value.encode_utf8(&mut [0u8; 4]))
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _variant_index: u32,
        variant: &'static str,
    ) -> Result<(), BinaryError> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), BinaryError> {
        value.serialize(self)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), BinaryError> {
        Err(BinaryError::KeyNotString)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _variant_index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), BinaryError> {
        Err(BinaryError::KeyNotString)
    }

    refuse_key! {
        serialize_bool(bool) -> ();
        serialize_i8(i8) -> ();
        serialize_i16(i16) -> ();
        serialize_i32(i32) -> ();
        serialize_i64(i64) -> ();
        serialize_u8(u8) -> ();
        serialize_u16(u16) -> ();
        serialize_u32(u32) -> ();
        serialize_u64(u64) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize)
            -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize)
            -> Self::SerializeStructVariant;
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use pretty_assertions::assert_eq;
    use proptest::prelude::*;
    use proptest::test_runner::Config;
    use serde::de::DeserializeSeed;
    use serde_json::{json, Number, Value};

    use super::*;
    use crate::event::{DataSeed, EventData, EventType};
    use crate::gen::{GenOptions, Generator};
    use crate::json::Key;
    use crate::row::DataRef;

    fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
        let mut bytes = Vec::new();
        to_vec(value, &mut bytes).unwrap();
        bytes
    }

    /// Encodes `value`, decodes it, and checks that the result is equal, that `validate`
    /// agrees, and that the bytes decode to the tree serde_json builds from `value`.
    fn check_value(value: &Value) -> Vec<u8> {
        let bytes = encode(value);
        assert_eq!(validate(&bytes), Ok(()));
        let decoded: Value = from_slice(&bytes).unwrap();
        assert_eq!(&decoded, value);
        // `Value` equality ignores key order (an IndexMap); the bytes do not.
        assert_eq!(encode(&decoded), bytes);
        bytes
    }

    /// Round-trips a payload through the binary codec with the typed seed of its event type.
    fn check_payload(kind: &EventType, data: &EventData) {
        let bytes = encode(&DataRef(data));
        assert_eq!(validate(&bytes), Ok(()));
        let decoded = from_slice_seed(&bytes, DataSeed(kind)).unwrap();
        assert_eq!(&decoded, data, "{kind}");
        let tree: Value = from_slice(&bytes).unwrap();
        assert_eq!(tree, serde_json::to_value(DataRef(data)).unwrap(), "{kind}");
    }

    fn decode_json_payload(kind: &EventType, text: &str) -> EventData {
        let mut de = serde_json::Deserializer::from_str(text);
        DataSeed(kind).deserialize(&mut de).unwrap()
    }

    /// Accepts any value through `deserialize_any`, so that it takes the visitor path rather
    /// than the structural walk that `IgnoredAny` takes.
    struct Any;

    impl<'de> Deserialize<'de> for Any {
        fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Any, D::Error> {
            deserializer.deserialize_any(AnyVisitor)
        }
    }

    struct AnyVisitor;

    impl<'de> Visitor<'de> for AnyVisitor {
        type Value = Any;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_borrowed_bytes<E: de::Error>(self, _: &'de [u8]) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Any, A::Error> {
            while seq.next_element::<Any>()?.is_some() {}
            Ok(Any)
        }
        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Any, A::Error> {
            while map.next_key::<&'de str>()?.is_some() {
                map.next_value::<Any>()?;
            }
            Ok(Any)
        }
    }

    // Goal: pin the layout byte for byte, so that a change to it cannot go unnoticed.
    // Method: encode fixed values and compare with hand-written bytes from the module doc.
    #[test]
    fn golden_bytes() {
        let bytes = check_value(&json!({"a": [1, -2, 1.5, "x", null, true]}));
        #[rustfmt::skip]
        let expected = vec![
            0x08, 0x01,
            0x01, b'a',
            0x07, 0x06,
            0x03, 0x01,
            0x04, 0x01,
            0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,
            0x06, 0x01, b'x',
            0x00,
            0x02,
        ];
        assert_eq!(bytes, expected);
        assert_eq!(check_value(&json!(false)), vec![0x01]);
        assert_eq!(check_value(&json!(300)), vec![0x03, 0xac, 0x02]);
        assert_eq!(check_value(&json!(-1)), vec![0x04, 0x00]);
        let mut u64_max = vec![0x03];
        u64_max.extend([0xff; 9]);
        u64_max.push(0x01);
        assert_eq!(check_value(&json!(u64::MAX)), u64_max);
        let mut i64_min = vec![0x04];
        i64_min.extend([0xff; 8]);
        i64_min.push(0x7f);
        assert_eq!(check_value(&json!(i64::MIN)), i64_min);
        assert_eq!(check_value(&json!([])), vec![0x07, 0x00]);
        assert_eq!(check_value(&json!({})), vec![0x08, 0x00]);
        assert_eq!(encode(&b'\x7f'), vec![0x03, 0x7f]);
        assert_eq!(encode(&'é'), vec![0x06, 0x02, 0xc3, 0xa9]);
    }

    // Goal: every kind of JSON value round-trips to an equal `Value`, keys in input order.
    // Method: `check_value` on nested, unicode, extreme and empty values.
    #[test]
    fn values_round_trip() {
        let long = "ß".repeat(200);
        let values = [
            json!(null),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(0),
            json!(-0.5),
            json!(1.0),
            json!(f64::MAX),
            json!(f64::MIN_POSITIVE),
            json!(5e-324),
            json!(""),
            json!([]),
            json!({}),
            json!({"z": 1, "a": 2, "m": {"y": [], "b": {}}}),
            json!({"ключ": "значение", "🙂": ["\u{0}", "\u{ffff}", long]}),
            json!([[[[[]]]], {"": {"": null}}, [true, false]]),
            Value::Array((0..300).map(Value::from).collect()),
            Value::Object((0..200).map(|i| (format!("k{i}"), json!(i))).collect()),
        ];
        for value in &values {
            check_value(value);
        }
        let keys: Vec<String> = from_slice::<Value>(&encode(&values[13]))
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }

    // Goal: the integer and float kinds of `serde_json::Number` survive exactly.
    // Method: decode each encoding and inspect the number's kind.
    #[test]
    fn number_kinds_are_kept() {
        let decoded: Value = from_slice(&encode(&json!([1, -1, 1.0, u64::MAX]))).unwrap();
        let numbers: Vec<(bool, bool, bool)> = decoded
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n.is_u64(), n.is_i64(), n.is_f64()))
            .collect();
        let expected = [
            (true, true, false),
            (false, true, false),
            (false, false, true),
            (true, false, false),
        ];
        assert_eq!(numbers, expected);
        // A non-negative i64 is written as an unsigned integer.
        assert_eq!(encode(&5i64), encode(&5u64));
        assert_eq!(encode(&1.5f32), encode(&1.5f64));
    }

    // Goal: typed payloads round-trip through the hand-written visitors, unknown members and
    // unknown union tags included.
    // Method: decode JSON payloads of several event types with `DataSeed`, then
    // `check_payload` each one.
    #[test]
    fn typed_payloads_round_trip() {
        let payloads = [
            (
                "user/message",
                r#"{"id":"m1","role":"user","content":[{"type":"text","text":"héllo ✓"}],
                    "source":{"kind":"user","form":"typed"},"clientHint":[1,-2]}"#,
            ),
            (
                "assistant/message",
                r#"{"turn":1,"step":1,"message":{"id":"m2","role":"assistant","content":[
                    {"type":"reasoning","text":"think"},{"type":"text","text":"ok"},
                    {"type":"tool-call","id":"c1","name":"shell","arguments":"{\"cmd\":\"ls\"}"}]},
                  "stream":[
                    {"type":"text-chunks","time0":1785000000100,"index":0,"dt":[3,-1],
                     "texts":["o","k",""]},
                    {"type":"tool-call-chunks","time0":5,"index":1,"dt":[],"id":"c1",
                     "name":"shell","args":["{}"]},
                    {"type":"chunk","time":9,"chunk":{"type":"finish",
                     "reason":{"kind":"tool-calls"}}},
                    {"type":"future-record","x":1.25}],
                  "usage":{"inputTokens":10,"outputTokens":2,"totalTokens":12},
                  "latencyMs":-3}"#,
            ),
            (
                "tool/result",
                r#"{"turn":1,"step":1,"message":{"role":"tool","content":[
                    {"type":"tool-result","toolCallId":"c1",
                     "content":[{"type":"text","text":"a.txt"}],"isError":false}]},
                  "meta":{"exitCode":0,"durationMs":1.5}}"#,
            ),
            (
                "request/header",
                r#"{"header":{"config":{"provider":"p","model":"m","temperature":0.7,
                    "maxTokens":4096},"tools":[{"name":"shell","parameters":{"type":"object"}}],
                    "system":null},"reason":"start","startsSeries":true}"#,
            ),
            (
                "plugin/thing",
                r#"{"big":18446744073709551615,"neg":-9223372036854775808,
                    "nested":{"a":[[],{}]},"f":-2.5e-300}"#,
            ),
        ];
        for (name, text) in payloads {
            let kind = EventType::parse(name);
            let data = decode_json_payload(&kind, text);
            check_payload(&kind, &data);
        }
    }

    // Goal: every payload of a realistic session round-trips, and is smaller than its JSON.
    // Method: generate 3000 events and `check_payload` each payload.
    #[test]
    fn generated_payloads_round_trip() {
        let mut generator = Generator::new(GenOptions {
            events: 3000,
            seed: 11,
        });
        let (mut n_events, mut binary_bytes, mut json_bytes) = (0, 0, 0);
        while let Some(batch) = generator.next_batch() {
            for event in &batch {
                check_payload(&event.kind, &event.data);
                binary_bytes += encode(&DataRef(&event.data)).len();
                json_bytes += serde_json::to_vec(&DataRef(&event.data)).unwrap().len();
                n_events += 1;
            }
        }
        assert_eq!(n_events, 3000);
        assert!(binary_bytes < json_bytes, "{binary_bytes} >= {json_bytes}");
    }

    // Goal: object keys reach the typed visitors borrowed from the input, without a copy.
    // Method: decode a key with the `Key` type json.rs uses and inspect the `Cow`.
    #[test]
    fn keys_are_borrowed() {
        let bytes = encode(&json!({"member": 1}));
        let decoded: Vec<(Key<'_>, u64)> = {
            struct Pairs<'de>(Vec<(Key<'de>, u64)>);
            impl<'de> Deserialize<'de> for Pairs<'de> {
                fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    struct PairsVisitor;
                    impl<'de> Visitor<'de> for PairsVisitor {
                        type Value = Pairs<'de>;
                        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                            f.write_str("an object")
                        }
                        fn visit_map<A: de::MapAccess<'de>>(
                            self,
                            mut map: A,
                        ) -> Result<Pairs<'de>, A::Error> {
                            let mut pairs = Vec::new();
                            while let Some(entry) = map.next_entry()? {
                                pairs.push(entry);
                            }
                            Ok(Pairs(pairs))
                        }
                    }
                    d.deserialize_map(PairsVisitor)
                }
            }
            from_slice::<Pairs<'_>>(&bytes).unwrap().0
        };
        assert_eq!(decoded.len(), 1);
        assert!(matches!(&decoded[0].0 .0, Cow::Borrowed("member")));
        let bytes = encode("zero-copy");
        let text: &str = from_slice(&bytes).unwrap();
        assert_eq!(text, "zero-copy");
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Shape {
        Empty,
        Circle(f64),
        Pair(u8, i32),
        Rect { w: u32, h: Option<u32> },
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Bag<'a> {
        shapes: Vec<Shape>,
        unit: (),
        wrapped: Wrapped,
        letter: char,
        #[serde(borrow)]
        raw: RawBytes<'a>,
        tuple: (u16, String, bool),
        missing: Option<u8>,
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Wrapped(i8);

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Nest {
        Leaf,
        Deeper(Box<Nest>),
    }

    /// Bytes that serialize through `serialize_bytes`, as serde_bytes would.
    #[derive(Debug, PartialEq)]
    struct RawBytes<'a>(&'a [u8]);

    impl Serialize for RawBytes<'_> {
        fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for RawBytes<'a> {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            <&'de [u8]>::deserialize(d).map(RawBytes)
        }
    }

    // Goal: the serde data model maps as documented (enums as serde_json writes them, unit
    // and None as null, bytes as 0x09) and decodes back to the same Rust value.
    // Method: round-trip a derived struct holding every shape, and compare the tree of the
    // parts JSON can hold with serde_json's.
    #[test]
    fn serde_data_model_round_trips() {
        let bag = Bag {
            shapes: vec![
                Shape::Empty,
                Shape::Circle(2.5),
                Shape::Pair(7, -9),
                Shape::Rect { w: 3, h: None },
            ],
            unit: (),
            wrapped: Wrapped(-4),
            letter: '∑',
            raw: RawBytes(&[0, 255, 9]),
            tuple: (65535, "t".to_owned(), true),
            missing: None,
        };
        let bytes = encode(&bag);
        assert_eq!(validate(&bytes), Ok(()));
        assert_eq!(from_slice::<Bag<'_>>(&bytes).unwrap(), bag);
        let shapes: Value = from_slice(&encode(&bag.shapes)).unwrap();
        assert_eq!(shapes, serde_json::to_value(&bag.shapes).unwrap());
        assert_eq!(encode(&RawBytes(b"ab")), vec![TAG_BYTES, 0x02, b'a', b'b']);
    }

    // Goal: encoding refuses what the format cannot hold, and leaves the buffer untouched.
    // Method: encode -0.0, NaN, infinity, a non-string key and a 129-deep value after a prefix.
    #[test]
    fn encode_refusals() {
        let check = |value: &dyn erased::Encode, expected: BinaryError| {
            let mut out = vec![0xaa];
            assert_eq!(value.encode_into(&mut out), Err(expected));
            assert_eq!(out, vec![0xaa]);
        };
        check(
            &vec![1.0, -0.0],
            BinaryError::NegativeZero { offset_bytes: 11 },
        );
        check(&f64::NAN, BinaryError::NonFiniteFloat { offset_bytes: 0 });
        check(
            &[f32::INFINITY],
            BinaryError::NonFiniteFloat { offset_bytes: 2 },
        );
        let by_number: std::collections::BTreeMap<u8, u8> = [(1, 2)].into();
        check(&by_number, BinaryError::KeyNotString);
        check(
            &u128::MAX,
            BinaryError::IntegerOutOfRange { offset_bytes: 0 },
        );
        let mut deep = json!(null);
        for _ in 0..=DEPTH_MAX {
            deep = json!([deep]);
        }
        check(
            &deep,
            BinaryError::TooDeep {
                offset_bytes: 2 * u64::from(DEPTH_MAX),
                depth_max: DEPTH_MAX,
            },
        );
    }

    /// Lets `encode_refusals` hold values of different types in one helper.
    mod erased {
        pub(super) trait Encode {
            fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), super::BinaryError>;
        }

        impl<T: serde::Serialize> Encode for T {
            fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), super::BinaryError> {
                super::to_vec(self, out)
            }
        }
    }

    /// Runs every decoder on `bytes` and checks that they agree: `validate`, the visitor walk
    /// of `Any`, `IgnoredAny`, and `Value` (which refuses only bytes, as JSON cannot hold
    /// them). Returns the verdict of `validate`.
    fn check_decoders_agree(bytes: &[u8]) -> Result<(), BinaryError> {
        let verdict = validate(bytes);
        assert_eq!(from_slice::<Any>(bytes).map(|_| ()), verdict);
        assert_eq!(from_slice::<de::IgnoredAny>(bytes).map(|_| ()), verdict);
        match (from_slice::<Value>(bytes), &verdict) {
            (Ok(value), Ok(())) => assert_eq!(encode(&value), bytes),
            // `Value` stops at the first bytes value, before any later fault.
            (Err(BinaryError::InvalidType { .. }), _) => assert!(bytes.contains(&TAG_BYTES)),
            (Err(error), Err(expected)) => assert_eq!(&error, expected),
            (value, _) => panic!("validate said {verdict:?}, Value decoding said {value:?}"),
        }
        verdict
    }

    // Goal: hostile lengths and counts fail before anything is allocated for them.
    // Method: headers claiming 2^60 items or bytes, followed by only 3 bytes.
    #[test]
    fn hostile_lengths_fail_early() {
        for tag in [TAG_STRING, TAG_ARRAY, TAG_OBJECT, TAG_BYTES] {
            let mut bytes = vec![tag];
            write_varint(&mut bytes, 1 << 60);
            bytes.extend([0x00; 3]);
            let expected = BinaryError::LengthExceedsInput {
                offset_bytes: 1,
                claimed: 1 << 60,
                remaining_bytes: 3,
            };
            assert_eq!(check_decoders_agree(&bytes), Err(expected.clone()));
            assert_eq!(from_slice::<Vec<u8>>(&bytes).unwrap_err(), expected.clone());
            assert_eq!(from_slice::<String>(&bytes).unwrap_err(), expected);
        }
        // A member key claims more than remains.
        let mut bytes = vec![TAG_OBJECT, 0x01];
        write_varint(&mut bytes, u64::MAX);
        assert_eq!(
            check_decoders_agree(&bytes),
            Err(BinaryError::LengthExceedsInput {
                offset_bytes: 2,
                claimed: u64::MAX,
                remaining_bytes: 0,
            })
        );
    }

    // Goal: deep nesting is refused with the depth error, never a stack overflow, and the
    // limit itself is accepted.
    // Method: 10,000 nested one-element arrays (and objects), then exactly DEPTH_MAX.
    #[test]
    fn deep_nesting_is_refused() {
        let too_deep = BinaryError::TooDeep {
            offset_bytes: 2 * u64::from(DEPTH_MAX),
            depth_max: DEPTH_MAX,
        };
        let mut arrays = [TAG_ARRAY, 0x01].repeat(10_000);
        arrays.push(TAG_NULL);
        assert_eq!(check_decoders_agree(&arrays), Err(too_deep.clone()));
        let mut objects = [TAG_OBJECT, 0x01, 0x00].repeat(10_000);
        objects.push(TAG_NULL);
        let too_deep_objects = BinaryError::TooDeep {
            offset_bytes: 3 * u64::from(DEPTH_MAX),
            depth_max: DEPTH_MAX,
        };
        assert_eq!(check_decoders_agree(&objects), Err(too_deep_objects));
        let depth_max = usize::try_from(DEPTH_MAX).unwrap();
        let mut deepest = [TAG_ARRAY, 0x01].repeat(depth_max);
        deepest.push(TAG_NULL);
        assert_eq!(check_decoders_agree(&deepest), Ok(()));
        // An enum's one-member object counts as a level, on encode and on decode.
        let mut nest = Nest::Leaf;
        for _ in 0..DEPTH_MAX {
            nest = Nest::Deeper(Box::new(nest));
        }
        let bytes = encode(&nest);
        assert_eq!(from_slice::<Nest>(&bytes).unwrap(), nest);
        let too_deep_nest = Nest::Deeper(Box::new(nest));
        assert_eq!(
            to_vec(&too_deep_nest, &mut Vec::new()),
            Err(BinaryError::TooDeep {
                offset_bytes: 9 * u64::from(DEPTH_MAX),
                depth_max: DEPTH_MAX,
            })
        );
        let mut hostile = [&[TAG_OBJECT, 0x01, 0x06][..], b"Deeper"]
            .concat()
            .repeat(10_000);
        hostile.extend([TAG_STRING, 0x04]);
        hostile.extend(b"Leaf");
        assert_eq!(
            from_slice::<Nest>(&hostile),
            Err(BinaryError::TooDeep {
                offset_bytes: 9 * u64::from(DEPTH_MAX),
                depth_max: DEPTH_MAX,
            })
        );
    }

    // Goal: each malformed layout is refused by every decoder with the same typed error.
    // Method: hand-made inputs, one per rule.
    #[test]
    fn malformed_inputs_are_refused() {
        let cases: Vec<(Vec<u8>, BinaryError)> = vec![
            (vec![], BinaryError::Truncated { offset_bytes: 0 }),
            (
                vec![0x0a],
                BinaryError::UnknownTag {
                    offset_bytes: 0,
                    tag: 0x0a,
                },
            ),
            (vec![TAG_UINT], BinaryError::Truncated { offset_bytes: 1 }),
            (
                vec![TAG_UINT, 0x80],
                BinaryError::Truncated { offset_bytes: 1 },
            ),
            (
                vec![TAG_UINT, 0x80, 0x00],
                BinaryError::VarintNotMinimal { offset_bytes: 1 },
            ),
            (
                [vec![TAG_UINT], vec![0xff; 9], vec![0x02]].concat(),
                BinaryError::VarintOverflow { offset_bytes: 1 },
            ),
            (
                [vec![TAG_UINT], vec![0x80; 10], vec![0x01]].concat(),
                BinaryError::VarintTooLong { offset_bytes: 1 },
            ),
            (
                [vec![TAG_NEGATIVE_INT], vec![0xff; 9], vec![0x01]].concat(),
                BinaryError::IntegerOutOfRange { offset_bytes: 1 },
            ),
            (
                [vec![TAG_FLOAT], (-0.0f64).to_le_bytes().to_vec()].concat(),
                BinaryError::NegativeZero { offset_bytes: 1 },
            ),
            (
                [vec![TAG_FLOAT], f64::INFINITY.to_le_bytes().to_vec()].concat(),
                BinaryError::NonFiniteFloat { offset_bytes: 1 },
            ),
            (
                vec![TAG_FLOAT, 0, 0, 0],
                BinaryError::Truncated { offset_bytes: 1 },
            ),
            (
                vec![TAG_STRING, 0x02, 0xc3, 0x28],
                BinaryError::InvalidUtf8 { offset_bytes: 2 },
            ),
            (
                vec![TAG_OBJECT, 0x01, 0x01, 0xff, TAG_NULL],
                BinaryError::InvalidUtf8 { offset_bytes: 3 },
            ),
            (
                vec![TAG_ARRAY, 0x02, TAG_UINT, 0x80],
                BinaryError::Truncated { offset_bytes: 3 },
            ),
            (
                vec![TAG_ARRAY, 0x02, TAG_NULL],
                BinaryError::LengthExceedsInput {
                    offset_bytes: 1,
                    claimed: 2,
                    remaining_bytes: 1,
                },
            ),
            (
                vec![TAG_NULL, TAG_NULL],
                BinaryError::TrailingBytes {
                    offset_bytes: 1,
                    n_bytes: 1,
                },
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(check_decoders_agree(&bytes), Err(expected), "{bytes:02x?}");
        }
    }

    // Goal: a visitor that stops early is an error, not a silent misread of what follows.
    // Method: decode a 3-element array as a pair; the pair visitor reads two elements only.
    #[test]
    fn unread_items_are_refused() {
        let bytes = encode(&[1, 2, 3]);
        assert_eq!(
            from_slice::<(u8, u8)>(&bytes),
            Err(BinaryError::UnreadItems {
                offset_bytes: 0,
                n_unread: 1,
            })
        );
        assert_eq!(from_slice::<(u8, u8, u8)>(&bytes), Ok((1, 2, 3)));
    }

    // Goal: a value of the wrong type or range is a typed error that names both sides.
    // Method: decode an integer as a string, and 300 as a u8.
    #[test]
    fn type_mismatches_are_refused() {
        assert_eq!(
            from_slice::<String>(&encode(&1)),
            Err(BinaryError::InvalidType {
                unexpected: "integer `1`".to_owned(),
                expected: "a string".to_owned(),
            })
        );
        assert_eq!(
            from_slice::<u8>(&encode(&300)),
            Err(BinaryError::Custom(
                "invalid value: integer `300`, expected u8".to_owned()
            ))
        );
        assert_eq!(
            from_slice::<Shape>(&encode(&json!({"Circle": 1.0, "Empty": null}))),
            Err(BinaryError::Custom(
                "invalid length 2, expected an object with exactly one member".to_owned()
            ))
        );
    }

    // Goal: an undeclared container length that needs a multi-byte count is patched in place.
    // Method: serialize iterators without an exact size hint, across the 127/128 boundary.
    #[test]
    fn undeclared_lengths_are_patched() {
        struct Unsized(usize);
        impl Serialize for Unsized {
            fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq((0..self.0 as u64).filter(|_| true))
            }
        }
        for n_items in [0, 127, 128, 20_000] {
            let bytes = encode(&Unsized(n_items));
            let expected = encode(&(0..n_items as u64).collect::<Vec<u64>>());
            assert_eq!(bytes, expected);
        }
    }

    fn config() -> Config {
        Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        }
    }

    /// A number other than -0.0 and the non-finite floats, which JSON cannot hold.
    fn json_number() -> BoxedStrategy<Number> {
        prop_oneof![
            any::<i64>().prop_map(Number::from),
            any::<u64>().prop_map(Number::from),
            (0u64..300).prop_map(Number::from),
            any::<f64>().prop_filter_map("a finite float other than -0.0", |f| {
                if f.to_bits() == NEGATIVE_ZERO_BITS {
                    return None;
                }
                Number::from_f64(f)
            }),
        ]
        .boxed()
    }

    fn json_value() -> BoxedStrategy<Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            json_number().prop_map(Value::Number),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
        .boxed()
    }

    /// How to damage a valid encoding.
    #[derive(Debug, Clone)]
    enum Damage {
        Truncate(prop::sample::Index),
        Flip(prop::sample::Index, u8),
        Insert(prop::sample::Index, u8),
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            any::<prop::sample::Index>().prop_map(Damage::Truncate),
            (any::<prop::sample::Index>(), 1u8..).prop_map(|(at, mask)| Damage::Flip(at, mask)),
            (any::<prop::sample::Index>(), any::<u8>())
                .prop_map(|(at, byte)| Damage::Insert(at, byte)),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        // Goal: any JSON value round-trips exactly, and the encoding is a fixed point.
        // Method: `check_value` on generated trees.
        #[test]
        fn prop_values_round_trip(value in json_value()) {
            check_value(&value);
        }

        // Goal: damaged encodings never panic, and all decoders agree on them.
        // Method: truncate, flip or insert bytes in a valid encoding, then run every decoder.
        #[test]
        fn prop_damaged_encodings_are_handled(value in json_value(), damages in prop::collection::vec(damage(), 1..4)) {
            let mut bytes = encode(&value);
            for damage in damages {
                match damage {
                    Damage::Truncate(at) => bytes.truncate(at.index(bytes.len() + 1)),
                    Damage::Flip(at, mask) if !bytes.is_empty() => {
                        let at = at.index(bytes.len());
                        bytes[at] ^= mask;
                    }
                    Damage::Flip(..) => {}
                    Damage::Insert(at, byte) => bytes.insert(at.index(bytes.len() + 1), byte),
                }
            }
            let _ = check_decoders_agree(&bytes);
        }

        // Goal: arbitrary bytes never panic, and all decoders agree on them.
        // Method: random byte strings biased towards valid tags and small lengths.
        #[test]
        fn prop_arbitrary_bytes_are_handled(
            bytes in prop::collection::vec(prop_oneof![0u8..=10, any::<u8>()], 0..64),
        ) {
            let _ = check_decoders_agree(&bytes);
        }
    }
}
