//! A real OTLP/gRPC trace receiver for the tests: the official `opentelemetry-proto` service
//! on loopback, keeping every span it is sent (flattened, with its resource's attributes).

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;

/// One span as the receiver got it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The resource's attributes (`service.name`, `rally.member`, …).
    pub resource: BTreeMap<String, String>,
    pub name: String,
    /// OTLP's `SpanKind` number: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    /// Empty for a root.
    pub parent_span_id: Vec<u8>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl Received {
    pub fn service(&self) -> &str {
        self.resource.get("service.name").map_or("", String::as_str)
    }

    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

pub const INTERNAL: i32 = 1;
pub const PRODUCER: i32 = 4;
pub const CONSUMER: i32 = 5;

/// The receiver: listening on 127.0.0.1 until dropped.
pub struct Receiver {
    pub address: SocketAddr,
    spans: watch::Receiver<Vec<Received>>,
    server: tokio::task::JoinHandle<()>,
}

struct Service(watch::Sender<Vec<Received>>);

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let resource = attributes(
                resource_spans
                    .resource
                    .map(|r| r.attributes)
                    .unwrap_or_default(),
            );
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(Received {
                        resource: resource.clone(),
                        name: span.name,
                        kind: span.kind,
                        trace_id: span.trace_id,
                        span_id: span.span_id,
                        parent_span_id: span.parent_span_id,
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        attributes: attributes(span.attributes),
                        status: span.status.map_or(0, |s| s.code),
                    });
                }
            }
        }
        self.0.send_modify(|all| all.extend(received));
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn attributes(list: Vec<KeyValue>) -> BTreeMap<String, String> {
    list.into_iter()
        .map(|kv| (kv.key, kv.value.map(text).unwrap_or_default()))
        .collect()
}

fn text(value: AnyValue) -> String {
    match value.value {
        Some(any_value::Value::StringValue(s)) => s,
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

impl Receiver {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("bound");
        let (tx, spans) = watch::channel(Vec::new());
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Service(tx)))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .expect("the receiver serves");
        });
        Self {
            address,
            spans,
            server,
        }
    }

    /// `http://127.0.0.1:<port>`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.borrow().clone()
    }

    /// Waits (at most `within`) until the spans received satisfy `done`; returns them.
    pub async fn wait_for(
        &mut self,
        within: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let waited = tokio::time::timeout(within, async {
            self.spans.wait_for(|s| done(s)).await.map(|s| s.clone())
        })
        .await;
        match waited {
            Ok(Ok(spans)) => spans,
            _ => panic!(
                "the spans wanted did not arrive within {within:?}; received: {:#?}",
                self.spans()
            ),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}
