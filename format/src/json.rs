//! Lossless JSON objects: typed known members plus every unknown member, kept in input order.
//!
//! dsh payloads grow new members between releases. A typed struct that silently dropped an
//! unknown member would lose data on the next write, so every object type here is declared with
//! [`json_object!`], which keeps unknown members in an [`Extra`] map and writes them back after
//! the known ones. Tagged unions (content blocks, stream records) use [`json_tagged!`], which
//! keeps an unknown tag as the whole object.
//!
//! The visitors are hand-rolled rather than `#[serde(flatten)]`, because flatten buffers every
//! object into an intermediate tree and would make the typed decode slower than a plain
//! `serde_json::Value` parse.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::LazyLock;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

/// Unknown members of a JSON object, in input order: a [`Map`] to every reader (it derefs to
/// one), held as one word while it is empty, which it nearly always is.
///
/// Every `json_object!` type carries one. As a `Map` inline it was 72 bytes a struct, and
/// a stream record nests up to three (the record, its chunk, the chunk's usage): 320 bytes,
/// moved by `memmove` several times on its way from the decoder into its vector, 9% of
/// `verify`'s samples. Empty, it allocates nothing; the first mutable access allocates the
/// map. Two `Extra`s are equal when their members are, however they are held.
#[derive(Clone, Default)]
pub struct Extra(Option<Box<Map<String, Value>>>);

/// What an empty [`Extra`] derefs to.
static NO_MEMBERS: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

impl Extra {
    /// No members.
    pub const fn new() -> Extra {
        Extra(None)
    }

    /// The members as a map of their own.
    pub fn into_map(self) -> Map<String, Value> {
        self.0.map(|map| *map).unwrap_or_default()
    }
}

impl Deref for Extra {
    type Target = Map<String, Value>;

    #[inline]
    fn deref(&self) -> &Map<String, Value> {
        match &self.0 {
            Some(map) => map,
            None => &NO_MEMBERS,
        }
    }
}

impl DerefMut for Extra {
    #[inline]
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Extra {
    fn eq(&self, other: &Extra) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl From<Map<String, Value>> for Extra {
    fn from(map: Map<String, Value>) -> Extra {
        Extra(Some(Box::new(map)))
    }
}

impl From<Extra> for Map<String, Value> {
    fn from(extra: Extra) -> Map<String, Value> {
        extra.into_map()
    }
}

impl FromIterator<(String, Value)> for Extra {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Extra {
        Extra::from(Map::from_iter(iter))
    }
}

impl IntoIterator for Extra {
    type Item = (String, Value);
    type IntoIter = serde_json::map::IntoIter;

    fn into_iter(self) -> serde_json::map::IntoIter {
        self.into_map().into_iter()
    }
}

impl<'a> IntoIterator for &'a Extra {
    type Item = (&'a String, &'a Value);
    type IntoIter = serde_json::map::Iter<'a>;

    fn into_iter(self) -> serde_json::map::Iter<'a> {
        self.iter()
    }
}

impl serde::Serialize for Extra {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

/// Largest integer that JavaScript represents exactly (`Number.MAX_SAFE_INTEGER`).
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Deepest nesting of arrays and objects a JSON row or header may have, counting the row
/// object itself: what serde_json's recursion limit (128) admits, under which every line is
/// decoded (its `unbounded_depth` feature stays off). A deeper line fails cleanly with "recursion limit
/// exceeded" under the envelope or header rule, never overflows the stack. Pinned by
/// `json_depth_limit_is_pinned` below, so a dependency change cannot move it silently.
pub const JSON_DEPTH_MAX: usize = 127;

/// An object key, borrowed from the input when it holds no escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Prefixes a nested decode error with the member it came from, so that a message reads
/// `message: content: invalid type: ...` instead of a bare serde message.
pub(crate) fn member_error<E: de::Error>(key: &str, inner: impl fmt::Display) -> E {
    let inner = inner.to_string();
    E::custom(format_args!("{key}: {}", strip_position(&inner)))
}

/// serde_json appends ` at line L column C` to every message; the outermost error adds it once.
pub(crate) fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(idx) if message[idx..].contains(" column ") => &message[..idx],
        _ => message,
    }
}

pub(crate) fn duplicate_member<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("duplicate member `{key}`"))
}

pub(crate) fn missing_member<E: de::Error>(key: &str) -> E {
    E::custom(format_args!("missing member `{key}`"))
}

/// Reads one unknown member's value and stores it in `extra`, refusing duplicates and values
/// that JSON text can hold but the dsh data model cannot (spec 12.1 rule 2).
pub(crate) fn read_extra<'de, A: MapAccess<'de>>(
    map: &mut A,
    extra: &mut Extra,
    key: Cow<'de, str>,
) -> Result<(), A::Error> {
    let value: Value = map
        .next_value()
        .map_err(|e| member_error::<A::Error>(&key, e))?;
    if let Err(reason) = check_lossless(&value) {
        return Err(member_error::<A::Error>(&key, reason));
    }
    let key = key.into_owned();
    if extra.contains_key(&key) {
        return Err(duplicate_member(&key));
    }
    extra.insert(key, value);
    Ok(())
}

/// Refuses negative zero anywhere inside `value`. Infinite literals are already refused by the
/// parser ("number out of range").
pub fn check_lossless(value: &Value) -> Result<(), &'static str> {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f == 0.0 && f.is_sign_negative() && !n.is_i64() && !n.is_u64() => {
                Err("negative zero is not lossless JSON")
            }
            _ => Ok(()),
        },
        Value::Array(items) => items.iter().try_for_each(check_lossless),
        Value::Object(members) => members.values().try_for_each(check_lossless),
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// A member value that must be a JSON number holding a non-negative safe integer.
pub(crate) fn visit_safe_u64<E: de::Error>(value: u64) -> Result<u64, E> {
    if value > SAFE_INTEGER_MAX {
        return Err(E::custom(format_args!("{value} is not a safe integer")));
    }
    Ok(value)
}

/// Declares a JSON object type with typed known members and an [`Extra`] map for the rest.
///
/// Members are `req` (decode fails when absent) or `opt` (an `Option`, absent when `None`).
/// Encoding writes known members in declaration order, then the unknown ones in input order.
macro_rules! json_object {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $kind:ident $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $crate::json::json_object!(@ty $kind $ty), )*
            /// Members this build does not know, kept for a lossless round trip.
            pub extra: $crate::json::Extra,
        }

        impl $name {
            /// Reads the members that remain in `map` (a tagged union may already have consumed
            /// its tag).
            #[allow(unused_mut, clippy::redundant_field_names)]
            pub(crate) fn visit_members<'de, A: serde::de::MapAccess<'de>>(
                mut map: A,
            ) -> Result<Self, A::Error> {
                $( let mut $field: Option<$ty> = None; )*
                let mut extra = $crate::json::Extra::new();
                while let Some($crate::json::Key(key)) = map.next_key()? {
                    match key.as_ref() {
                        $( $key => {
                            if $field.is_some() {
                                return Err($crate::json::duplicate_member::<A::Error>($key));
                            }
                            $field = Some(map.next_value().map_err(|e| {
                                $crate::json::member_error::<A::Error>($key, e)
                            })?);
                        } )*
                        _ => $crate::json::read_extra(&mut map, &mut extra, key)?,
                    }
                }
                Ok($name {
                    $( $field: $crate::json::json_object!(@finish $kind $field $key A), )*
                    extra,
                })
            }

            /// Number of members this value encodes to.
            #[allow(unused_mut)]
            fn member_count(&self) -> usize {
                let mut n = self.extra.len();
                $( n += $crate::json::json_object!(@present $kind self.$field); )*
                n
            }

            /// Writes the known members, then the unknown ones.
            pub(crate) fn serialize_members<M: serde::ser::SerializeMap>(
                &self,
                map: &mut M,
            ) -> Result<(), M::Error> {
                $( $crate::json::json_object!(@write $kind map $key self.$field); )*
                for (key, value) in &self.extra {
                    map.serialize_entry(key, value)?;
                }
                Ok(())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct ObjectVisitor;
                impl<'de> serde::de::Visitor<'de> for ObjectVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<$name, A::Error> {
                        $name::visit_members(map)
                    }
                }
                deserializer.deserialize_map(ObjectVisitor)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(self.member_count()))?;
                self.serialize_members(&mut map)?;
                map.end()
            }
        }
    };
    (@ty req $ty:ty) => { $ty };
    (@ty opt $ty:ty) => { Option<$ty> };
    (@finish req $field:ident $key:literal $a:ident) => {
        match $field {
            Some(value) => value,
            None => return Err($crate::json::missing_member::<$a::Error>($key)),
        }
    };
    (@finish opt $field:ident $key:literal $a:ident) => { $field };
    (@present req $value:expr) => { 1 };
    (@present opt $value:expr) => { usize::from($value.is_some()) };
    (@write req $map:ident $key:literal $value:expr) => { $map.serialize_entry($key, &$value)?; };
    (@write opt $map:ident $key:literal $value:expr) => {
        if let Some(value) = &$value {
            $map.serialize_entry($key, value)?;
        }
    };
}

/// Declares a union tagged by its `type` member. Each variant wraps a [`json_object!`] type
/// that holds the other members; an unknown tag keeps the whole object in `Other`.
///
/// The tag is read without buffering when it is the first member, as every dsh writer puts
/// it; otherwise the object is buffered once and decoded from the buffer.
macro_rules! json_tagged {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident($ty:ty) = $tag:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant($ty), )*
            /// A tag this build does not know: the whole object, `type` included.
            Other($crate::json::Extra),
        }

        impl $name {
            /// The `type` tag this value encodes with.
            pub fn tag(&self) -> &str {
                match self {
                    $( $name::$variant(_) => $tag, )*
                    $name::Other(object) => object.get("type").and_then(|t| t.as_str()).unwrap_or(""),
                }
            }

            fn visit_tagged<'de, A: serde::de::MapAccess<'de>>(
                tag: &str,
                map: A,
            ) -> Result<Self, A::Error> {
                match tag {
                    $( $tag => Ok($name::$variant(<$ty>::visit_members(map)?)), )*
                    _ => {
                        let mut object = $crate::json::Extra::new();
                        object.insert("type".to_owned(), serde_json::Value::String(tag.to_owned()));
                        let mut map = map;
                        while let Some($crate::json::Key(key)) = map.next_key()? {
                            $crate::json::read_extra(&mut map, &mut object, key)?;
                        }
                        Ok($name::Other(object))
                    }
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TaggedVisitor;
                impl<'de> serde::de::Visitor<'de> for TaggedVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object with a `type` member")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$name, A::Error> {
                        use serde::de::Error as _;
                        let Some($crate::json::Key(first)) = map.next_key()? else {
                            return Err(A::Error::custom("missing member `type`"));
                        };
                        if first == "type" {
                            let tag: std::borrow::Cow<'de, str> = map
                                .next_value::<$crate::json::Key<'de>>()
                                .map_err(|e| $crate::json::member_error::<A::Error>("type", e))?
                                .0;
                            return $name::visit_tagged(&tag, map);
                        }
                        let mut object = $crate::json::Extra::new();
                        $crate::json::read_extra(&mut map, &mut object, first)?;
                        while let Some($crate::json::Key(key)) = map.next_key()? {
                            $crate::json::read_extra(&mut map, &mut object, key)?;
                        }
                        let tag = match object.shift_remove("type") {
                            Some(serde_json::Value::String(tag)) => tag,
                            Some(_) => return Err(A::Error::custom("type: expected a string")),
                            None => return Err(A::Error::custom("missing member `type`")),
                        };
                        let rest = serde::de::value::MapDeserializer::new(object.into_iter());
                        $name::visit_tagged(&tag, rest).map_err(|e: serde_json::Error| {
                            A::Error::custom($crate::json::strip_position(&e.to_string()))
                        })
                    }
                }
                deserializer.deserialize_map(TaggedVisitor)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                match self {
                    $( $name::$variant(inner) => {
                        let mut map = serializer.serialize_map(None)?;
                        map.serialize_entry("type", $tag)?;
                        inner.serialize_members(&mut map)?;
                        map.end()
                    } )*
                    $name::Other(object) => object.serialize(serializer),
                }
            }
        }
    };
}

pub(crate) use json_object;
pub(crate) use json_tagged;

#[cfg(test)]
// The macros declare `pub` types; the test module keeps them to itself.
#[allow(unreachable_pub)]
mod tests {
    json_object! {
        /// A test object.
        pub struct Sample {
            req name: String = "name",
            opt count: u64 = "count",
        }
    }

    // Goal: the lossless-JSON audit passes pieces (strings only) without walking them, and
    // still refuses a float beside them; the pieces' JSON is the bare array.
    // Method: audit pieces alone, then beside a negative zero; encode them.
    #[test]
    fn the_audit_skips_pieces_but_not_what_is_beside_them() {
        let mut pieces = crate::Pieces::new();
        pieces.push("a");
        pieces.push("-0.0");
        assert_eq!(super::check_serialize_lossless(&pieces), Ok(()));
        let negative_zero = serde_json::Number::from_f64(-0.0).map(serde_json::Value::Number);
        assert!(negative_zero.is_some());
        let beside = (pieces.clone(), negative_zero);
        assert_eq!(
            super::check_serialize_lossless(&beside),
            Err("negative zero is not lossless JSON".to_owned())
        );
        assert_eq!(serde_json::to_string(&pieces).unwrap(), r#"["a","-0.0"]"#);
    }

    // Goal: JSON_DEPTH_MAX is exactly the depth the decoder accepts: that many nested arrays
    // decode, one more is refused with the recursion limit.
    #[test]
    fn json_depth_limit_is_pinned() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(serde_json::from_str::<serde_json::Value>(&nested(super::JSON_DEPTH_MAX)).is_ok());
        let err = serde_json::from_str::<serde_json::Value>(&nested(super::JSON_DEPTH_MAX + 1))
            .unwrap_err();
        assert!(
            err.to_string().starts_with("recursion limit exceeded"),
            "{err}"
        );
    }

    json_tagged! {
        /// A test union.
        pub enum Shape {
            Named(Sample) = "named",
        }
    }

    // Goal: an Extra is one word, and equal to another with the same members however each
    // is held: never allocated, emptied after use, or built from a map.
    // Method: compare the ways to an empty Extra, and a filled one with its map.
    #[test]
    fn an_extra_is_one_word_and_compares_by_its_members() {
        use super::Extra;
        use serde_json::{json, Map};
        assert_eq!(std::mem::size_of::<Extra>(), std::mem::size_of::<usize>());
        let never = Extra::new();
        assert!(never.is_empty());
        assert_eq!(format!("{never:?}"), format!("{:?}", Map::new()));
        let mut emptied = Extra::new();
        emptied.insert("a".to_owned(), json!(1));
        assert_ne!(emptied, never);
        assert_eq!(emptied.shift_remove("a"), Some(json!(1)));
        assert_eq!(emptied, never);
        assert_eq!(Extra::from(Map::new()), never);
        let mut map = Map::new();
        map.insert("b".to_owned(), json!([1, 2]));
        map.insert("a".to_owned(), json!(null));
        let filled = Extra::from(map.clone());
        assert_eq!(filled.keys().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(filled.clone().into_map(), map);
        assert_eq!(filled.into_iter().collect::<Extra>(), Extra::from(map));
    }

    // Goal: a decoded stream record stays small, as `Extra` made it: the decoder moves each
    // one several times on its way into its vector (was 320 bytes, 9% of verify in memmove).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_stream_record_stays_within_168_bytes() {
        assert!(std::mem::size_of::<crate::stream::StreamRecord>() <= 168);
    }

    // Goal: unknown members survive decode -> encode, in input order, after the known ones.
    #[test]
    fn unknown_members_round_trip() {
        let text = r#"{"zeta":1,"name":"a","alpha":{"b":[1,2]},"count":3}"#;
        let sample: Sample = serde_json::from_str(text).unwrap();
        assert_eq!(sample.name, "a");
        assert_eq!(sample.count, Some(3));
        assert_eq!(
            serde_json::to_string(&sample).unwrap(),
            r#"{"name":"a","count":3,"zeta":1,"alpha":{"b":[1,2]}}"#
        );
    }

    #[test]
    fn errors_name_the_member() {
        let err = serde_json::from_str::<Sample>(r#"{"name":5}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "name: invalid type: integer `5`, expected a string at line 1 column 10"
        );
        let err = serde_json::from_str::<Sample>(r#"{"count":1}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "missing member `name` at line 1 column 11");
        let err = serde_json::from_str::<Sample>(r#"{"name":"a","name":"b"}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "duplicate member `name` at line 1 column 18");
        let err = serde_json::from_str::<Sample>(r#"{"name":"a","x":-0}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "x: negative zero is not lossless JSON at line 1 column 19"
        );
    }

    // Goal: a tag that is not the first member, and an unknown tag, both decode losslessly.
    #[test]
    fn tagged_union_late_and_unknown_tags() {
        let late: Shape = serde_json::from_str(r#"{"name":"a","type":"named"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&late).unwrap(),
            r#"{"type":"named","name":"a"}"#
        );
        let unknown: Shape = serde_json::from_str(r#"{"type":"blob","x":[1]}"#).unwrap();
        assert_eq!(unknown.tag(), "blob");
        assert_eq!(
            serde_json::to_string(&unknown).unwrap(),
            r#"{"type":"blob","x":[1]}"#
        );
        let err = serde_json::from_str::<Shape>(r#"{"type":"named"}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "missing member `name` at line 1 column 16");
    }
}

/// Refuses values that JSON text could not carry losslessly: negative zero and non-finite
/// floats (spec 12.1 rule 2). It walks any `Serialize` value and writes nothing, so writers can
/// audit typed payloads and their `extra` maps before encoding.
pub(crate) fn check_serialize_lossless<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<(), String> {
    value.serialize(FloatAudit).map_err(|e| e.0)
}

#[derive(Debug)]
struct AuditError(String);

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AuditError {}

impl serde::ser::Error for AuditError {
    fn custom<T: fmt::Display>(msg: T) -> AuditError {
        AuditError(msg.to_string())
    }
}

struct FloatAudit;

type Audit = Result<(), AuditError>;

impl serde::Serializer for FloatAudit {
    type Ok = ();
    type Error = AuditError;
    type SerializeSeq = FloatAudit;
    type SerializeTuple = FloatAudit;
    type SerializeTupleStruct = FloatAudit;
    type SerializeTupleVariant = FloatAudit;
    type SerializeMap = FloatAudit;
    type SerializeStruct = FloatAudit;
    type SerializeStructVariant = FloatAudit;

    fn serialize_f64(self, v: f64) -> Audit {
        if !v.is_finite() {
            return Err(AuditError(format!("{v} is not a finite number")));
        }
        if v == 0.0 && v.is_sign_negative() {
            return Err(AuditError("negative zero is not lossless JSON".to_owned()));
        }
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Audit {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_bool(self, _: bool) -> Audit {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Audit {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Audit {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Audit {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Audit {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Audit {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Audit {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Audit {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Audit {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Audit {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Audit {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Audit {
        Ok(())
    }
    fn serialize_none(self) -> Audit {
        Ok(())
    }
    fn serialize_some<T: serde::Serialize + ?Sized>(self, value: &T) -> Audit {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Audit {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Audit {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Audit {
        Ok(())
    }
    fn serialize_newtype_struct<T: serde::Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Audit {
        if name == crate::pieces::PIECES_NEWTYPE {
            // Strings only: nothing a JSON text could not carry.
            return Ok(());
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: serde::Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Audit {
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<FloatAudit, AuditError> {
        Ok(self)
    }
}

macro_rules! audit_compound {
    ($($trait:ident :: $method:ident),*) => {$(
        impl serde::ser::$trait for FloatAudit {
            type Ok = ();
            type Error = AuditError;
            fn $method<T: serde::Serialize + ?Sized>(&mut self, value: &T) -> Audit {
                value.serialize(FloatAudit)
            }
            fn end(self) -> Audit {
                Ok(())
            }
        }
    )*};
}

audit_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl serde::ser::SerializeMap for FloatAudit {
    type Ok = ();
    type Error = AuditError;
    fn serialize_key<T: serde::Serialize + ?Sized>(&mut self, _: &T) -> Audit {
        Ok(())
    }
    fn serialize_value<T: serde::Serialize + ?Sized>(&mut self, value: &T) -> Audit {
        value.serialize(FloatAudit)
    }
    fn end(self) -> Audit {
        Ok(())
    }
}

impl serde::ser::SerializeStruct for FloatAudit {
    type Ok = ();
    type Error = AuditError;
    fn serialize_field<T: serde::Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> Audit {
        v.serialize(FloatAudit)
    }
    fn end(self) -> Audit {
        Ok(())
    }
}

impl serde::ser::SerializeStructVariant for FloatAudit {
    type Ok = ();
    type Error = AuditError;
    fn serialize_field<T: serde::Serialize + ?Sized>(&mut self, _: &'static str, v: &T) -> Audit {
        v.serialize(FloatAudit)
    }
    fn end(self) -> Audit {
        Ok(())
    }
}
