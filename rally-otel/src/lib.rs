//! OpenTelemetry tracing for Rally: every hop of a message becomes spans, linked across actors,
//! nodes and virtual actors into one trace, exported over OTLP/gRPC to any backend that takes
//! it (an OpenTelemetry Collector, Jaeger, Grafana Tempo…).
//!
//! This crate exists apart from the runtime so that an application that does not trace
//! compiles none of it: it is the facade's feature `otel` (`rally::otel`). It is built on the
//! runtime's call filters and request context, not beside them: [`TracingFilter`] is an
//! ordinary [`CallFilter`](rally_actor::CallFilter), and the W3C `traceparent` it writes is
//! the one the request context carries from hop to hop, on the wire too.
//!
//! # The spans of one hop
//!
//! | span | kind | from | to | parent |
//! |---|---|---|---|---|
//! | `send <type>` | producer | the send | the send | the span of the code that sent (the handler's `handle`, or the caller's) |
//! | `wait <type>` | internal | the message's arrival | its handler's start | `send` |
//! | `handle <type>` | consumer | the handler's start | its end | `send` |
//!
//! Each span's name ends with the message's type. `send` and `handle` carry where it went
//! (`rally.target`) or who handled it (`rally.actor.path`), or for a virtual actor its
//! `rally.grain.kind` and `rally.grain.identity`; `wait` only its name, its sibling `handle`
//! having the rest. Each process's spans carry `service.name` and `rally.member`.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use rally::prelude::*;
//! use rally::{ActorSystem, RequestContext};
//! use rally::otel::Tracing;
//!
//! # struct Greeter; impl Actor for Greeter {}
//! # struct Greet; impl Message for Greet { type Reply = (); }
//! # impl Handler<Greet> for Greeter {
//! #     async fn handle(&mut self, _: Greet, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
//! # }
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::new("shop");
//! // Endpoint, service name and sampling from the code; each left out is read from the
//! // standard OTEL_* environment variables.
//! let tracing = Tracing::builder()
//!     .endpoint("http://localhost:4317")
//!     .service_name("shop")
//!     .sampling_ratio(0.1)
//!     .install()
//!     .unwrap();
//! system.add_call_filter(tracing.filter());
//! let greeter = system.spawn(Greeter).unwrap();
//! // A request from outside any actor starts its trace where it enters.
//! system
//!     .in_context(RequestContext::new(), greeter.ask(Greet, Duration::from_secs(1)))
//!     .await
//!     .unwrap();
//! tracing.shutdown().await.unwrap();
//! # }
//! ```
//!
//! # Modules
//!
//! - `pipeline`: [`Tracing`] and its builder: the exporter, the batch processor, the sampler
//!   and the resource.
//! - `filter`: [`TracingFilter`], the call filter that makes the spans, and the attribute names.
//! - `error`: [`InstallError`], [`FlushError`].

mod error;
mod filter;
mod pipeline;

pub use error::{FlushError, InstallError};
pub use filter::{ACTOR_PATH, GRAIN_IDENTITY, GRAIN_KIND, OUTCOME, TARGET, TracingFilter};
pub use pipeline::{MEMBER_ATTRIBUTE, Tracing, TracingBuilder};
