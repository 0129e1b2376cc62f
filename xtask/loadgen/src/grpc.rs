//! OTLP/gRPC for the bench: a client that sends pre-encoded `ExportLogsServiceRequest` bytes
//! (tonic, one HTTP/2 connection per sender, as a collector's exporter holds one), and the
//! null server's gRPC listener (tonic's server answering every `Export` with an empty
//! response), so a gRPC row has a baseline on the same stack.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Status, transport::Channel};

/// The method the node serves.
pub(crate) const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// Sends and receives messages as bytes: requests are encoded once, before the run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// One sender's connection.
pub(crate) struct Sender {
    client: tonic::client::Grpc<Channel>,
}

impl Sender {
    /// Connects to `addr` (plaintext HTTP/2).
    pub(crate) async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .timeout(Duration::from_secs(120))
            .connect()
            .await?;
        Ok(Sender {
            client: tonic::client::Grpc::new(channel),
        })
    }

    /// Sends one request for `tenant`; `Ok` once the server answered OK.
    pub(crate) async fn export(&mut self, tenant: &str, body: Bytes) -> Result<(), String> {
        self.client.ready().await.map_err(|e| e.to_string())?;
        let mut request = tonic::Request::new(body);
        request.metadata_mut().insert(
            "x-scope-orgid",
            tenant
                .parse()
                .map_err(|_| "tenant is not metadata".to_owned())?,
        );
        self.client
            .unary(
                request,
                axum::http::uri::PathAndQuery::from_static(EXPORT_PATH),
                Raw,
            )
            .await
            .map(|_| ())
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    }
}

/// What one sender saw.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    pub(crate) requests: u64,
    pub(crate) errors: u64,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) first_error: Option<String>,
}

/// Unary `Export` answering an empty message (the OTLP success) without looking at it.
#[derive(Debug, Clone, Copy)]
struct Null;

impl tonic::server::UnaryService<Bytes> for Null {
    type Response = Bytes;
    type Future = std::future::Ready<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        std::hint::black_box(request.get_ref().len());
        std::future::ready(Ok(tonic::Response::new(Bytes::new())))
    }
}

/// The null server's gRPC routes.
pub(crate) fn null_routes() -> tonic::service::Routes {
    let router = axum::Router::new().route(
        EXPORT_PATH,
        axum::routing::post(|request: axum::extract::Request| async move {
            use axum::response::IntoResponse;
            tonic::server::Grpc::new(Raw)
                .apply_max_message_size_config(Some(usize::MAX), None)
                .unary(Null, request)
                .await
                .into_response()
        }),
    );
    tonic::service::Routes::from(router)
}

/// Serves `routes` on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener, routes: tonic::service::Routes) {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let _ = tonic::transport::Server::builder()
        .add_routes(routes)
        .serve_with_incoming(incoming)
        .await;
}
