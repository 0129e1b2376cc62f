//! Lines read straight from an `ExportLogsServiceRequest`'s protobuf bytes.
//!
//! Decoding with prost builds a tree of owned strings - a key and a value per attribute, a
//! realistic record carries fifteen - which [`super::into_lines`] then copies into each line's
//! one attribute buffer and frees. This walk copies every string once, from the wire into the
//! line, and allocates nothing else per attribute.
//!
//! It reads only what its common case needs and gives up on the rest: [`lines`] returns `None`
//! (the caller then decodes with prost, which accepts or refuses exactly as before) for a body
//! that is not well-formed protobuf, a field with an unexpected wire type, a group, a singular
//! message field sent twice (prost merges those), and an array or key-value-list value (the
//! one deep structure, rendered by [`super::render_value`]). What it does return is what prost
//! and `into_lines` would have made of the same bytes; `wire_lines_are_what_prost_makes_of_them`
//! and the `otlp_decode` fuzz target hold it to that.

use opentelemetry_proto::tonic::common::v1::EntityRef;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message;
use prost::encoding::{WireType, decode_key, decode_varint};

use super::Line;

/// A request's lines and its flattened size, read from its bytes.
#[derive(Debug)]
pub struct WireLines {
    /// The lines, in request order (what [`super::into_lines`] makes).
    pub lines: Vec<Line>,
    /// The request's size once flattened (what [`super::expanded_bytes`] counts).
    pub expanded: usize,
}

/// The lines of a protobuf `ExportLogsServiceRequest` and its flattened size, read from `body`
/// with no decoded tree in between; `None` where this walk leaves the body to prost (see the
/// module's documentation).
pub fn lines(body: &[u8]) -> Option<WireLines> {
    lines_counted(body, super::wire_record_count(body)?)
}

/// [`lines`] of a body whose records [`super::wire_record_count`] has counted already.
pub(super) fn lines_counted(body: &[u8], records: usize) -> Option<WireLines> {
    let mut out = WireLines {
        lines: Vec::with_capacity(records),
        expanded: body.len(),
    };
    let mut scratch = Scratch::default();
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, Value::Bytes(resource_logs)) => {
                resource_logs_into(resource_logs, &mut out, &mut scratch)?;
            }
            (1, _) => return None,
            _ => {}
        }
    }
    Some(out)
}

/// Buffers reused from record to record.
#[derive(Default)]
struct Scratch<'a> {
    /// The current record's attributes, read before their buffer is sized.
    attributes: Vec<(&'a str, Scalar<'a>)>,
}

/// One field's value as the wire carries it.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(&'a [u8]),
}

/// Reads the next field of a message. `None` for bytes prost would refuse and for groups
/// (deprecated; prost skips them with a depth it counts from the top of the request).
fn next_field<'a>(buf: &mut &'a [u8]) -> Option<(u32, Value<'a>)> {
    let (tag, wire_type) = decode_key(buf).ok()?;
    let value = match wire_type {
        WireType::Varint => Value::Varint(decode_varint(buf).ok()?),
        WireType::SixtyFourBit => {
            let (bytes, rest) = buf.split_first_chunk::<8>()?;
            *buf = rest;
            Value::Fixed64(u64::from_le_bytes(*bytes))
        }
        WireType::ThirtyTwoBit => {
            *buf = buf.get(4..)?;
            Value::Fixed32
        }
        WireType::LengthDelimited => {
            let len = usize::try_from(decode_varint(buf).ok()?).ok()?;
            let value = buf.get(..len)?;
            *buf = &buf[len..];
            Value::Bytes(value)
        }
        WireType::StartGroup | WireType::EndGroup => return None,
    };
    Some((tag, value))
}

/// A string field's text, as prost checks it.
fn text(value: Value<'_>) -> Option<&str> {
    match value {
        Value::Bytes(bytes) => std::str::from_utf8(bytes).ok(),
        _ => None,
    }
}

/// Checks that a field prost would read as a varint is one.
fn varint(value: Value<'_>) -> Option<u64> {
    match value {
        Value::Varint(v) => Some(v),
        _ => None,
    }
}

/// `ResourceLogs`: `resource` (1), `scope_logs` (2), `schema_url` (3).
fn resource_logs_into<'a>(
    body: &'a [u8],
    out: &mut WireLines,
    scratch: &mut Scratch<'a>,
) -> Option<()> {
    // The resource may follow its scopes on the wire, and every line carries its attributes:
    // read it first.
    let mut resource: Option<Attrs> = None;
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, Value::Bytes(_)) if resource.is_some() => return None,
            (1, Value::Bytes(bytes)) => resource = Some(resource_attributes(bytes)?),
            (2, Value::Bytes(_)) => {}
            (3, value) => {
                text(value)?;
            }
            (1 | 2, _) => return None,
            _ => {}
        }
    }
    let resource = resource.unwrap_or_default();
    let shared: ourios_sinks::SharedAttributes = resource.pairs.into();
    let mut buf = body;
    while !buf.is_empty() {
        if let (2, Value::Bytes(scope_logs)) = next_field(&mut buf)? {
            let first = out.lines.len();
            let scope = scope_logs_into(scope_logs, &shared, out, scratch)?;
            let records = out.lines.len() - first;
            out.expanded = out
                .expanded
                .saturating_add((resource.size + scope).saturating_mul(records));
        }
    }
    Some(())
}

/// A resource's or scope's attributes as the lines carry them, and their size as
/// [`super::expanded_bytes`] counts it.
#[derive(Default)]
struct Attrs {
    pairs: Vec<(String, String)>,
    size: usize,
}

impl Attrs {
    fn push(&mut self, key_value: &[u8]) -> Option<()> {
        let (key, value) = key_value_of(key_value)?;
        let mut rendered = String::new();
        value.render_into(&mut rendered);
        self.size += key.len() + value.encoded_len();
        self.pairs.push((key.to_owned(), rendered));
        Some(())
    }
}

/// `Resource`: `attributes` (1), `dropped_attributes_count` (2), `entity_refs` (3).
fn resource_attributes(body: &[u8]) -> Option<Attrs> {
    let mut attrs = Attrs::default();
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, Value::Bytes(kv)) => attrs.push(kv)?,
            (2, Value::Varint(_)) => {}
            // Flat strings only: prost checks them the same from any depth.
            (3, Value::Bytes(entity)) => {
                EntityRef::decode(entity).ok()?;
            }
            (1..=3, _) => return None,
            _ => {}
        }
    }
    Some(attrs)
}

/// `ScopeLogs`: `scope` (1), `log_records` (2), `schema_url` (3). Pushes its records' lines and
/// returns the size of its scope's attributes.
fn scope_logs_into<'a>(
    body: &'a [u8],
    resource: &ourios_sinks::SharedAttributes,
    out: &mut WireLines,
    scratch: &mut Scratch<'a>,
) -> Option<usize> {
    let mut scope: Option<usize> = None;
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, Value::Bytes(_)) if scope.is_some() => return None,
            (1, Value::Bytes(bytes)) => scope = Some(scope_size(bytes)?),
            (2, Value::Bytes(record)) => out.lines.push(line(record, resource, scratch)?),
            (3, value) => {
                text(value)?;
            }
            (1 | 2, _) => return None,
            _ => {}
        }
    }
    Some(scope.unwrap_or(0))
}

/// `InstrumentationScope`: `name` (1), `version` (2), `attributes` (3),
/// `dropped_attributes_count` (4). Only its attributes' size is kept.
fn scope_size(body: &[u8]) -> Option<usize> {
    let mut attrs = Attrs::default();
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1 | 2, value) => {
                text(value)?;
            }
            (3, Value::Bytes(kv)) => attrs.push(kv)?,
            (4, Value::Varint(_)) => {}
            (3 | 4, _) => return None,
            _ => {}
        }
    }
    Some(attrs.size)
}

/// A `LogRecord` as its line: `time_unix_nano` (1), `severity_number` (2), `severity_text`
/// (3), `body` (5), `attributes` (6), `dropped_attributes_count` (7), `flags` (8), `trace_id`
/// (9), `span_id` (10), `observed_time_unix_nano` (11), `event_name` (12).
fn line<'a>(
    body: &'a [u8],
    resource: &ourios_sinks::SharedAttributes,
    scratch: &mut Scratch<'a>,
) -> Option<Line> {
    let mut time_unix_nano = 0;
    let mut observed_time_unix_nano = 0;
    let mut severity_number = 0;
    let mut severity_text = "";
    let mut text_body: Option<Scalar<'_>> = None;
    let mut trace_id: &[u8] = &[];
    let mut span_id: &[u8] = &[];
    let attributes = &mut scratch.attributes;
    attributes.clear();
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, Value::Fixed64(v)) => time_unix_nano = v,
            (11, Value::Fixed64(v)) => observed_time_unix_nano = v,
            // prost reads an `int32` (and an enumeration) as the varint's low 32 bits.
            (2, Value::Varint(v)) => severity_number = v as i32,
            (3, value) => severity_text = text(value)?,
            (5, Value::Bytes(_)) if text_body.is_some() => return None,
            (5, Value::Bytes(bytes)) => text_body = Some(any_value(bytes)?),
            (6, Value::Bytes(kv)) => attributes.push(key_value_of(kv)?),
            (7, Value::Varint(_)) | (8, Value::Fixed32) => {}
            (9, Value::Bytes(bytes)) => trace_id = bytes,
            (10, Value::Bytes(bytes)) => span_id = bytes,
            (12, value) => {
                text(value)?;
            }
            (1..=3 | 5..=12, _) => return None,
            _ => {}
        }
    }
    // Exact for string values; the buffer grows if another value renders longer.
    let text_bytes = attributes
        .iter()
        .map(|(key, value)| key.len() + value.len_hint())
        .sum();
    let mut attrs = ourios_sinks::Attributes::with_capacity(attributes.len(), text_bytes);
    let mut rendered = String::new();
    for &(key, value) in attributes.iter() {
        match value {
            Scalar::Str(s) => attrs.push(key, s),
            other => {
                rendered.clear();
                other.render_into(&mut rendered);
                attrs.push(key, &rendered);
            }
        }
    }
    let mut line_body = String::new();
    if let Some(value) = text_body {
        value.render_into(&mut line_body);
    }
    Some(Line {
        time_unix_nano,
        observed_time_unix_nano,
        severity_number,
        severity_text: severity_text.to_owned(),
        body: line_body,
        attributes: attrs,
        resource_attributes: std::sync::Arc::clone(resource),
        trace_id: trace_id.try_into().ok(),
        span_id: span_id.try_into().ok(),
    })
}

/// `KeyValue`: `key` (1), `value` (2), `key_strindex` (3).
fn key_value_of(body: &[u8]) -> Option<(&str, Scalar<'_>)> {
    let mut key = "";
    let mut value: Option<Scalar<'_>> = None;
    let mut buf = body;
    while !buf.is_empty() {
        match next_field(&mut buf)? {
            (1, v) => key = text(v)?,
            (2, Value::Bytes(_)) if value.is_some() => return None,
            (2, Value::Bytes(bytes)) => value = Some(any_value(bytes)?),
            (3, v) => {
                varint(v)?;
            }
            (2, _) => return None,
            _ => {}
        }
    }
    Some((key, value.unwrap_or(Scalar::Absent)))
}

/// An `AnyValue` other than an array or a key-value list.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    /// No value field (or no `value` at all).
    Absent,
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'a [u8]),
    Strindex(i32),
}

/// `AnyValue`: one of `string_value` (1), `bool_value` (2), `int_value` (3), `double_value`
/// (4), `array_value` (5), `kvlist_value` (6), `bytes_value` (7), `string_value_strindex` (8);
/// the last one sent wins, as in prost. `None` for an array or a list.
fn any_value(body: &[u8]) -> Option<Scalar<'_>> {
    let mut value = Scalar::Absent;
    let mut buf = body;
    while !buf.is_empty() {
        value = match next_field(&mut buf)? {
            (1, v) => Scalar::Str(text(v)?),
            (2, Value::Varint(v)) => Scalar::Bool(v != 0),
            (3, Value::Varint(v)) => Scalar::Int(v as i64),
            (4, Value::Fixed64(v)) => Scalar::Double(f64::from_bits(v)),
            (7, Value::Bytes(b)) => Scalar::Bytes(b),
            (8, Value::Varint(v)) => Scalar::Strindex(v as i32),
            (1..=8, _) => return None,
            _ => value,
        };
    }
    Some(value)
}

impl Scalar<'_> {
    /// About the bytes [`Scalar::render_into`] appends: exact for a string (as `into_lines`
    /// sizes its buffer).
    fn len_hint(self) -> usize {
        match self {
            Scalar::Str(s) => s.len(),
            _ => 8,
        }
    }

    /// Appends what [`super::render_value`] makes of this value.
    fn render_into(self, out: &mut String) {
        use std::fmt::Write as _;
        // Writing to a `String` cannot fail.
        let _ = match self {
            Scalar::Absent => Ok(()),
            Scalar::Str(s) => {
                out.push_str(s);
                Ok(())
            }
            Scalar::Bool(b) => write!(out, "{b}"),
            // As `Display` writes it, without the formatting machinery (a realistic record's
            // integer attributes cost the node 0.5 % of its time through `write!`).
            Scalar::Int(i) => {
                out.push_str(itoa::Buffer::new().format(i));
                Ok(())
            }
            Scalar::Double(d) => write!(out, "{d}"),
            Scalar::Bytes(bytes) => bytes.iter().try_for_each(|x| write!(out, "{x:02x}")),
            Scalar::Strindex(i) => write!(out, "strindex:{i}"),
        };
    }

    /// The value's `encoded_len` as prost has it (only resources and scopes ask, once each).
    fn encoded_len(self) -> usize {
        let value = match self {
            Scalar::Absent => return 0,
            Scalar::Str(s) => any_value::Value::StringValue(s.to_owned()),
            Scalar::Bool(b) => any_value::Value::BoolValue(b),
            Scalar::Int(i) => any_value::Value::IntValue(i),
            Scalar::Double(d) => any_value::Value::DoubleValue(d),
            Scalar::Bytes(b) => any_value::Value::BytesValue(b.to_vec()),
            Scalar::Strindex(i) => any_value::Value::StringValueStrindex(i),
        };
        AnyValue { value: Some(value) }.encoded_len()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, any_value,
    };
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use proptest::prelude::*;
    use prost::Message;

    use super::super::{expanded_bytes, into_lines};

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-z=: \"]{1,8}", ".{0,6}"]
    }

    /// Scalars mostly; an array now and then (the walk leaves those to prost).
    fn any_value() -> impl Strategy<Value = AnyValue> {
        use any_value::Value as V;
        let value = prop_oneof![
            4 => text().prop_map(V::StringValue),
            1 => any::<bool>().prop_map(V::BoolValue),
            1 => any::<i64>().prop_map(V::IntValue),
            1 => any::<f64>().prop_map(V::DoubleValue),
            1 => prop::collection::vec(any::<u8>(), 0..6).prop_map(V::BytesValue),
            1 => any::<i32>().prop_map(V::StringValueStrindex),
            1 => text().prop_map(|s| V::ArrayValue(ArrayValue {
                values: vec![AnyValue { value: Some(V::StringValue(s)) }],
            })),
        ];
        prop::option::weighted(0.9, value).prop_map(|value| AnyValue { value })
    }

    fn key_values() -> impl Strategy<Value = Vec<KeyValue>> {
        let kv = (text(), prop::option::weighted(0.9, any_value()), 0..2i32).prop_map(
            |(key, value, key_strindex)| KeyValue {
                key,
                value,
                key_strindex,
            },
        );
        prop::collection::vec(kv, 0..4)
    }

    fn id() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(vec![]),
            Just(vec![7; 8]),
            Just(vec![9; 16]),
            Just(vec![1; 3])
        ]
    }

    fn time() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0), any::<u64>(), 1u64..(1 << 62)]
    }

    fn record() -> impl Strategy<Value = LogRecord> {
        (
            (time(), time(), any::<i32>(), text()),
            (prop::option::weighted(0.9, any_value()), key_values()),
            (id(), id(), any::<u32>(), any::<u32>(), text()),
        )
            .prop_map(
                |(
                    (time_unix_nano, observed_time_unix_nano, severity_number, severity_text),
                    (body, attributes),
                    (trace_id, span_id, flags, dropped_attributes_count, event_name),
                )| LogRecord {
                    time_unix_nano,
                    observed_time_unix_nano,
                    severity_number,
                    severity_text,
                    body,
                    attributes,
                    dropped_attributes_count,
                    flags,
                    trace_id,
                    span_id,
                    event_name,
                },
            )
    }

    fn request() -> impl Strategy<Value = ExportLogsServiceRequest> {
        let scope = (text(), text(), key_values()).prop_map(|(name, version, attributes)| {
            InstrumentationScope {
                name,
                version,
                attributes,
                dropped_attributes_count: 0,
            }
        });
        let scope_logs = (
            prop::option::of(scope),
            prop::collection::vec(record(), 0..4),
            text(),
        )
            .prop_map(|(scope, log_records, schema_url)| ScopeLogs {
                scope,
                log_records,
                schema_url,
            });
        let resource = (key_values(), any::<bool>()).prop_map(|(attributes, entity)| Resource {
            attributes,
            dropped_attributes_count: 1,
            entity_refs: if entity {
                vec![EntityRef {
                    r#type: "service".into(),
                    id_keys: vec!["service.name".into()],
                    ..Default::default()
                }]
            } else {
                vec![]
            },
        });
        let resource_logs = (
            prop::option::of(resource),
            prop::collection::vec(scope_logs, 0..3),
        )
            .prop_map(|(resource, scope_logs)| ResourceLogs {
                resource,
                scope_logs,
                schema_url: String::new(),
            });
        prop::collection::vec(resource_logs, 0..3)
            .prop_map(|resource_logs| ExportLogsServiceRequest { resource_logs })
    }

    /// What a client no sane library would send, made from a valid body: a byte changed,
    /// bytes cut off or inserted, a stretch sent twice (a field repeated).
    fn damage(bytes: &mut Vec<u8>, how: u8, at: usize, len: usize, byte: u8) {
        if bytes.is_empty() {
            return;
        }
        let at = at % bytes.len();
        match how % 4 {
            0 => bytes[at] = byte,
            1 => bytes.truncate(at),
            2 => bytes
                .splice(at..at, std::iter::repeat_n(byte, len % 4 + 1))
                .for_each(drop),
            _ => {
                let end = (at + len % 40).min(bytes.len());
                let stretch = bytes[at..end].to_vec();
                bytes.splice(end..end, stretch).for_each(drop);
            }
        }
    }

    /// Holds `lines` to prost: whatever it reads, prost decodes too, into the same lines and
    /// the same flattened size.
    fn agrees(bytes: &[u8]) -> Result<bool, TestCaseError> {
        let Some(read) = super::lines(bytes) else {
            return Ok(false);
        };
        let request = ExportLogsServiceRequest::decode(bytes);
        prop_assert!(
            request.is_ok(),
            "the walk read what prost refuses: {request:?}"
        );
        let request = request.unwrap();
        prop_assert_eq!(read.expanded, expanded_bytes(&request, bytes.len()));
        prop_assert_eq!(read.lines, into_lines(request));
        Ok(true)
    }

    fn has_array(request: &ExportLogsServiceRequest) -> bool {
        let array = |v: &AnyValue| matches!(v.value, Some(any_value::Value::ArrayValue(_)));
        let kvs = |kvs: &[KeyValue]| kvs.iter().filter_map(|kv| kv.value.as_ref()).any(array);
        request.resource_logs.iter().any(|rl| {
            rl.resource.as_ref().is_some_and(|r| kvs(&r.attributes))
                || rl.scope_logs.iter().any(|sl| {
                    sl.scope.as_ref().is_some_and(|s| kvs(&s.attributes))
                        || sl
                            .log_records
                            .iter()
                            .any(|r| r.body.as_ref().is_some_and(array) || kvs(&r.attributes))
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The lines read from a request's bytes are the lines prost's decoding and
        /// `into_lines` make of them, for any request and for damaged bytes; and a valid
        /// request with no array value is read by the walk (it does not give every body to
        /// prost). Mutation check (by hand): render a double with `{:?}`, or let a second
        /// `body` field replace the first instead of giving up, and it fails.
        #[test]
        fn wire_lines_are_what_prost_makes_of_them(
            request in request(),
            how in any::<u8>(),
            at in any::<usize>(),
            len in any::<usize>(),
            byte in any::<u8>(),
        ) {
            let bytes = request.encode_to_vec();
            let read = agrees(&bytes)?;
            prop_assert_eq!(read, !has_array(&request), "the walk gave up on a plain request");
            let mut damaged = bytes;
            damage(&mut damaged, how, at, len, byte);
            agrees(&damaged)?;
        }

        /// Two messages sent as one field are one message to prost, merged: a record's
        /// scalars and ids are the later ones', its attributes both's, its bodies merged; a
        /// resource sent twice (after its scopes) merges too. The walk reads each as prost
        /// does or leaves it to prost. Mutation check (by hand): let a second `body` field
        /// replace the first instead of giving up, and it fails.
        #[test]
        fn fields_sent_twice_are_read_as_prost_merges_them(
            first in record(),
            second in record(),
            resources in prop::collection::vec(key_values(), 0..3),
            flip in any::<bool>(),
        ) {
            fn field(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
                prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, out);
                prost::encoding::encode_varint(bytes.len() as u64, out);
                out.extend_from_slice(bytes);
            }
            let mut record = first.encode_to_vec();
            record.extend(second.encode_to_vec());
            let mut scope_logs = Vec::new();
            field(2, &record, &mut scope_logs);
            let mut resource_logs = Vec::new();
            let resources: Vec<Vec<u8>> = resources
                .into_iter()
                .map(|attributes| Resource { attributes, ..Default::default() }.encode_to_vec())
                .collect();
            if flip {
                field(2, &scope_logs, &mut resource_logs);
            }
            for resource in &resources {
                field(1, resource, &mut resource_logs);
            }
            if !flip {
                field(2, &scope_logs, &mut resource_logs);
            }
            let mut body = Vec::new();
            field(1, &resource_logs, &mut body);
            agrees(&body)?;
        }
    }
}
