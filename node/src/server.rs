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
//! blocking thread that store I/O needs.

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
    let Ok(_permit) = Arc::clone(&state.admission).try_acquire_owned() else {
        let mut resp = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the node is at its limit of {} requests in flight (max_inflight_requests): retry",
                state.max_inflight
            ),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return resp;
    };
    let body = match body {
        Ok(body) => body,
        // Past the body limit (as sent, before any decompression): name the limit, as for a
        // body that decompresses past it.
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                otlp::DecodeError::TooLarge {
                    limit: state.max_body_bytes,
                }
                .to_string(),
            );
        }
        Err(e) => return refuse(e.status(), e.body_text()),
    };
    let tenant = match tenant_of(&state, &headers) {
        Ok(t) => t,
        Err(bad) => return refuse(StatusCode::BAD_REQUEST, bad),
    };
    if let Some(Err(denied)) = state
        .auth
        .as_ref()
        .map(|a| a.allow_tenant(&headers, &tenant))
    {
        return denied.into_response();
    }
    let format = match Format::from_content_type(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    ) {
        Ok(f) => f,
        Err(e) => return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, said(&e)),
    };
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let limits = otlp::Limits {
        body_bytes: state.max_body_bytes,
        records: state.max_records,
    };
    let (canonical, request) = match otlp::decode(format, encoding, &body, limits) {
        Ok(ok) => ok,
        Err(
            e @ (otlp::DecodeError::TooLarge { .. }
            | otlp::DecodeError::TooLargeExpanded { .. }
            | otlp::DecodeError::TooManyRecords { .. }),
        ) => {
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, said(&e));
        }
        Err(e @ otlp::DecodeError::UnsupportedEncoding(_)) => {
            return refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, said(&e));
        }
        Err(e) => return refuse(StatusCode::BAD_REQUEST, said(&e)),
    };
    match state.core.ingest(&tenant, canonical, request).await {
        Ok(_) => {
            // OTLP/HTTP success: an empty ExportLogsServiceResponse in the request's format.
            match format {
                Format::Json => {
                    ([(header::CONTENT_TYPE, "application/json")], "{}").into_response()
                }
                Format::Protobuf => (
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
                    .into_response(),
            }
        }
        Err(e @ IngestError::TenantTerminal { .. }) => {
            // Retryable for the client: the node will accept again after a restart into a
            // repaired store.
            let mut resp = refuse(StatusCode::SERVICE_UNAVAILABLE, said(&e));
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("30"));
            resp
        }
        Err(e @ IngestError::BufferFull { .. }) => {
            // Retryable: publishes drain the buffer within a sweep or two once the store answers.
            let mut resp = refuse(StatusCode::SERVICE_UNAVAILABLE, said(&e));
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
            resp
        }
        Err(e @ IngestError::InvalidTenant(_)) => refuse(StatusCode::BAD_REQUEST, said(&e)),
        Err(e @ IngestError::TooManyTenants { .. }) => {
            refuse(StatusCode::TOO_MANY_REQUESTS, said(&e))
        }
        Err(e @ IngestError::ShuttingDown) => refuse(StatusCode::SERVICE_UNAVAILABLE, said(&e)),
        // Not retryable: the same request can never fit (the limits are set so that only a
        // JSON body whose protobuf form is larger than itself gets here).
        Err(e @ IngestError::Wal(ourios_wal::AppendError::FrameTooLarge { .. })) => {
            refuse(StatusCode::PAYLOAD_TOO_LARGE, said(&e))
        }
        Err(e @ IngestError::Wal(_)) => refuse(StatusCode::SERVICE_UNAVAILABLE, said(&e)),
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
