//! The read side of the HTTP surface: the Loki API subset (`/loki/api/v1/query_range`,
//! `/query`, `/labels`, `/label/{name}/values`) over the node's own store, tenant from
//! `X-Scope-OrgID` as for ingest. The LogQL subset and the answers' shapes are
//! `ourios_query::loki`'s; this module reads the HTTP request and bounds the work.
//!
//! At most [`MAX_CONCURRENT_QUERIES`] queries run at once; one more gets `503` with
//! `Retry-After`, so reads cannot starve ingest of the cores.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ourios_query::QueryError;
use ourios_query::loki::{self, RangeParams};

use crate::server::{AppState, json, said};

/// Queries that may run at once on one node.
pub(crate) const MAX_CONCURRENT_QUERIES: usize = 4;
/// The largest `limit` a log query may ask for.
pub(crate) const MAX_LINES_PER_QUERY: usize = 50_000;

/// The read side's own state, part of the node's `AppState`.
#[derive(Debug, Clone)]
pub(crate) struct ReadState {
    pub(crate) reader: Arc<ourios_query::Reader>,
    pub(crate) admission: Arc<tokio::sync::Semaphore>,
}

impl ReadState {
    pub(crate) fn new(store: Arc<dyn object_store::ObjectStore>) -> Self {
        Self {
            reader: Arc::new(ourios_query::Reader::new(store, "")),
            admission: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_QUERIES)),
        }
    }
}

fn params(raw: Option<String>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn failed(e: &QueryError) -> Response {
    let status = match e {
        QueryError::Store(_) | QueryError::Audit(_) => StatusCode::SERVICE_UNAVAILABLE,
        QueryError::Invalid(_) | QueryError::Engine(_) | QueryError::Arrow(_) => {
            StatusCode::BAD_REQUEST
        }
    };
    metrics::counter!(crate::metrics::QUERY_REFUSED, "status" => status.as_u16().to_string())
        .increment(1);
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{}\n", said(e)),
    )
        .into_response()
}

/// The tenant a read is scoped to, and a permit to run it; or the refusal.
fn admit(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(ourios_wal::TenantId, tokio::sync::OwnedSemaphorePermit), Box<Response>> {
    let tenant = scoped(state, headers)?;
    let Ok(permit) = Arc::clone(&state.read.admission).try_acquire_owned() else {
        let mut resp = (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the node is running its limit of {MAX_CONCURRENT_QUERIES} queries: retry\n"),
        )
            .into_response();
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return Err(Box::new(resp));
    };
    Ok((tenant, permit))
}

/// The request's tenant, when its header is valid and its token (if tokens are on) may read it.
fn scoped(state: &AppState, headers: &HeaderMap) -> Result<ourios_wal::TenantId, Box<Response>> {
    let tenant = crate::server::tenant_of(state, headers).map_err(|bad| {
        metrics::counter!(crate::metrics::QUERY_REFUSED, "status" => "400").increment(1);
        Box::new((StatusCode::BAD_REQUEST, format!("{bad}\n")).into_response())
    })?;
    if let Some(auth) = &state.auth {
        auth.allow_tenant(headers, &tenant)
            .map_err(|denied| Box::new(denied.into_response()))?;
    }
    Ok(tenant)
}

async fn range(
    state: AppState,
    headers: HeaderMap,
    raw: Option<String>,
    instant: bool,
) -> Response {
    let (tenant, _permit) = match admit(&state, &headers) {
        Ok(ok) => ok,
        Err(resp) => return *resp,
    };
    let params = match RangeParams::from_query(&params(raw), SystemTime::now(), MAX_LINES_PER_QUERY)
    {
        Ok(p) => p,
        Err(e) => return failed(&e),
    };
    let answer = async {
        let scope = state.read.reader.scope(&tenant).await?;
        loki::query_range(&scope, &params, instant).await
    };
    match answer.await {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => failed(&e),
    }
}

/// `GET /loki/api/v1/query_range`.
pub(crate) async fn query_range(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    range(state, headers, raw, false).await
}

/// `GET /loki/api/v1/query`: a log query over the last hour up to `time`, or a metric query's
/// value at `time`.
pub(crate) async fn query(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    range(state, headers, raw, true).await
}

/// `GET /loki/api/v1/labels`.
pub(crate) async fn labels(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match scoped(&state, &headers) {
        Ok(_) => json(StatusCode::OK, loki::labels()),
        Err(resp) => *resp,
    }
}

/// `GET /loki/api/v1/label/{name}/values`.
pub(crate) async fn label_values(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let (tenant, _permit) = match admit(&state, &headers) {
        Ok(ok) => ok,
        Err(resp) => return *resp,
    };
    let mut p = params(raw);
    p.entry("query".into()).or_insert_with(|| "{}".into());
    let params = match RangeParams::from_query(&p, SystemTime::now(), MAX_LINES_PER_QUERY) {
        Ok(p) => p,
        Err(e) => return failed(&e),
    };
    let answer = async {
        let scope = state.read.reader.scope(&tenant).await?;
        loki::label_values(&scope, &name, params.start, params.end).await
    };
    match answer.await {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => failed(&e),
    }
}

/// `GET /loki/api/v1/status/buildinfo`: what Grafana asks a Loki data source first.
pub(crate) async fn buildinfo() -> Response {
    json(
        StatusCode::OK,
        serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "revision": "", "branch": ""}),
    )
}
