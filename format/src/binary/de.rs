//! The decoding side: a bounds-checked cursor over the input, and the serde deserializer on it.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Visitor};
use serde::Deserialize;

use super::validate::skip_value;
use super::varint;
use super::{
    check_float, BinaryError, DEPTH_MAX, FLOAT_SIZE_BYTES, TAG_ARRAY, TAG_BYTES, TAG_FALSE,
    TAG_FLOAT, TAG_NEGATIVE_INT, TAG_NULL, TAG_OBJECT, TAG_STRING, TAG_TRUE, TAG_UINT,
};

/// A cursor over the input. Every read checks bounds and layout rules, and borrows from the
/// input rather than copying. The reads that `validate` makes per item are
/// `#[inline(always)]`: outlined, each returns its `Result` through memory, and the walk is
/// dominated by per-item overhead (payload values average a few bytes).
pub(super) struct Reader<'de> {
    input: &'de [u8],
    pos: usize,
}

impl<'de> Reader<'de> {
    pub(super) fn new(input: &'de [u8]) -> Reader<'de> {
        Reader { input, pos: 0 }
    }

    #[inline]
    pub(super) fn offset(&self) -> u64 {
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
    pub(super) fn read_tag(&mut self) -> Result<u8, BinaryError> {
        let tag = self.peek_tag()?;
        self.pos += 1;
        Ok(tag)
    }

    #[inline(always)]
    pub(super) fn read_varint(&mut self) -> Result<u64, BinaryError> {
        // Most lengths, counts and integers fit in one byte.
        if let Some(&byte) = self.input.get(self.pos) {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
        }
        varint::read(self.input, &mut self.pos)
    }

    #[inline]
    pub(super) fn read_negative(&mut self) -> Result<i64, BinaryError> {
        let offset_bytes = self.offset();
        let inverted = self.read_varint()?;
        match i64::try_from(inverted) {
            Ok(inverted) => Ok(!inverted),
            Err(_) => Err(BinaryError::IntegerOutOfRange { offset_bytes }),
        }
    }

    #[inline]
    pub(super) fn read_float(&mut self) -> Result<f64, BinaryError> {
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
    pub(super) fn read_count(&mut self) -> Result<u64, BinaryError> {
        Ok(self.read_len()? as u64)
    }

    #[inline]
    pub(super) fn read_bytes(&mut self) -> Result<&'de [u8], BinaryError> {
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
        crate::utf8::text(bytes).ok_or(BinaryError::InvalidUtf8 { offset_bytes })
    }

    /// Checks a string body without producing the `&str`: ASCII, the common case, is checked
    /// a word at a time, and only other text goes through the full UTF-8 check.
    #[inline(always)]
    pub(super) fn skip_str(&mut self) -> Result<(), BinaryError> {
        let size_bytes = self.read_len()?;
        let offset_bytes = self.offset();
        let bytes = &self.input[self.pos..self.pos + size_bytes];
        self.pos += size_bytes;
        if bytes.is_ascii() || crate::utf8::text(bytes).is_some() {
            return Ok(());
        }
        Err(BinaryError::InvalidUtf8 { offset_bytes })
    }

    pub(super) fn finish(&self) -> Result<(), BinaryError> {
        match self.remaining_bytes() {
            0 => Ok(()),
            n_bytes => Err(BinaryError::TrailingBytes {
                offset_bytes: self.offset(),
                n_bytes: n_bytes as u64,
            }),
        }
    }
}

/// The serde deserializer over one input.
pub(super) struct Decoder<'de> {
    pub(super) reader: Reader<'de>,
    /// Arrays and objects open around the current value.
    pub(super) depth: u32,
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

    /// Checks a skimmed packed run at the cursor in one pass and moves past it, when it is an
    /// array whose every element the element-by-element read would take: a string whose bytes
    /// are all ASCII (one check over the whole run), or an integer that fits an `i64`.
    /// Anything else (another value, an element of another kind, text beyond ASCII, any
    /// fault, an array too deep) leaves the cursor where it was and returns false, and the
    /// caller reads the run element by element, which refuses what it refused before.
    pub(super) fn skim_run(&mut self, run: Run) -> bool {
        if self.depth >= DEPTH_MAX {
            return false;
        }
        let mut reader = Reader {
            input: self.reader.input,
            pos: self.reader.pos,
        };
        if reader.read_tag() != Ok(TAG_ARRAY) {
            return false;
        }
        let Ok(n_items) = reader.read_count() else {
            return false;
        };
        let items_start = reader.pos;
        for _ in 0..n_items {
            let taken = match (run, reader.read_tag()) {
                (Run::Strings, Ok(TAG_STRING)) => reader.read_len().is_ok_and(|size_bytes| {
                    reader.pos += size_bytes;
                    true
                }),
                (Run::Integers, Ok(TAG_UINT)) => reader
                    .read_varint()
                    .is_ok_and(|value| i64::try_from(value).is_ok()),
                (Run::Integers, Ok(TAG_NEGATIVE_INT)) => reader.read_negative().is_ok(),
                _ => false,
            };
            if !taken {
                return false;
            }
        }
        // Tags and one-byte lengths are ASCII too, so the run's bytes are all ASCII exactly
        // when every string is ASCII and no length took a second byte.
        if run == Run::Strings && !reader.input[items_start..reader.pos].is_ascii() {
            return false;
        }
        self.reader.pos = reader.pos;
        true
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

    /// A [`SKIMMED_STRING`](crate::skim::SKIMMED_STRING) that is a string is checked as
    /// [`skip_value`] checks one (ASCII a word at a time), without producing the `&str`;
    /// any other value, and any other newtype, goes to the visitor.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, BinaryError> {
        if name == crate::skim::SKIMMED_STRING && self.reader.peek_tag()? == TAG_STRING {
            self.reader.pos += 1;
            self.reader.skip_str()?;
            return visitor.visit_unit();
        }
        let run = match name {
            crate::skim::SKIMMED_STRINGS => Some(Run::Strings),
            crate::skim::SKIMMED_INTEGERS => Some(Run::Integers),
            _ => None,
        };
        if run.is_some_and(|run| self.skim_run(run)) {
            return visitor.visit_unit();
        }
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

/// The kind of a skimmed packed run ([`Decoder::skim_run`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    Strings,
    Integers,
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
