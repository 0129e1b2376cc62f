//! The HTTP surface: `POST /v1/logs` (OTLP/HTTP, protobuf or JSON, optionally gzip),
//! `GET /metrics` (Prometheus text), `GET /healthz` (alive) and `GET /readyz` (ready to take
//! writes, with the reasons when not); the read endpoints (`/loki/api/v1/...`) are `loki.rs`'s.
//! With `--auth-tokens`, ingest and reads need a token of their tenant and `/metrics` one with
//! the metrics grant (`auth.rs`).
//!
//! The handler validates before anything is written: a bad body, an oversize body, an invalid
//! tenant or a terminal tenant is refused and the WAL is untouched. A `200` means the request's
//! frame is durable in the WAL. At most `max_inflight_requests` requests are in the ingest path
//! at once; one more gets `503` with `Retry-After` at once, so ingest can never hold every
//! blocking thread that store I/O needs. Of those, the ones decoded, appended and mined at once
//! hold at most `max_inflight_bytes` of decompressed body between them; the others wait for
//! room holding only their bodies, so the requests in flight are bounded in memory, not only in
//! number (a decoded request is several times its body).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use ourios_wal::TenantId;

use crate::core::{Core, IngestError};
use crate::otlp::{self, Format};

/// Header that carries the tenant.
pub const TENANT_HEADER: &str = "x-scope-orgid";

/// Shared state of the HTTP handlers.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) core: Arc<Core>,
    pub(crate) metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    pub(crate) default_tenant: TenantId,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_records: usize,
    /// Admission into the ingest path: one permit per request being validated, appended and
    /// mined.
    pub(crate) admission: Arc<tokio::sync::Semaphore>,
    /// The number of permits `admission` was created with.
    pub(crate) max_inflight: usize,
    /// Admission by size: one permit per decompressed body byte of the requests being decoded,
    /// appended and mined (`max_inflight_bytes` of them).
    pub(crate) admission_bytes: Arc<tokio::sync::Semaphore>,
    /// The number of permits `admission_bytes` was created with.
    pub(crate) max_inflight_bytes: u32,
    /// The store `/readyz` probes.
    pub(crate) store_probe: Arc<dyn object_store::ObjectStore>,
    /// The read path (the Loki endpoints).
    #[cfg(feature = "read")]
    pub(crate) read: crate::loki::ReadState,
    /// Bearer tokens, when authentication is on.
    pub(crate) auth: Option<Arc<crate::auth::Tokens>>,
}

/// How long `/readyz` waits for the store to answer a probe.
const STORE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) fn router(state: AppState) -> Router {
    // The body limit here is the compressed size; the decoded size is checked in `otlp::decode`.
    let limit = state.max_body_bytes;
    let router = Router::new()
        .route("/v1/logs", post(logs))
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    #[cfg(feature = "read")]
    let router = router
        .route("/loki/api/v1/query_range", get(crate::loki::query_range))
        .route("/loki/api/v1/query", get(crate::loki::query))
        .route("/loki/api/v1/labels", get(crate::loki::labels))
        .route(
            "/loki/api/v1/label/{name}/values",
            get(crate::loki::label_values),
        )
        .route("/loki/api/v1/status/buildinfo", get(crate::loki::buildinfo));
    router
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn logs(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let outcome = match state.admit() {
        Err(refusal) => Err(refusal),
        Ok(_permit) => match body {
            Ok(body) => {
                let content_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok());
                let encoding = headers
                    .get(header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok());
                accept(&state, &headers, content_type, encoding, body).await
            }
            // Past the body limit (as sent, before any decompression): name the limit, as for
            // a body that decompresses past it.
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(Refusal::new(
                Refused::TooLarge,
                otlp::DecodeError::TooLarge {
                    limit: state.max_body_bytes,
                }
                .to_string(),
            )),
            Err(e) => Err(Refusal::new(Refused::Invalid, e.body_text())),
        },
    };
    match outcome {
        // OTLP/HTTP success: an empty ExportLogsServiceResponse in the request's format.
        Ok(Format::Json) => ([(header::CONTENT_TYPE, "application/json")], "{}").into_response(),
        Ok(Format::Protobuf) => (
            [(header::CONTENT_TYPE, otlp::PROTOBUF_CONTENT_TYPE)],
            Vec::<u8>::new(),
        )
            .into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

impl AppState {
    /// Admission into the ingest path: a permit held until the request is answered, or a
    /// refusal at once when `max_inflight_requests` are in it.
    pub(crate) fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Refusal> {
        Arc::clone(&self.admission)
            .try_acquire_owned()
            .map_err(|_| {
                Refusal::new(
                    Refused::Busy { retry_after: 1 },
                    format!(
                        "the node is at its limit of {} requests in flight \
                         (max_inflight_requests): retry",
                        self.max_inflight
                    ),
                )
            })
    }

    /// Room for a request of `bytes` decompressed bytes among those being decoded, appended and
    /// mined: waits (first come, first served) until that many of `max_inflight_bytes` are
    /// free. A request larger than the whole budget takes all of it, so it runs alone but runs.
    pub(crate) async fn admit_bytes(&self, bytes: usize) -> Result<AdmittedBytes<'_>, Refusal> {
        let wanted = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(self.max_inflight_bytes);
        let budget = Arc::clone(&self.admission_bytes);
        let permit = match Arc::clone(&budget).try_acquire_many_owned(wanted) {
            Ok(permit) => permit,
            Err(_) => {
                metrics::counter!(crate::metrics::INGEST_BYTES_WAITS).increment(1);
                // Only a closed semaphore fails, and nothing closes this one; were it closed,
                // the request is refused as by a node going away.
                budget.acquire_many_owned(wanted).await.map_err(|_| {
                    Refusal::new(
                        Refused::Unavailable { retry_after: None },
                        "the node is shutting down".to_owned(),
                    )
                })?
            }
        };
        self.record_inflight_bytes();
        Ok(AdmittedBytes {
            permit: Some(permit),
            state: self,
        })
    }

    /// Bytes taken from `max_inflight_bytes`, read from the semaphore (not counted beside it,
    /// so it cannot drift): the admitted requests' and what is set aside for the first waiter.
    fn inflight_bytes(&self) -> u64 {
        u64::from(self.max_inflight_bytes)
            .saturating_sub(self.admission_bytes.available_permits() as u64)
    }

    /// Sets the gauge of [`Self::inflight_bytes`].
    fn record_inflight_bytes(&self) {
        metrics::gauge!(crate::metrics::INGEST_INFLIGHT_BYTES).set(self.inflight_bytes() as f64);
    }
}

/// A request's share of `max_inflight_bytes`, given back (and the gauge set) when dropped: when
/// the request is answered, refused or abandoned by its client.
pub(crate) struct AdmittedBytes<'a> {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    state: &'a AppState,
}

impl Drop for AdmittedBytes<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.state.record_inflight_bytes();
    }
}

/// The ingest path OTLP/HTTP and OTLP/gRPC share, once admitted: the tenant, the token, the
/// body's format, decoding within the limits, then `Core::ingest`, which answers once the
/// request's frame is durable in the WAL. Returns the body's format (the HTTP answer is in it).
/// A refusal has written nothing.
pub(crate) async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    content_type: Option<&str>,
    encoding: Option<&str>,
    body: Bytes,
) -> Result<Format, Refusal> {
    let tenant = tenant_of(state, headers).map_err(|bad| Refusal::new(Refused::Invalid, bad))?;
    if let Some(auth) = &state.auth {
        auth.allow_tenant(headers, &tenant)
            .map_err(Refusal::denied)?;
    }
    let format = Format::from_content_type(content_type)
        .map_err(|e| Refusal::new(Refused::Unsupported, said(&e)))?;
    let limits = otlp::Limits {
        body_bytes: state.max_body_bytes,
        records: state.max_records,
    };
    let raw = otlp::decompress(encoding, &body, limits.body_bytes).map_err(decode_refusal)?;
    // Held until the request is answered; given back when this returns.
    let bytes = state.admit_bytes(raw.len()).await?;
    let decoded = otlp::decode_decompressed(format, raw, limits);
    // Not held while the request waits for its frame: the canonical bytes are its copy.
    drop(body);
    let (canonical, lines) = decoded.map_err(decode_refusal)?;
    let ingested = state.core.ingest(&tenant, canonical, lines).await;
    drop(bytes);
    ingested.map_err(|e| {
        let kind = match &e {
            // Retryable for the client: the node will accept again after a restart into a
            // repaired store.
            IngestError::TenantTerminal { .. } => Refused::Unavailable {
                retry_after: Some(30),
            },
            // Retryable: publishes drain the buffer within a sweep or two once the store
            // answers.
            IngestError::BufferFull { .. } => Refused::Busy { retry_after: 5 },
            IngestError::InvalidTenant(_) => Refused::Invalid,
            IngestError::TooManyTenants { .. } => Refused::TooManyTenants,
            IngestError::ShuttingDown => Refused::Unavailable { retry_after: None },
            // Not retryable: the same request can never fit (the limits are set so that
            // only a JSON body whose protobuf form is larger than itself gets here).
            IngestError::Wal(ourios_wal::AppendError::FrameTooLarge { .. }) => Refused::TooLarge,
            IngestError::Wal(_) => Refused::Unavailable { retry_after: None },
        };
        Refusal::new(kind, said(&e))
    })?;
    Ok(format)
}

/// A body that did not decode, as the refusal that names why.
fn decode_refusal(e: otlp::DecodeError) -> Refusal {
    let kind = match e {
        otlp::DecodeError::TooLarge { .. }
        | otlp::DecodeError::TooLargeExpanded { .. }
        | otlp::DecodeError::TooManyRecords { .. } => Refused::TooLarge,
        otlp::DecodeError::UnsupportedEncoding(_)
        | otlp::DecodeError::UnsupportedContentType(_) => Refused::Unsupported,
        _ => Refused::Invalid,
    };
    Refusal::new(kind, said(&e))
}

/// Why an ingest request was refused, in terms both protocols map: OTLP/HTTP to a status and
/// `Retry-After` (here), OTLP/gRPC to a code and a `RetryInfo` (`grpc.rs`). Nothing was written.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) kind: Refused,
    /// What the client reads: the limit or rule, named.
    pub(crate) message: String,
}

/// The kinds of refusal, each with one meaning for the client: retry or not, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The request can never be taken as sent (undecodable, empty, an invalid tenant): `400`,
    /// `INVALID_ARGUMENT`.
    Invalid,
    /// A content type or encoding the node does not speak: `415`, `INVALID_ARGUMENT`.
    Unsupported,
    /// Over a size or count limit, so the same request never fits: `413`,
    /// `RESOURCE_EXHAUSTED` without `RetryInfo` (OTLP clients do not retry it).
    TooLarge,
    /// A new tenant past `max_tenants`: `429`, `RESOURCE_EXHAUSTED` without `RetryInfo`.
    TooManyTenants,
    /// A limit that clears by itself (requests in flight, the record buffer's ceiling): `503`
    /// with `Retry-After`, `RESOURCE_EXHAUSTED` with `RetryInfo`.
    Busy {
        /// Seconds to wait before retrying.
        retry_after: u32,
    },
    /// The node cannot take writes for this tenant now (a terminal tenant, a failed WAL,
    /// shutting down): `503`, `UNAVAILABLE` (always retryable), with the delay when known.
    Unavailable {
        /// Seconds to wait before retrying, when the node can say.
        retry_after: Option<u32>,
    },
    /// The token check refused: `401`/`403`, `UNAUTHENTICATED`/`PERMISSION_DENIED`.
    Denied(crate::auth::Denied),
}

impl Refusal {
    pub(crate) fn new(kind: Refused, message: String) -> Self {
        Self { kind, message }
    }

    fn denied(denied: crate::auth::Denied) -> Self {
        Self {
            message: denied.message(),
            kind: Refused::Denied(denied),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, retry_after) = match self.kind {
            Refused::Invalid => (StatusCode::BAD_REQUEST, None),
            Refused::Unsupported => (StatusCode::UNSUPPORTED_MEDIA_TYPE, None),
            Refused::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, None),
            Refused::TooManyTenants => (StatusCode::TOO_MANY_REQUESTS, None),
            Refused::Busy { retry_after } => (StatusCode::SERVICE_UNAVAILABLE, Some(retry_after)),
            Refused::Unavailable { retry_after } => (StatusCode::SERVICE_UNAVAILABLE, retry_after),
            Refused::Denied(denied) => return denied.into_response(),
        };
        let mut resp = refuse(status, self.message);
        if let Some(secs) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        resp
    }
}

/// The request's tenant: `X-Scope-OrgID`, validated once here by the WAL's own rule (the node
/// carries the `TenantId` on), or the default tenant when absent; when invalid, the message a
/// `400` says (naming the rule).
pub(crate) fn tenant_of(state: &AppState, headers: &HeaderMap) -> Result<TenantId, String> {
    match headers.get(TENANT_HEADER) {
        None => Ok(state.default_tenant.clone()),
        Some(v) => TenantId::from_bytes(v.as_bytes()).map_err(|_| {
            format!(
                "invalid {TENANT_HEADER} header {v:?}: a tenant is 1-64 bytes of [A-Za-z0-9_.-]"
            )
        }),
    }
}

fn refuse(status: StatusCode, message: String) -> Response {
    metrics::counter!(crate::metrics::INGEST_REFUSED, "status" => status.as_u16().to_string())
        .increment(1);
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

async fn render_metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(Err(denied)) = state.auth.as_ref().map(|a| a.allow_metrics(&headers)) {
        return denied.into_response();
    }
    match &state.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "metrics exporter not installed in this process\n",
        )
            .into_response(),
    }
}

/// Alive: the process serves HTTP. Says nothing about writes (that is `/readyz`).
async fn healthz() -> Response {
    json(StatusCode::OK, serde_json::json!({ "status": "alive" }))
}

/// Ready to take writes: recovery is done (the server starts after it), the WAL is writable,
/// the store answers a listing within `STORE_PROBE_TIMEOUT`. Terminal tenants are listed (the
/// node is ready for the others). `503` with every reason when not ready.
async fn readyz(State(state): State<AppState>) -> Response {
    let mut reasons = Vec::new();
    if let Some(failure) = state.core.wal().stats().failure {
        reasons.push(format!(
            "wal is read-only after a failed write or sync ({failure}); restart the node"
        ));
    }
    let probe = async {
        use futures::StreamExt;
        let mut listing = state.store_probe.list(None);
        listing.next().await.transpose().map(|_| ())
    };
    match tokio::time::timeout(STORE_PROBE_TIMEOUT, probe).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => reasons.push(format!("store does not answer a listing: {e}")),
        Err(_) => reasons.push(format!(
            "store did not answer a listing within {STORE_PROBE_TIMEOUT:?}"
        )),
    }
    let terminal: Vec<String> = state
        .core
        .records()
        .terminal_tenants()
        .into_iter()
        .map(|t| t.as_str().to_owned())
        .collect();
    let ready = reasons.is_empty();
    json(
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        serde_json::json!({
            "ready": ready,
            "recovery_done": true,
            "reasons": reasons,
            "terminal_tenants": terminal,
            "requests_in_flight": state.max_inflight - state.admission.available_permits(),
            "request_bytes_in_flight": state.inflight_bytes(),
        }),
    )
}

pub(crate) fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// An error as a client reads it: its message and every cause after it (anyhow's walk of the
/// `source` chain), joined by `: `; each error says only its own part.
pub(crate) fn said(e: &(dyn std::error::Error + 'static)) -> String {
    anyhow::Chain::new(e)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
