//! Line queries: the filters `ourios-node query` and the Loki endpoints take, turned into a
//! DataFusion plan over the `logs` view, and the rows it yields written as text, JSON lines or
//! CSV.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, TimestampNanosecondType};
use arrow_array::{Array, ArrayRef, MapArray, RecordBatch};
use arrow_schema::DataType;
use datafusion::arrow::compute::cast;
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::functions::expr_fn::{btrim, contains, get_field, lower, regexp_like};
use std::ops::Not;

use datafusion::logical_expr::{Expr, col, lit, when};
use datafusion::physical_plan::SendableRecordBatchStream;
use ourios_sinks::Day;

use crate::{QueryError, TenantScope};

/// Which end of the range comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Newest line first (what a person tailing logs wants; the default).
    #[default]
    NewestFirst,
    /// Oldest line first.
    OldestFirst,
}

/// An inclusive range of OTLP severity numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Severity {
    /// Lowest severity number included.
    pub min: i32,
    /// Highest severity number included.
    pub max: i32,
}

/// The OTLP severity ranges by name (each four numbers wide).
const LEVELS: [(&str, i32); 6] = [
    ("trace", 1),
    ("debug", 5),
    ("info", 9),
    ("warn", 13),
    ("error", 17),
    ("fatal", 21),
];

/// The `severity_text` values a record without a severity number is read as, and the number
/// each stands for ([`Severity::of_text`]).
const TEXT_LEVELS: [(&str, i32); 16] = [
    ("trace", 1),
    ("debug", 5),
    ("info", 9),
    ("information", 9),
    ("informational", 9),
    ("notice", 10),
    ("warn", 13),
    ("warning", 13),
    ("error", 17),
    ("err", 17),
    ("critical", 18),
    ("crit", 18),
    ("fatal", 21),
    ("alert", 21),
    ("emergency", 22),
    ("emerg", 22),
];

/// [`Severity::of_text`] as an expression over `severity_text`: 0 for text that names no level.
fn text_level() -> Expr {
    let text = lower(btrim(vec![col("severity_text")]));
    let mut levels = TEXT_LEVELS.iter();
    let Some((name, n)) = levels.next() else {
        return lit(0);
    };
    let mut case = when(text.clone().eq(lit(*name)), lit(*n));
    for (name, n) in levels {
        case = case.when(text.clone().eq(lit(*name)), lit(*n));
    }
    case.otherwise(lit(0)).unwrap_or_else(|_| lit(0))
}

impl Severity {
    /// Parse `LEVEL`, `=LEVEL`, `>=LEVEL`, `>LEVEL`, `<=LEVEL` or `<LEVEL`, where LEVEL is
    /// trace, debug, info, warn (warning), error or fatal, or an OTLP severity number 1-24.
    pub fn parse(s: &str) -> Result<Self, QueryError> {
        let s = s.trim();
        let (op, level) = [">=", "<=", ">", "<", "="]
            .iter()
            .find_map(|op| s.strip_prefix(op).map(|rest| (*op, rest.trim())))
            .unwrap_or(("=", s));
        let (lo, hi) = Self::level(level).ok_or_else(|| {
            QueryError::Invalid(format!(
                "severity {s:?}: expected [>=|>|<=|<|=]LEVEL, LEVEL one of trace, debug, info, \
                 warn, error, fatal or a number 1-24"
            ))
        })?;
        let (min, max) = match op {
            ">=" => (lo, 24),
            ">" => (hi + 1, 24),
            "<=" => (1, hi),
            "<" => (1, lo - 1),
            _ => (lo, hi),
        };
        Ok(Self { min, max })
    }

    fn level(name: &str) -> Option<(i32, i32)> {
        if let Ok(n) = name.parse::<i32>() {
            return (1..=24).contains(&n).then_some((n, n));
        }
        let name = name.to_ascii_lowercase();
        let name = if name == "warning" { "warn" } else { &name };
        LEVELS
            .iter()
            .find(|(level, _)| *level == name)
            .map(|(_, lo)| (*lo, lo + 3))
    }

    /// The severity number a record stands at, as an expression over its columns: its
    /// `severity_number`, or when that is 0 (unspecified, which is what many clients send
    /// beside a `severity_text` of `WARN` or `Error`) the number its text names
    /// ([`Severity::of_text`]), else 0.
    pub fn expr() -> Expr {
        let number = col("severity_number");
        when(number.clone().not_eq(lit(0)), number)
            .otherwise(text_level())
            .unwrap_or_else(|_| col("severity_number"))
    }

    /// The filter on a record's severity: its number in the range, or, for a record without
    /// one, the number its text names. Written as an `OR` whose first arm is the plain range, so
    /// row groups still prune by their `severity_number` statistics.
    fn filter(self) -> Expr {
        let number = col("severity_number");
        number
            .clone()
            .between(lit(self.min), lit(self.max))
            .or(number
                .eq(lit(0))
                .and(text_level().between(lit(self.min), lit(self.max))))
    }

    /// The severity number a `severity_text` names, in any case and with blanks around it:
    /// OTLP's six level names (and `warning`), and the syslog names by OTLP's mapping of them
    /// (`notice` is 10, `critical` 18, `alert` 21, `emergency` 22). `None` for other text.
    pub fn of_text(text: &str) -> Option<i32> {
        let text = text.trim();
        TEXT_LEVELS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
            .map(|(_, n)| *n)
    }

    /// The level name of a severity number (`unspecified` for 0 and out-of-range numbers).
    pub fn name_of(number: i32) -> &'static str {
        LEVELS
            .iter()
            .rev()
            .find(|(_, lo)| (1..=24).contains(&number) && number >= *lo)
            .map_or("unspecified", |(name, _)| name)
    }
}

/// What lines to read: every filter is optional, and all given ones must hold.
#[derive(Debug, Clone, Default)]
pub struct LineQuery {
    /// Lines at or after this time (ns since the epoch).
    pub since: Option<i64>,
    /// Lines before this time (ns since the epoch).
    pub until: Option<i64>,
    /// Severity range.
    pub severity: Option<Severity>,
    /// Substrings every line contains.
    pub contains: Vec<String>,
    /// Substrings no line contains.
    pub excludes: Vec<String>,
    /// Regular expressions every line matches.
    pub matches: Vec<String>,
    /// Regular expressions no line matches.
    pub not_matches: Vec<String>,
    /// (key, value) pairs: a log attribute, or failing that a resource attribute, has the value.
    pub attributes: Vec<(String, String)>,
    /// At most this many lines.
    pub limit: Option<usize>,
    /// Which end first.
    pub order: Order,
}

/// The columns a line query yields, in this order.
pub const LINE_COLUMNS: [&str; 6] = [
    "time",
    "severity_number",
    "severity_text",
    "line",
    "attributes",
    "resource_attributes",
];

fn ts(nanos: i64) -> Expr {
    lit(ScalarValue::TimestampNanosecond(
        Some(nanos),
        Some(Arc::from("+00:00")),
    ))
}

/// (date, hour) partition values of an instant.
fn partition_of(nanos: i64) -> (String, String) {
    const NANOS_PER_HOUR: i64 = 3_600_000_000_000;
    let hours = nanos.div_euclid(NANOS_PER_HOUR);
    let day = Day::from_days_since_epoch(hours.div_euclid(24));
    (day.to_string(), format!("{:02}", hours.rem_euclid(24)))
}

/// The value of attribute `key` in `map` (a `Map<Utf8, Utf8>` column).
fn attribute(map: &str, key: &str) -> Expr {
    get_field(col(map), key)
}

impl LineQuery {
    /// The filters on record columns (time and its partitions, severity, attributes): what can
    /// be decided before a line is rebuilt.
    pub fn record_predicates(&self) -> Vec<Expr> {
        let mut all: Vec<Expr> = Vec::new();
        if let Some(since) = self.since {
            all.push(col("time").gt_eq(ts(since)));
            // The partitions at or after `since`'s hour: a filter on partition columns alone,
            // which the listing applies before opening any file.
            let (date, hour) = partition_of(since);
            all.push(
                col("date")
                    .gt(lit(date.clone()))
                    .or(col("date").eq(lit(date)).and(col("hour").gt_eq(lit(hour)))),
            );
        }
        if let Some(until) = self.until {
            all.push(col("time").lt(ts(until)));
            let (date, hour) = partition_of(until);
            all.push(
                col("date")
                    .lt(lit(date.clone()))
                    .or(col("date").eq(lit(date)).and(col("hour").lt_eq(lit(hour)))),
            );
        }
        if let Some(severity) = self.severity {
            all.push(severity.filter());
        }
        for (k, v) in &self.attributes {
            let value = datafusion::functions::expr_fn::coalesce(vec![
                attribute("attributes", k),
                attribute("resource_attributes", k),
            ]);
            all.push(value.eq(lit(v.as_str())));
        }
        all
    }

    /// The filters on the rebuilt `line` (text and regular expressions); a bad regular
    /// expression is refused by name.
    pub fn line_predicates(&self) -> Result<Vec<Expr>, QueryError> {
        let mut all: Vec<Expr> = Vec::new();
        for s in &self.contains {
            all.push(contains(col("line"), lit(s.as_str())));
        }
        for s in &self.excludes {
            all.push(contains(col("line"), lit(s.as_str())).not());
        }
        for re in &self.matches {
            check_regex(re)?;
            all.push(regexp_like(col("line"), lit(re.as_str()), None));
        }
        for re in &self.not_matches {
            check_regex(re)?;
            all.push(regexp_like(col("line"), lit(re.as_str()), None).not());
        }
        Ok(all)
    }

    /// Every filter as one predicate over the `logs` view's columns (None: no filter).
    pub fn predicate(&self) -> Result<Option<Expr>, QueryError> {
        let mut all = self.record_predicates();
        all.extend(self.line_predicates()?);
        Ok(all.into_iter().reduce(Expr::and))
    }

    /// The plan: each record once, filtered, ordered by time, limited, with the columns
    /// [`LINE_COLUMNS`]. It runs once (see [`TenantScope::records_once`]).
    pub async fn dataframe(&self, scope: &TenantScope) -> Result<DataFrame, QueryError> {
        let select: Vec<Expr> = LINE_COLUMNS.iter().map(|c| col(*c)).collect();
        plan(
            scope,
            self.record_predicates(),
            self.line_predicates()?,
            Some(self.order),
            self.limit,
            select,
        )
        .await
    }

    /// Run the query; batches arrive as the engine produces them.
    pub async fn stream(
        &self,
        scope: &TenantScope,
    ) -> Result<SendableRecordBatchStream, QueryError> {
        Ok(self.dataframe(scope).await?.execute_stream().await?)
    }
}

/// Each record of `scope` once, where `record_predicates` and then `line_predicates` hold,
/// sorted by time in `order` (if any) and limited, projected to `select` (which may name
/// `line`). A line is rebuilt only where it is needed: before the sort when a line predicate
/// reads it, else only for the rows the limit keeps.
pub(crate) async fn plan(
    scope: &TenantScope,
    record_predicates: Vec<Expr>,
    line_predicates: Vec<Expr>,
    order: Option<Order>,
    limit: Option<usize>,
    select: Vec<Expr>,
) -> Result<DataFrame, QueryError> {
    let mut df = scope.records_once().await?;
    if let Some(p) = record_predicates.into_iter().reduce(Expr::and) {
        df = df.filter(p)?;
    }
    let sort_and_limit = |mut df: DataFrame| -> Result<DataFrame, QueryError> {
        if let Some(order) = order {
            df = df.sort(vec![col("time").sort(order == Order::OldestFirst, false)])?;
        }
        if let Some(n) = limit {
            df = df.limit(0, Some(n))?;
        }
        Ok(df)
    };
    if let Some(p) = line_predicates.into_iter().reduce(Expr::and) {
        df = df.with_column("line", scope.line_expr())?.filter(p)?;
        df = sort_and_limit(df)?;
    } else {
        df = sort_and_limit(df)?;
        df = df.with_column("line", scope.line_expr())?;
    }
    Ok(df.select(select)?)
}

fn check_regex(re: &str) -> Result<(), QueryError> {
    regex::Regex::new(re)
        .map(|_| ())
        .map_err(|e| QueryError::Invalid(format!("regex {re:?}: {e}")))
}

/// How `ourios-node query` writes rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `TIME SEVERITY LINE`, then the log attributes as `{k=v, ...}` when there are any.
    #[default]
    Text,
    /// One JSON object a line: time, severity_number, severity, line, attributes, resource.
    Jsonl,
    /// `time,severity,line` with RFC 4180 quoting, after a header row.
    Csv,
}

impl std::str::FromStr for Format {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "jsonl" => Ok(Self::Jsonl),
            "csv" => Ok(Self::Csv),
            other => Err(QueryError::Invalid(format!(
                "format {other:?}: expected text, jsonl or csv"
            ))),
        }
    }
}

/// An RFC 3339 time with nanoseconds (UTC) for `nanos` since the epoch.
pub fn rfc3339(nanos: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    humantime::format_rfc3339_nanos(t).to_string()
}

/// Nanoseconds since the epoch of `t` (0 before the epoch, saturating past 2262).
pub fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Parse a time argument: an RFC 3339 time, nanoseconds since the epoch, or a duration
/// (`90s`, `15m`, `1h`, `7d`, `1h30m`) meaning that long before `now`.
pub fn parse_time(s: &str, now: SystemTime) -> Result<i64, QueryError> {
    let s = s.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(unix_nanos(t));
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(unix_nanos(now.checked_sub(d).unwrap_or(UNIX_EPOCH))),
        Err(_) => Err(QueryError::Invalid(format!(
            "time {s:?}: expected an RFC 3339 time, nanoseconds since the epoch, or a duration \
             such as 15m or 1h"
        ))),
    }
}

/// The column as a string array (casting views, which some plans produce).
fn strings(batch: &RecordBatch, name: &str) -> Result<ArrayRef, QueryError> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| QueryError::Invalid(format!("no column {name}")))?;
    Ok(match column.data_type() {
        DataType::Utf8 => Arc::clone(column),
        _ => cast(column, &DataType::Utf8).map_err(datafusion::error::DataFusionError::from)?,
    })
}

/// The (key, value) pairs of row `row` of a map column.
pub fn map_pairs(map: &MapArray, row: usize) -> Vec<(String, String)> {
    if map.is_null(row) {
        return Vec::new();
    }
    let entries = map.value(row);
    let (Some(keys), Some(values)) = (
        entries.column(0).as_string_opt::<i32>(),
        entries.column(1).as_string_opt::<i32>(),
    ) else {
        return Vec::new();
    };
    (0..entries.len())
        .map(|i| (keys.value(i).to_owned(), values.value(i).to_owned()))
        .collect()
}

fn json_map(pairs: Vec<(String, String)>) -> serde_json::Value {
    serde_json::Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect(),
    )
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Write the rows of one batch of a line query (columns [`LINE_COLUMNS`]) in `format`.
/// `header` writes the CSV header first (pass true for the first batch only).
pub fn write_rows(
    batch: &RecordBatch,
    format: Format,
    header: bool,
    out: &mut dyn Write,
) -> Result<(), QueryError> {
    let io = |e: io::Error| QueryError::Invalid(format!("writing output: {e}"));
    let bad = |c: &str| QueryError::Invalid(format!("column {c} has an unexpected type"));
    let time = batch
        .column_by_name("time")
        .and_then(|c| c.as_primitive_opt::<TimestampNanosecondType>())
        .ok_or_else(|| bad("time"))?;
    let number = batch
        .column_by_name("severity_number")
        .and_then(|c| c.as_primitive_opt::<Int32Type>())
        .ok_or_else(|| bad("severity_number"))?;
    let text = strings(batch, "severity_text")?;
    let text = text.as_string::<i32>();
    let line = strings(batch, "line")?;
    let line = line.as_string::<i32>();
    let attrs = batch
        .column_by_name("attributes")
        .and_then(|c| c.as_map_opt())
        .ok_or_else(|| bad("attributes"))?;
    let resource = batch
        .column_by_name("resource_attributes")
        .and_then(|c| c.as_map_opt())
        .ok_or_else(|| bad("resource_attributes"))?;
    if header && format == Format::Csv {
        writeln!(out, "time,severity,line").map_err(io)?;
    }
    for row in 0..batch.num_rows() {
        let when = rfc3339(time.value(row));
        let severity = match text.value(row) {
            "" => Severity::name_of(number.value(row)).to_ascii_uppercase(),
            t => t.to_owned(),
        };
        match format {
            Format::Text => {
                write!(out, "{when} {severity:<5} {}", line.value(row)).map_err(io)?;
                let pairs = map_pairs(attrs, row);
                if !pairs.is_empty() {
                    let shown: Vec<String> =
                        pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(out, "  {{{}}}", shown.join(", ")).map_err(io)?;
                }
                writeln!(out).map_err(io)?;
            }
            Format::Jsonl => {
                let object = serde_json::json!({
                    "time": when,
                    "severity_number": number.value(row),
                    "severity": severity,
                    "line": line.value(row),
                    "attributes": json_map(map_pairs(attrs, row)),
                    "resource": json_map(map_pairs(resource, row)),
                });
                writeln!(out, "{object}").map_err(io)?;
            }
            Format::Csv => {
                writeln!(
                    out,
                    "{when},{},{}",
                    csv_field(&severity),
                    csv_field(line.value(row))
                )
                .map_err(io)?;
            }
        }
    }
    Ok(())
}
