//! OTLP/gRPC: `opentelemetry.proto.collector.logs.v1.LogsService/Export` on a listener of its
//! own (`--grpc-listen`, default port 4317), served by tonic.
//!
//! A request takes the OTLP/HTTP path (`server::accept`): the same admission, tenant
//! (`x-scope-orgid` metadata), token (`authorization` metadata), limits, and WAL before the
//! answer. The codec hands the handler the message's bytes undecoded, so the record count is
//! checked on the wire before a record is allocated, as for HTTP; tonic has undone gzip by then,
//! reading at most `max_body_bytes` (gRPC's maximum decoding message size; tonic's own refusal
//! past it is answered as ours).
//!
//! Refusals map to the codes the OTLP specification gives them: `RESOURCE_EXHAUSTED` with a
//! `RetryInfo` for a limit that clears by itself (the client retries after the delay), without
//! one for a request that can never fit (the client drops it); `UNAVAILABLE`, which a client
//! always retries, for a tenant or a node that cannot take writes now; `INVALID_ARGUMENT` for a
//! request that is wrong; `UNAUTHENTICATED` and `PERMISSION_DENIED` for the token check.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Buf;
use futures::future::BoxFuture;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;
use tonic::codec::{
    Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings, EncodeBuf, Encoder,
};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::Denied;
use crate::server::{AppState, Refusal, Refused};

/// The one method served.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// The routes of the gRPC listener: `Export`, and `UNIMPLEMENTED` for any other method.
pub(crate) fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route(EXPORT_PATH, axum::routing::post(export))
        .fallback(unimplemented)
        .with_state(state)
}

async fn export(State(state): State<AppState>, request: axum::extract::Request) -> Response {
    let mut accept = EnabledCompressionEncodings::default();
    accept.enable(CompressionEncoding::Gzip);
    let limit = state.max_body_bytes;
    let response = tonic::server::Grpc::new(RawCodec)
        .apply_compression_config(accept, EnabledCompressionEncodings::default())
        .apply_max_message_size_config(Some(limit), None)
        .unary(Export(state), request)
        .await;
    // tonic refuses a message over the limit (as sent, or once gunzipped) itself, before the
    // handler, with OUT_OF_RANGE, a code OTLP clients retry: answer as for every request that
    // can never fit, naming the limit. No handler answer is OUT_OF_RANGE.
    if Status::from_header_map(response.headers()).is_some_and(|s| s.code() == Code::OutOfRange) {
        let too_large = crate::otlp::DecodeError::TooLarge { limit };
        return status(Refusal::new(Refused::TooLarge, too_large.to_string()))
            .into_http::<axum::body::Body>()
            .into_response();
    }
    response.into_response()
}

async fn unimplemented(request: axum::extract::Request) -> Response {
    let status = Status::unimplemented(format!(
        "this endpoint serves {EXPORT_PATH} only, not {}",
        request.uri().path()
    ));
    status.into_http::<axum::body::Body>().into_response()
}

/// `Export` on the message's bytes.
struct Export(AppState);

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = ExportLogsServiceResponse;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::Response>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let (metadata, _, body) = request.into_parts();
            let headers = metadata.into_headers();
            let _permit = state.admit().map_err(status)?;
            crate::server::accept(
                &state,
                &headers,
                Some(crate::otlp::PROTOBUF_CONTENT_TYPE),
                None,
                body,
            )
            .await
            .map_err(status)?;
            // OTLP: a full success is an empty response (no partial_success).
            Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
        })
    }
}

/// A refusal as a gRPC status, counted as HTTP counts its refusals (`status` is the code's
/// name here).
fn status(refusal: Refusal) -> Status {
    let (code, retry_after) = match &refusal.kind {
        Refused::Invalid | Refused::Unsupported => (Code::InvalidArgument, None),
        Refused::TooLarge | Refused::TooManyTenants => (Code::ResourceExhausted, None),
        Refused::Busy { retry_after } => (Code::ResourceExhausted, Some(*retry_after)),
        Refused::Unavailable { retry_after } => (Code::Unavailable, *retry_after),
        Refused::Denied(denied) => {
            let code = match denied {
                Denied::NoToken => Code::Unauthenticated,
                Denied::Tenant(_) | Denied::Metrics => Code::PermissionDenied,
            };
            metrics::counter!(crate::metrics::AUTH_REFUSED, "status" => code_name(code))
                .increment(1);
            return Status::new(code, refusal.message);
        }
    };
    metrics::counter!(crate::metrics::INGEST_REFUSED, "status" => code_name(code)).increment(1);
    match retry_after {
        Some(secs) => Status::with_error_details(
            code,
            refusal.message,
            ErrorDetails::with_retry_info(Some(Duration::from_secs(u64::from(secs)))),
        ),
        None => Status::new(code, refusal.message),
    }
}

/// The code's name as the gRPC specification writes it, lower case (a metric label).
fn code_name(code: Code) -> &'static str {
    match code {
        Code::InvalidArgument => "invalid_argument",
        Code::ResourceExhausted => "resource_exhausted",
        Code::Unavailable => "unavailable",
        Code::Unauthenticated => "unauthenticated",
        Code::PermissionDenied => "permission_denied",
        _ => "other",
    }
}

/// Decodes nothing: the message's bytes go to `otlp::decode`, which counts records on the wire
/// before it allocates them. Encodes the (empty) response with prost.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = ExportLogsServiceResponse;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        Self
    }

    fn decoder(&mut self) -> Self::Decoder {
        Self
    }
}

impl Encoder for RawCodec {
    type Item = ExportLogsServiceResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
