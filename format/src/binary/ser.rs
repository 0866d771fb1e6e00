//! The serializer: serde calls in, the layout appended to one buffer.

use serde::ser::{self, Serialize};

use super::varint::{encode_varint, write_varint};
use super::{
    check_float, BinaryError, DEPTH_MAX, TAG_ARRAY, TAG_BYTES, TAG_FALSE, TAG_FLOAT,
    TAG_NEGATIVE_INT, TAG_NULL, TAG_OBJECT, TAG_STRING, TAG_TRUE, TAG_UINT, VARINT_SIZE_BYTES_MAX,
};

/// The serde serializer, appending to one buffer.
pub(super) struct Encoder<'a> {
    pub(super) out: &'a mut Vec<u8>,
    /// Where this value's encoding starts in `out`.
    pub(super) start: usize,
    /// Arrays and objects open around the current value.
    pub(super) depth: u32,
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
pub(super) struct Compound<'s, 'a> {
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
