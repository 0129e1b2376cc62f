//! The Loki HTTP API subset: a LogQL parser for what Grafana's Loki data source and `logcli`
//! send most, and the answers in the response shape Loki documents.
//!
//! The subset (anything else is refused with a message naming what is supported):
//!
//! - a stream selector `{label="v", label!="v", label=~"re", label!~"re"}` on the labels
//!   `service_name` (the resource attribute `service.name`), `severity` (alias `level`: the
//!   level name of the OTLP severity number, or of the severity text for a record without a
//!   number, `trace` .. `fatal` or `unspecified`) and any other resource attribute (by its key,
//!   or with `_` for `.`);
//! - line filters `|= "s"`, `!= "s"`, `|~ "re"`, `!~ "re"` (strings in `"..."` or backquotes);
//! - `count_over_time(<log query> [5m])` and `rate(<log query> [5m])`, optionally inside
//!   `sum(...)` or `sum by (label, ...) (...)`.
//!
//! Streams are the distinct (`service_name`, `severity`) pairs.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use datafusion::functions::expr_fn::{get_field, regexp_like};
use std::ops::Not;

use datafusion::logical_expr::{Expr, col, lit, when};
use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::lines::{LineQuery, Order, Severity, parse_time, unix_nanos};
use crate::{QueryError, TenantScope};

/// How a label is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `=~` (the whole value matches)
    Re,
    /// `!~`
    NotRe,
}

/// One label matcher of a stream selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// The label.
    pub label: String,
    /// The comparison.
    pub op: MatchOp,
    /// The value or pattern.
    pub value: String,
}

/// A line filter of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineFilter {
    /// `|= "s"`
    Contains(String),
    /// `!= "s"`
    NotContains(String),
    /// `|~ "re"`
    Matches(String),
    /// `!~ "re"`
    NotMatches(String),
}

/// A log query: a selector and its line filters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogSelector {
    /// The label matchers.
    pub matchers: Vec<Matcher>,
    /// The line filters, all of which must hold.
    pub filters: Vec<LineFilter>,
}

/// A range function over a log query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeFn {
    /// Lines in the window.
    CountOverTime,
    /// Lines in the window per second.
    Rate,
}

/// A parsed LogQL query of the subset.
#[derive(Debug, Clone, PartialEq)]
pub enum LogQl {
    /// Lines.
    Log(LogSelector),
    /// A range function, optionally summed by labels (`sum` alone: by no label).
    Metric {
        /// The function.
        function: RangeFn,
        /// The log query it counts.
        selector: LogSelector,
        /// The window.
        range: Duration,
        /// `Some(labels)` when wrapped in `sum by (labels)` (`sum` alone: empty).
        sum_by: Option<Vec<String>>,
    },
}

fn unsupported(what: &str) -> QueryError {
    QueryError::Invalid(format!(
        "LogQL: {what}; supported: {{label=\"v\", label!=\"v\", label=~\"re\", label!~\"re\"}} \
         with |= != |~ !~ line filters, count_over_time(... [d]) and rate(... [d]), optionally \
         in sum(...) or sum by (labels) (...)"
    ))
}

struct Parser<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn skip_ws(&mut self) {
        while let Some(c) = self.s[self.at..].chars().next() {
            if c.is_whitespace() {
                self.at += c.len_utf8();
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.s[self.at..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), QueryError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(unsupported(&format!(
                "expected `{token}` at byte {}",
                self.at
            )))
        }
    }

    fn ident(&mut self) -> Result<&'a str, QueryError> {
        self.skip_ws();
        let rest = &self.s[self.at..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(unsupported(&format!("expected a name at byte {}", self.at)));
        }
        self.at += len;
        Ok(&rest[..len])
    }

    fn string(&mut self) -> Result<String, QueryError> {
        self.skip_ws();
        let rest = &self.s[self.at..];
        if let Some(raw) = rest.strip_prefix('`') {
            let end = raw
                .find('`')
                .ok_or_else(|| unsupported("unterminated `string`"))?;
            self.at += end + 2;
            return Ok(raw[..end].to_owned());
        }
        if !rest.starts_with('"') {
            return Err(unsupported(&format!(
                "expected a string at byte {}",
                self.at
            )));
        }
        // A JSON string literal has LogQL's (Go's) escapes for everything a query needs.
        let mut escaped = false;
        for (i, c) in rest.char_indices().skip(1) {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    let literal = &rest[..=i];
                    self.at += i + 1;
                    return serde_json::from_str(literal)
                        .map_err(|e| unsupported(&format!("bad string {literal}: {e}")));
                }
                _ => {}
            }
        }
        Err(unsupported("unterminated \"string\""))
    }

    fn duration(&mut self) -> Result<Duration, QueryError> {
        self.skip_ws();
        let rest = &self.s[self.at..];
        let len = rest.find(']').unwrap_or(rest.len());
        let d = humantime::parse_duration(rest[..len].trim())
            .map_err(|e| unsupported(&format!("bad range {:?}: {e}", &rest[..len])))?;
        self.at += len;
        if d.is_zero() {
            return Err(unsupported("a range of zero"));
        }
        Ok(d)
    }

    fn selector(&mut self) -> Result<LogSelector, QueryError> {
        self.expect("{")?;
        let mut matchers = Vec::new();
        if !self.eat("}") {
            loop {
                let label = self.ident()?.to_owned();
                let op = if self.eat("=~") {
                    MatchOp::Re
                } else if self.eat("!~") {
                    MatchOp::NotRe
                } else if self.eat("!=") {
                    MatchOp::Ne
                } else if self.eat("=") {
                    MatchOp::Eq
                } else {
                    return Err(unsupported(&format!("expected a matcher op after {label}")));
                };
                let value = self.string()?;
                if matches!(op, MatchOp::Re | MatchOp::NotRe) {
                    regex::Regex::new(&value)
                        .map_err(|e| QueryError::Invalid(format!("regex {value:?}: {e}")))?;
                }
                matchers.push(Matcher { label, op, value });
                if self.eat("}") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let mut filters = Vec::new();
        loop {
            let filter = if self.eat("|=") {
                LineFilter::Contains(self.string()?)
            } else if self.eat("!=") {
                LineFilter::NotContains(self.string()?)
            } else if self.eat("|~") {
                LineFilter::Matches(self.string()?)
            } else if self.eat("!~") {
                LineFilter::NotMatches(self.string()?)
            } else {
                self.skip_ws();
                if self.s[self.at..].starts_with('|') {
                    return Err(unsupported(
                        "parsers and label filters (`| json`, `| level=..`)",
                    ));
                }
                break;
            };
            filters.push(filter);
        }
        Ok(LogSelector { matchers, filters })
    }

    fn metric(&mut self) -> Result<LogQl, QueryError> {
        let function = if self.eat("count_over_time") {
            RangeFn::CountOverTime
        } else if self.eat("rate") {
            RangeFn::Rate
        } else {
            return Err(unsupported("expected a selector or a range function"));
        };
        self.expect("(")?;
        let selector = self.selector()?;
        self.expect("[")?;
        let range = self.duration()?;
        self.expect("]")?;
        self.expect(")")?;
        Ok(LogQl::Metric {
            function,
            selector,
            range,
            sum_by: None,
        })
    }
}

impl LogQl {
    /// Parse a query of the subset.
    pub fn parse(query: &str) -> Result<Self, QueryError> {
        let mut p = Parser { s: query, at: 0 };
        let parsed = if p.eat("sum") {
            let mut by = Vec::new();
            if p.eat("by") {
                p.expect("(")?;
                loop {
                    by.push(p.ident()?.to_owned());
                    if p.eat(")") {
                        break;
                    }
                    p.expect(",")?;
                }
            }
            p.expect("(")?;
            let mut inner = p.metric()?;
            p.expect(")")?;
            if let LogQl::Metric { sum_by, .. } = &mut inner {
                *sum_by = Some(by);
            }
            inner
        } else {
            p.skip_ws();
            if p.s[p.at..].starts_with('{') {
                LogQl::Log(p.selector()?)
            } else {
                p.metric()?
            }
        };
        p.skip_ws();
        if p.at != query.len() {
            return Err(unsupported(&format!(
                "unexpected {:?} at byte {}",
                &query[p.at..],
                p.at
            )));
        }
        Ok(parsed)
    }
}

/// The value of a stream label for a row of the `logs` view.
pub fn label_expr(label: &str) -> Expr {
    match label {
        "service_name" => get_field(col("resource_attributes"), "service.name"),
        "severity" | "level" | "detected_level" => {
            let number = Severity::expr();
            let mut case = when(
                number.clone().between(lit(1), lit(4)),
                lit(Severity::name_of(1)),
            );
            for lo in [5, 9, 13, 17, 21] {
                case = case.when(
                    number.clone().between(lit(lo), lit(lo + 3)),
                    lit(Severity::name_of(lo)),
                );
            }
            case.otherwise(lit("unspecified"))
                .unwrap_or_else(|_| lit("unspecified"))
        }
        other => datafusion::functions::expr_fn::coalesce(vec![
            get_field(col("resource_attributes"), other),
            get_field(col("resource_attributes"), other.replace('_', ".")),
        ]),
    }
}

/// The labels every stream has.
pub const STREAM_LABELS: [&str; 2] = ["service_name", "severity"];

fn matcher_expr(m: &Matcher) -> Expr {
    // A missing label is the empty string, as in Loki.
    let value = datafusion::functions::expr_fn::coalesce(vec![label_expr(&m.label), lit("")]);
    let anchored = format!("^(?:{})$", m.value);
    match m.op {
        MatchOp::Eq => value.eq(lit(m.value.as_str())),
        MatchOp::Ne => value.not_eq(lit(m.value.as_str())),
        MatchOp::Re => regexp_like(value, lit(anchored), None),
        MatchOp::NotRe => regexp_like(value, lit(anchored), None).not(),
    }
}

/// The line query of a selector over [start, end).
fn line_query(selector: &LogSelector, start: i64, end: i64) -> LineQuery {
    let mut q = LineQuery {
        since: Some(start),
        until: Some(end),
        ..Default::default()
    };
    for f in &selector.filters {
        match f {
            LineFilter::Contains(s) => q.contains.push(s.clone()),
            LineFilter::NotContains(s) => q.excludes.push(s.clone()),
            LineFilter::Matches(s) => q.matches.push(s.clone()),
            LineFilter::NotMatches(s) => q.not_matches.push(s.clone()),
        }
    }
    q
}

/// The parameters of `query_range` (and `query`), as Loki documents them.
#[derive(Debug, Clone)]
pub struct RangeParams {
    /// The LogQL query.
    pub query: String,
    /// Start (inclusive), ns since the epoch.
    pub start: i64,
    /// End (exclusive for lines, inclusive for metric steps), ns since the epoch.
    pub end: i64,
    /// At most this many lines (log queries).
    pub limit: usize,
    /// `backward` (newest first, the default) or `forward`.
    pub order: Order,
    /// Step between metric points, ns.
    pub step: i64,
}

const NANOS_PER_SEC: i64 = 1_000_000_000;

impl RangeParams {
    /// Read Loki's query parameters: `query`, `start`/`end` (ns since the epoch, RFC 3339, or
    /// a duration before `now`; default the last hour), `since` (a duration), `limit`
    /// (default 100), `direction` (`backward`|`forward`), `step` (a duration or seconds;
    /// default about 250 points).
    pub fn from_query(
        params: &BTreeMap<String, String>,
        now: SystemTime,
        max_limit: usize,
    ) -> Result<Self, QueryError> {
        let query = params
            .get("query")
            .cloned()
            .ok_or_else(|| QueryError::Invalid("missing parameter `query`".into()))?;
        let end = match params.get("end").or_else(|| params.get("time")) {
            Some(t) => parse_time(t, now)?,
            None => unix_nanos(now),
        };
        let start = match (params.get("start"), params.get("since")) {
            (Some(t), _) => parse_time(t, now)?,
            (None, Some(d)) => {
                let d = humantime::parse_duration(d)
                    .map_err(|e| QueryError::Invalid(format!("since {d:?}: {e}")))?;
                end.saturating_sub(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            }
            (None, None) => end.saturating_sub(3600 * NANOS_PER_SEC),
        };
        if start > end {
            return Err(QueryError::Invalid(format!(
                "start {start} is after end {end}"
            )));
        }
        let limit = match params.get("limit") {
            Some(l) => l
                .parse::<usize>()
                .map_err(|_| QueryError::Invalid(format!("limit {l:?}: not a number")))?,
            None => 100,
        };
        if limit > max_limit {
            return Err(QueryError::Invalid(format!(
                "limit {limit} is over the maximum of {max_limit}"
            )));
        }
        let order = match params.get("direction").map(String::as_str) {
            None | Some("backward") | Some("BACKWARD") => Order::NewestFirst,
            Some("forward") | Some("FORWARD") => Order::OldestFirst,
            Some(other) => {
                return Err(QueryError::Invalid(format!(
                    "direction {other:?}: expected backward or forward"
                )));
            }
        };
        let step = match params.get("step") {
            Some(s) => match s.parse::<f64>() {
                Ok(secs) => (secs * NANOS_PER_SEC as f64) as i64,
                Err(_) => humantime::parse_duration(s)
                    .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
                    .map_err(|e| QueryError::Invalid(format!("step {s:?}: {e}")))?,
            },
            None => ((end - start) / 250).max(NANOS_PER_SEC),
        };
        if step <= 0 {
            return Err(QueryError::Invalid("step must be positive".into()));
        }
        if (end - start) / step > 11_000 {
            return Err(QueryError::Invalid(format!(
                "{} points of step {step} ns; at most 11000 are answered (raise step)",
                (end - start) / step
            )));
        }
        Ok(Self {
            query,
            start,
            end,
            limit,
            order,
            step,
        })
    }
}

/// Answer `query_range` (or `query` with `instant`): the documented `{"status", "data":
/// {"resultType", "result", "stats"}}` object.
pub async fn query_range(
    scope: &TenantScope,
    params: &RangeParams,
    instant: bool,
) -> Result<Value, QueryError> {
    let (result_type, result) = match LogQl::parse(&params.query)? {
        LogQl::Log(selector) => ("streams", streams(scope, &selector, params).await?),
        LogQl::Metric {
            function,
            selector,
            range,
            sum_by,
        } => {
            let range = i64::try_from(range.as_nanos()).unwrap_or(i64::MAX);
            let (start, step) = if instant {
                (params.end, params.step)
            } else {
                (params.start, params.step)
            };
            let series = metric(
                scope,
                &selector,
                function,
                range,
                sum_by.as_deref(),
                start,
                params.end,
                step,
            )
            .await?;
            if instant {
                let vector: Vec<Value> = series
                    .into_iter()
                    .filter_map(|(labels, points)| {
                        points.last().map(|(t, v)| {
                            json!({"metric": labels, "value": [seconds(*t), v.to_string()]})
                        })
                    })
                    .collect();
                ("vector", Value::Array(vector))
            } else {
                let matrix: Vec<Value> = series
                    .into_iter()
                    .map(|(labels, points)| {
                        let values: Vec<Value> = points
                            .iter()
                            .map(|(t, v)| json!([seconds(*t), v.to_string()]))
                            .collect();
                        json!({"metric": labels, "values": values})
                    })
                    .collect();
                ("matrix", Value::Array(matrix))
            }
        }
    };
    Ok(json!({
        "status": "success",
        "data": {"resultType": result_type, "result": result, "stats": {}},
    }))
}

fn seconds(nanos: i64) -> Value {
    json!(nanos as f64 / NANOS_PER_SEC as f64)
}

type Labels = BTreeMap<String, String>;

/// The rows of a selector over the range: (time, labels, line) where `with_line`.
async fn rows(
    scope: &TenantScope,
    selector: &LogSelector,
    query: LineQuery,
    label_names: &[String],
    with_line: bool,
) -> Result<Vec<(i64, Labels, Option<String>)>, QueryError> {
    let mut record_predicates = query.record_predicates();
    record_predicates.extend(selector.matchers.iter().map(matcher_expr));
    let mut select = vec![col("time")];
    for (i, name) in label_names.iter().enumerate() {
        select.push(label_expr(name).alias(format!("label_{i}")));
    }
    if with_line {
        select.push(col("line"));
    }
    let (order, limit) = if with_line {
        (Some(query.order), query.limit)
    } else {
        (None, None)
    };
    let df = crate::lines::plan(
        scope,
        record_predicates,
        query.line_predicates()?,
        order,
        limit,
        select,
    )
    .await?;
    let mut out = Vec::new();
    let mut stream = df.execute_stream().await?;
    while let Some(batch) = stream.try_next().await? {
        let time = batch
            .column(0)
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| QueryError::Invalid("time column of an unexpected type".into()))?
            .clone();
        let mut labels: Vec<arrow_array::ArrayRef> = Vec::new();
        for i in 0..label_names.len() {
            labels.push(datafusion::arrow::compute::cast(
                batch.column(1 + i),
                &arrow_schema::DataType::Utf8,
            )?);
        }
        let line = if with_line {
            Some(datafusion::arrow::compute::cast(
                batch.column(1 + label_names.len()),
                &arrow_schema::DataType::Utf8,
            )?)
        } else {
            None
        };
        for row in 0..batch.num_rows() {
            let mut set = Labels::new();
            for (name, values) in label_names.iter().zip(&labels) {
                let values = values.as_string::<i32>();
                if values.is_valid(row) && !values.value(row).is_empty() {
                    set.insert(name.clone(), values.value(row).to_owned());
                }
            }
            let text = line
                .as_ref()
                .map(|l| l.as_string::<i32>().value(row).to_owned());
            out.push((time.value(row), set, text));
        }
    }
    Ok(out)
}

use arrow_array::Array as _;

async fn streams(
    scope: &TenantScope,
    selector: &LogSelector,
    params: &RangeParams,
) -> Result<Value, QueryError> {
    let mut query = line_query(selector, params.start, params.end);
    query.limit = Some(params.limit);
    query.order = params.order;
    let names: Vec<String> = STREAM_LABELS.iter().map(|s| (*s).to_owned()).collect();
    let rows = rows(scope, selector, query, &names, true).await?;
    // Streams in order of their first line; lines in the query's order within each.
    let mut order: Vec<Labels> = Vec::new();
    let mut by_stream: BTreeMap<Labels, Vec<Value>> = BTreeMap::new();
    for (time, labels, line) in rows {
        let values = by_stream.entry(labels.clone()).or_insert_with(|| {
            order.push(labels);
            Vec::new()
        });
        values.push(json!([time.to_string(), line.unwrap_or_default()]));
    }
    let result: Vec<Value> = order
        .into_iter()
        .map(|labels| {
            let values = by_stream.remove(&labels).unwrap_or_default();
            json!({"stream": labels, "values": values})
        })
        .collect();
    Ok(Value::Array(result))
}

/// Series of (step time, value) by label set.
#[allow(clippy::too_many_arguments)]
async fn metric(
    scope: &TenantScope,
    selector: &LogSelector,
    function: RangeFn,
    range: i64,
    sum_by: Option<&[String]>,
    start: i64,
    end: i64,
    step: i64,
) -> Result<Vec<(Labels, Vec<(i64, f64)>)>, QueryError> {
    let names: Vec<String> = match sum_by {
        Some(by) => by.to_vec(),
        None => STREAM_LABELS.iter().map(|s| (*s).to_owned()).collect(),
    };
    // Each point at t counts the lines in (t - range, t].
    let query = line_query(
        selector,
        start.saturating_sub(range) + 1,
        end.saturating_add(1),
    );
    let rows = rows(scope, selector, query, &names, false).await?;
    let mut times: BTreeMap<Labels, Vec<i64>> = BTreeMap::new();
    for (time, labels, _) in rows {
        times.entry(labels).or_default().push(time);
    }
    let per_second = match function {
        RangeFn::CountOverTime => 1.0,
        RangeFn::Rate => NANOS_PER_SEC as f64 / range as f64,
    };
    let mut out = Vec::new();
    for (labels, mut ts) in times {
        ts.sort_unstable();
        let mut points = Vec::new();
        let mut t = start;
        while t <= end {
            let lo = ts.partition_point(|&x| x <= t - range);
            let hi = ts.partition_point(|&x| x <= t);
            if hi > lo {
                points.push((t, (hi - lo) as f64 * per_second));
            }
            t += step;
        }
        if !points.is_empty() {
            out.push((labels, points));
        }
    }
    Ok(out)
}

/// Answer `labels`: the stream label names (`{"status", "data": [...]}`).
pub fn labels() -> Value {
    json!({"status": "success", "data": STREAM_LABELS})
}

/// Answer `label/<name>/values`: the values `name` takes over [start, end).
pub async fn label_values(
    scope: &TenantScope,
    name: &str,
    start: i64,
    end: i64,
) -> Result<Value, QueryError> {
    let query = line_query(&LogSelector::default(), start, end);
    let df = crate::lines::plan(
        scope,
        query.record_predicates(),
        Vec::new(),
        None,
        None,
        vec![label_expr(name).alias("value")],
    )
    .await?
    .distinct()?;
    let mut values = std::collections::BTreeSet::new();
    let mut stream = df.execute_stream().await?;
    while let Some(batch) = stream.try_next().await? {
        let column =
            datafusion::arrow::compute::cast(batch.column(0), &arrow_schema::DataType::Utf8)?;
        let column = column.as_string::<i32>();
        for row in 0..column.len() {
            if column.is_valid(row) && !column.value(row).is_empty() {
                values.insert(column.value(row).to_owned());
            }
        }
    }
    Ok(json!({"status": "success", "data": values}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the subset parses as Loki reads it: matchers of all four ops, strings in both
    /// quotings with escapes, line filters in order, range functions with sum and sum by.
    #[test]
    fn the_subset_parses() {
        let q = LogQl::parse(
            r#"{service_name="api", severity!="debug", host=~"web-\\d+", env!~`dev|test`} |= "GET \"x\"" != "health" |~ `5\d\d` !~ "slow""#,
        )
        .unwrap();
        let LogQl::Log(s) = q else {
            panic!("a log query")
        };
        assert_eq!(
            s.matchers,
            vec![
                Matcher {
                    label: "service_name".into(),
                    op: MatchOp::Eq,
                    value: "api".into()
                },
                Matcher {
                    label: "severity".into(),
                    op: MatchOp::Ne,
                    value: "debug".into()
                },
                Matcher {
                    label: "host".into(),
                    op: MatchOp::Re,
                    value: r"web-\d+".into()
                },
                Matcher {
                    label: "env".into(),
                    op: MatchOp::NotRe,
                    value: "dev|test".into()
                },
            ]
        );
        assert_eq!(
            s.filters,
            vec![
                LineFilter::Contains("GET \"x\"".into()),
                LineFilter::NotContains("health".into()),
                LineFilter::Matches(r"5\d\d".into()),
                LineFilter::NotMatches("slow".into()),
            ]
        );
        let q = LogQl::parse(r#"sum by (severity, service_name) (rate({} |= "x" [5m]))"#).unwrap();
        assert_eq!(
            q,
            LogQl::Metric {
                function: RangeFn::Rate,
                selector: LogSelector {
                    matchers: vec![],
                    filters: vec![LineFilter::Contains("x".into())]
                },
                range: Duration::from_secs(300),
                sum_by: Some(vec!["severity".into(), "service_name".into()]),
            }
        );
        let q = LogQl::parse(r#"count_over_time({a="b"}[1h])"#).unwrap();
        assert!(matches!(
            q,
            LogQl::Metric {
                function: RangeFn::CountOverTime,
                sum_by: None,
                ..
            }
        ));
        let q = LogQl::parse("sum(count_over_time({}[30s]))").unwrap();
        assert!(matches!(q, LogQl::Metric { sum_by: Some(ref by), .. } if by.is_empty()));
    }

    /// Proves what is outside the subset is refused with a message naming the subset.
    #[test]
    fn outside_the_subset_is_refused_by_name() {
        for q in [
            r#"{a="b"} | json"#,
            r#"{a="b"} | level="error""#,
            r#"{a="b""#,
            r#"{a="b"} |= "unterminated"#,
            r#"avg_over_time({a="b"}[5m])"#,
            r#"count_over_time({a="b"}[0s])"#,
            r#"{a=~"("}"#,
            r#"{a="b"} extra"#,
            "",
        ] {
            let e = LogQl::parse(q).expect_err(q);
            assert!(
                e.to_string().contains("LogQL") || e.to_string().contains("regex"),
                "{q}: {e}"
            );
        }
    }

    /// Proves the Loki query parameters: defaults (the last hour, 100 lines, backward), times
    /// as ns, RFC 3339 or durations, and the refusals (limit over the maximum, start after end,
    /// too many points).
    #[test]
    fn range_parameters() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let p = |pairs: &[(&str, &str)]| {
            let map: BTreeMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            RangeParams::from_query(&map, now, 5_000)
        };
        let d = p(&[("query", "{}")]).unwrap();
        assert_eq!(d.end, 1_800_000_000 * NANOS_PER_SEC);
        assert_eq!(d.start, d.end - 3600 * NANOS_PER_SEC);
        assert_eq!((d.limit, d.order), (100, Order::NewestFirst));
        let r = p(&[
            ("query", "{}"),
            ("start", "2027-01-15T06:00:00Z"),
            ("end", "1800000000000000000"),
            ("direction", "forward"),
            ("step", "60"),
        ])
        .unwrap();
        assert_eq!(
            r.start,
            1_800_000_000 * NANOS_PER_SEC - 2 * 3600 * NANOS_PER_SEC
        );
        assert_eq!((r.order, r.step), (Order::OldestFirst, 60 * NANOS_PER_SEC));
        assert_eq!(
            p(&[("query", "{}"), ("since", "5m")]).unwrap().start,
            d.end - 300 * NANOS_PER_SEC
        );
        assert!(p(&[]).is_err());
        assert!(p(&[("query", "{}"), ("limit", "5001")]).is_err());
        assert!(p(&[("query", "{}"), ("start", "10"), ("end", "5")]).is_err());
        assert!(p(&[("query", "{}"), ("step", "0.0001"), ("since", "1h")]).is_err());
        assert!(p(&[("query", "{}"), ("direction", "sideways")]).is_err());
    }
}
