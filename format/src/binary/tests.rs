//! Tests of the binary codec: golden bytes, round trips, refusals and hostile input.

use std::borrow::Cow;
use std::fmt;

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde::de::{self, DeserializeSeed, Visitor};
use serde::ser::{self, Serialize};
use serde::Deserialize;
use serde_json::{json, Number, Value};

use super::varint::write_varint;
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
    let decoded = from_slice_seed(
        &bytes,
        DataSeed {
            kind,
            legacy: false,
        },
    )
    .unwrap();
    assert_eq!(&decoded, data, "{kind}");
    let tree: Value = from_slice(&bytes).unwrap();
    assert_eq!(tree, serde_json::to_value(DataRef(data)).unwrap(), "{kind}");
}

fn decode_json_payload(kind: &EventType, text: &str) -> EventData {
    let mut de = serde_json::Deserializer::from_str(text);
    DataSeed {
        kind,
        legacy: false,
    }
    .deserialize(&mut de)
    .unwrap()
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
    assert_eq!(encode(&'\u{e9}'), vec![0x06, 0x02, 0xc3, 0xa9]);
}

// Goal: every kind of JSON value round-trips to an equal `Value`, keys in input order.
// Method: `check_value` on nested, unicode, extreme and empty values.
#[test]
fn values_round_trip() {
    let long = "\u{df}".repeat(200);
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
        json!({"\u{43a}\u{43b}\u{44e}\u{447}": "\u{437}\u{43d}\u{430}\u{447}\u{435}\u{43d}\u{438}\u{435}", "\u{1f642}": ["\u{0}", "\u{ffff}", long]}),
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
            r#"{"id":"m1","role":"user","content":[{"type":"text","text":"h\u00e9llo \u2713"}],
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
        letter: '\u{2211}',
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
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(at, byte)| Damage::Insert(at, byte)),
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
    fn prop_damaged_encodings_are_handled(
        value in json_value(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
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

/// One element of a packed run as the binary encoder writes it, or damaged.
#[derive(Debug, Clone)]
enum RunElement {
    Ascii(String),
    Text(String),
    BadUtf8,
    Long,
    Uint(u64),
    Negative(i64),
    NegativeTooLarge,
    NotMinimal,
    Float,
    Null,
    Cut,
}

fn run_element() -> impl Strategy<Value = RunElement> {
    prop_oneof![
        4 => "[ -~]{0,12}".prop_map(RunElement::Ascii),
        1 => "[a-z\u{e9}\u{20ac}\u{1f600}]{1,6}".prop_map(RunElement::Text),
        1 => Just(RunElement::BadUtf8),
        1 => Just(RunElement::Long),
        4 => prop_oneof![0u64..300, Just(i64::MAX as u64), Just(i64::MAX as u64 + 1), Just(u64::MAX)]
            .prop_map(RunElement::Uint),
        2 => prop_oneof![-300i64..0, Just(i64::MIN)].prop_map(RunElement::Negative),
        1 => Just(RunElement::NegativeTooLarge),
        1 => Just(RunElement::NotMinimal),
        1 => Just(RunElement::Float),
        1 => Just(RunElement::Null),
        1 => Just(RunElement::Cut),
    ]
}

fn put_run_element(element: &RunElement, out: &mut Vec<u8>) {
    let string = |bytes: &[u8], out: &mut Vec<u8>| {
        out.push(TAG_STRING);
        write_varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    };
    match element {
        RunElement::Ascii(text) | RunElement::Text(text) => string(text.as_bytes(), out),
        RunElement::BadUtf8 => string(&[b'a', 0xff, b'b'], out),
        RunElement::Long => string(&[b'x'; 130], out),
        RunElement::Uint(value) => {
            out.push(TAG_UINT);
            write_varint(out, *value);
        }
        RunElement::Negative(value) => {
            out.push(TAG_NEGATIVE_INT);
            write_varint(out, !*value as u64);
        }
        RunElement::NegativeTooLarge => {
            out.push(TAG_NEGATIVE_INT);
            write_varint(out, u64::MAX);
        }
        RunElement::NotMinimal => out.extend_from_slice(&[TAG_UINT, 0x85, 0x00]),
        RunElement::Float => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&1.5f64.to_le_bytes());
        }
        RunElement::Null => out.push(TAG_NULL),
        RunElement::Cut => out.push(TAG_STRING),
    }
}

/// A packed run's bytes: an array of `elements` whose count is off by `count_delta`, or (with
/// `not_array`) a lone string.
fn run_bytes(elements: &[RunElement], count_delta: i64, not_array: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if not_array {
        out.extend_from_slice(&[TAG_STRING, 1, b'a']);
        return out;
    }
    out.push(TAG_ARRAY);
    write_varint(
        &mut out,
        (elements.len() as i64 + count_delta).max(0) as u64,
    );
    for element in elements {
        put_run_element(element, &mut out);
    }
    out
}

proptest! {
    #![proptest_config(Config { cases: 2048, failure_persistence: None, ..Config::default() })]

    // Goal: a skimmed packed run checked in one pass by the decoder (`Decoder::skim_run`)
    // is taken or refused exactly as the element-by-element read takes or refuses it, with
    // the same text; a taken run holds nothing.
    // Method: arrays of elements of every kind, valid and damaged, their counts off by one
    // either way, and non-arrays; each decoded as `Pieces` and as `Gaps`, whole and skimming.
    #[test]
    fn a_run_skimmed_in_one_pass_reads_as_one_read_element_by_element(
        elements in proptest::collection::vec(run_element(), 0..24),
        count_delta in -1i64..=1,
        not_array in proptest::bool::weighted(0.05),
    ) {
        let bytes = run_bytes(&elements, count_delta, not_array);
        let whole = from_slice::<crate::pieces::Pieces>(&bytes).map_err(|e| e.to_string());
        let skimmed = crate::skim::skimming(true, || {
            from_slice::<crate::pieces::Pieces>(&bytes).map_err(|e| e.to_string())
        });
        match (&whole, &skimmed) {
            (Ok(_), Ok(skimmed)) => prop_assert!(skimmed.is_empty()),
            _ => prop_assert_eq!(whole.map(drop), skimmed.map(drop)),
        }
        let whole = from_slice::<crate::gaps::Gaps>(&bytes).map_err(|e| e.to_string());
        let skimmed = crate::skim::skimming(true, || {
            from_slice::<crate::gaps::Gaps>(&bytes).map_err(|e| e.to_string())
        });
        match (&whole, &skimmed) {
            (Ok(_), Ok(skimmed)) => prop_assert_eq!(skimmed, &crate::gaps::Gaps::default()),
            _ => prop_assert_eq!(whole.map(drop), skimmed.map(drop)),
        }
    }
}

// Goal: the one-pass check of a skimmed run is the path plain runs take, so the comparison
// above is about it: a run of ASCII strings and one of small integers are taken whole, a
// mixed run and a run too deep are not, and the cursor moves only past a taken run.
#[test]
fn plain_runs_are_skimmed_in_one_pass() {
    use super::de::{Decoder, Reader, Run};
    let ascii = |text: &str| RunElement::Ascii(text.to_owned());
    let strings = run_bytes(&[ascii("ab"), ascii("c d")], 0, false);
    let integers = run_bytes(&[RunElement::Uint(3), RunElement::Negative(-2)], 0, false);
    let mixed = run_bytes(&[ascii("ab"), RunElement::Uint(1)], 0, false);
    // An array one level too deep is left to the element-by-element read, which refuses it.
    for (bytes, run, depth, taken) in [
        (&strings, Run::Strings, 0, true),
        (&integers, Run::Integers, 0, true),
        (&mixed, Run::Strings, 0, false),
        (&strings, Run::Strings, DEPTH_MAX, false),
    ] {
        let mut decoder = Decoder {
            reader: Reader::new(bytes),
            depth,
        };
        assert_eq!(decoder.skim_run(run), taken);
        let end = if taken { bytes.len() as u64 } else { 0 };
        assert_eq!(decoder.reader.offset(), end);
    }
}
