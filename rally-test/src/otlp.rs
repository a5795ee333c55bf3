//! A real OTLP/gRPC trace receiver for tests and benchmarks (feature `otlp`): the official
//! `opentelemetry-proto` trace service on loopback, keeping every span it is sent (flattened,
//! with its resource's attributes), or only counting them.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use rally_test::otlp::Receiver;
//!
//! # #[tokio::main] async fn main() {
//! let mut receiver = Receiver::start().await;
//! // … point the exporter at `receiver.endpoint()`, make and flush some spans …
//! let spans = receiver.wait_for(Duration::from_secs(5), |spans| !spans.is_empty()).await;
//! println!("{} from {}", spans[0].name, spans[0].service());
//! # }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The span's name.
    pub name: String,
    /// OTLP's `SpanKind` number: [`INTERNAL`], [`SERVER`], [`CLIENT`], [`PRODUCER`],
    /// [`CONSUMER`].
    pub kind: i32,
    /// 16 bytes.
    pub trace_id: Vec<u8>,
    /// 8 bytes.
    pub span_id: Vec<u8>,
    /// Empty for a root.
    pub parent_span_id: Vec<u8>,
    /// Nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// Nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// The span's attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

impl Received {
    /// The resource's `service.name` (empty when it has none).
    pub fn service(&self) -> &str {
        self.resource.get("service.name").map_or("", String::as_str)
    }

    /// The span's attribute `key`.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// OTLP's span kind: internal.
pub const INTERNAL: i32 = 1;
/// OTLP's span kind: server.
pub const SERVER: i32 = 2;
/// OTLP's span kind: client.
pub const CLIENT: i32 = 3;
/// OTLP's span kind: producer.
pub const PRODUCER: i32 = 4;
/// OTLP's span kind: consumer.
pub const CONSUMER: i32 = 5;

/// The receiver: listening until dropped.
#[derive(Debug)]
pub struct Receiver {
    /// Where it listens.
    pub address: SocketAddr,
    spans: watch::Receiver<Vec<Received>>,
    count: Arc<AtomicU64>,
    server: tokio::task::JoinHandle<()>,
}

/// What the service does with what it is sent: keeps it, or only counts it.
struct Service {
    keep: Option<watch::Sender<Vec<Received>>>,
    count: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let Some(keep) = &self.keep else {
            let count: usize = request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum();
            self.count.fetch_add(count as u64, Ordering::Relaxed);
            return Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }));
        };
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
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
        self.count
            .fetch_add(received.len() as u64, Ordering::Relaxed);
        keep.send_modify(|all| all.extend(received));
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
    /// Listens on a free loopback port and keeps every span.
    ///
    /// # Panics
    ///
    /// When no loopback port is free, or outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, it leaves nothing listening.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port is free");
        Self::serve(listener, true)
    }

    /// Listens on `address` and only counts the spans ([`Receiver::count`]): a sink for a
    /// benchmark, whose memory does not grow with the spans.
    ///
    /// # Errors
    ///
    /// When `address` cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, it leaves nothing listening.
    pub async fn counting(address: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        Ok(Self::serve(listener, false))
    }

    fn serve(listener: tokio::net::TcpListener, keep: bool) -> Self {
        let address = listener
            .local_addr()
            .expect("a bound listener has an address");
        let (tx, spans) = watch::channel(Vec::new());
        let count = Arc::new(AtomicU64::new(0));
        let service = Service {
            keep: keep.then_some(tx),
            count: Arc::clone(&count),
        };
        let server = tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(service))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
            {
                eprintln!("the OTLP receiver stopped: {e}");
            }
        });
        Self {
            address,
            spans,
            count,
            server,
        }
    }

    /// How many spans it was sent so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// `http://127.0.0.1:<port>`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far (none on a counting receiver).
    pub fn spans(&self) -> Vec<Received> {
        self.spans.borrow().clone()
    }

    /// Waits (at most `within`) until the spans received satisfy `done`; returns them.
    ///
    /// # Panics
    ///
    /// When they do not within `within`, with the spans received; on a counting receiver.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is consumed.
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
