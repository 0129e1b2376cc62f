//! Building OTLP log requests: records, attributes, and the request around them (one resource,
//! one scope), as every test, tool and benchmark that sends logs needs them.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// A string value.
pub fn text(s: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    })
}

/// A string attribute.
pub fn attr(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: text(value),
        ..Default::default()
    }
}

/// A record with a string body: its time and observed time, severity (number and text) and
/// attributes.
pub fn record(
    (time, observed): (u64, u64),
    (severity_number, severity_text): (i32, &str),
    body: &str,
    attributes: Vec<KeyValue>,
) -> LogRecord {
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: observed,
        severity_number,
        severity_text: severity_text.to_owned(),
        body: text(body),
        attributes,
        ..Default::default()
    }
}

/// One request: `records` under one resource (with `resource` attributes) and one scope.
pub fn request(resource: Vec<KeyValue>, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Nanoseconds since the Unix epoch now (0 before it).
pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
