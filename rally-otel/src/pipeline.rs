//! The export pipeline: the OTLP/gRPC exporter, the batch processor, the sampler and the
//! resource that names the process; [`Tracing`] owns it and flushes it when it ends.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};

use crate::error::{FlushError, InstallError};
use crate::filter::{RootSampler, TracingFilter};

/// The resource attribute that names the cluster member a process is (its member id, or any
/// name the application gives it).
pub const MEMBER_ATTRIBUTE: &str = "rally.member";

/// The instrumentation scope of every span Rally makes.
const SCOPE: &str = "rally";
/// The standard variables that choose the sampler, when the code sets no ratio.
const SAMPLER_ENV: &str = "OTEL_TRACES_SAMPLER";
const SAMPLER_ARG_ENV: &str = "OTEL_TRACES_SAMPLER_ARG";

/// The ratio of new traces recorded, from the standard sampler variables (`sampler`, `arg`):
/// the samplers that are a ratio (`always_on`, `always_off`, `traceidratio` and their
/// `parentbased_` forms; Rally's hops always follow their caller's decision). Unset: 1.0.
fn ratio_from_env(sampler: Option<&str>, arg: Option<&str>) -> Result<f64, InstallError> {
    let ratio = || match arg {
        // The specification's default when the argument is missing.
        None => Ok(1.0),
        Some(arg) => arg.trim().parse::<f64>().map_err(|_| {
            InstallError::Sampler(format!("{SAMPLER_ARG_ENV}={arg:?} is not a number"))
        }),
    };
    match sampler.map(str::trim) {
        None | Some("" | "always_on" | "parentbased_always_on") => Ok(1.0),
        Some("always_off" | "parentbased_always_off") => Ok(0.0),
        Some("traceidratio" | "parentbased_traceidratio") => ratio(),
        Some(other) => Err(InstallError::Sampler(format!(
            "{SAMPLER_ENV}={other:?} is not a ratio sampler (always_on, always_off, traceidratio or their parentbased_ forms)"
        ))),
    }
}

/// Tracing installed: the exporter (its gRPC connection on a thread of its own), its batch
/// processor, and the call filter that turns hops into spans ([`Tracing::filter`]).
///
/// Dropping it flushes what is buffered and stops the exporter (blocking the thread that drops
/// it until the export is done or timed out); [`Tracing::shutdown`] does the same and says
/// whether it worked.
///
/// # Example
///
/// ```no_run
/// use rally::ActorSystem;
/// use rally::otel::Tracing;
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let tracing = Tracing::builder()
///     .endpoint("http://tempo.internal:4317")
///     .service_name("shop-frontend")
///     .sampling_ratio(0.01)
///     .install()
///     .expect("a valid configuration");
/// system.add_call_filter(tracing.filter());
/// // … the application runs …
/// tracing.shutdown().await.expect("the last spans exported");
/// # }
/// ```
#[derive(Debug)]
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
    filter: Arc<TracingFilter>,
    /// Dropped after the provider's last export (fields drop after `Drop::drop`).
    _export: ExportThread,
}

/// The thread the exporter's gRPC connection runs on: a current-thread tokio runtime of its
/// own, so that exporting (encoding, HTTP/2, the socket) takes no turn on the application's
/// runtime and needs none. It ends once dropped.
#[derive(Debug)]
struct ExportThread {
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl ExportThread {
    /// Starts the thread; the exporter is built in its runtime (the gRPC client spawns its
    /// connection on the runtime it is built in).
    fn start() -> Result<(Self, tokio::runtime::Handle), InstallError> {
        let failed = |e: std::io::Error| InstallError::ExportThread(e.to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(failed)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("rally-otel-export".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(failed)?;
        Ok((Self { _stop: stop }, handle))
    }
}

/// Settings of [`Tracing`]: each one left unset is taken from the standard `OTEL_*`
/// environment variables, as every OpenTelemetry SDK reads them.
#[derive(Debug, Clone, Default)]
pub struct TracingBuilder {
    endpoint: Option<String>,
    service_name: Option<String>,
    member: Option<String>,
    sampling_ratio: Option<f64>,
    timeout: Option<Duration>,
    attributes: Vec<(String, String)>,
}

impl Tracing {
    /// A builder with nothing set: everything from the environment (see [`TracingBuilder`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// // OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG) decide.
    /// let tracing = rally::otel::Tracing::builder().install().unwrap();
    /// # }
    /// ```
    pub fn builder() -> TracingBuilder {
        TracingBuilder::default()
    }

    /// The call filter that makes the spans, for [`ActorSystem::add_call_filter`]
    /// (every actor of the system), `Props::call_filter` (one actor) or a grain kind's
    /// `call_filter` (one kind).
    ///
    /// [`ActorSystem::add_call_filter`]: rally_actor::ActorSystem::add_call_filter
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// let system = rally::ActorSystem::new("shop");
    /// let tracing = rally::otel::Tracing::builder().install().unwrap();
    /// system.add_call_filter(tracing.filter());
    /// # }
    /// ```
    pub fn filter(&self) -> Arc<TracingFilter> {
        Arc::clone(&self.filter)
    }

    /// Exports every span ended so far; returns once the backend has answered (or the export
    /// timed out).
    ///
    /// # Errors
    ///
    /// [`FlushError`] when the export failed or tracing was shut down.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not cancel the flush.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// let tracing = rally::otel::Tracing::builder().install().unwrap();
    /// tracing.flush().await.unwrap();
    /// # }
    /// ```
    pub async fn flush(&self) -> Result<(), FlushError> {
        let provider = self.provider.clone().ok_or(FlushError::ShutDown)?;
        // The processor's answer is awaited by blocking, off the runtime's workers.
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .map_err(|e| FlushError::Export(e.to_string()))?
            .map_err(|e| FlushError::Export(e.to_string()))
    }

    /// Exports what is buffered and stops the exporter.
    ///
    /// # Errors
    ///
    /// [`FlushError`] when the last export failed.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not cancel the shutdown.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() {
    /// let tracing = rally::otel::Tracing::builder().install().unwrap();
    /// tracing.shutdown().await.unwrap();
    /// # }
    /// ```
    pub async fn shutdown(mut self) -> Result<(), FlushError> {
        // The processor's answer is awaited by blocking, off the runtime's workers.
        let provider = self.provider.take().ok_or(FlushError::ShutDown)?;
        tokio::task::spawn_blocking(move || provider.shutdown())
            .await
            .map_err(|e| FlushError::Export(e.to_string()))?
            .map_err(|e| FlushError::Export(e.to_string()))
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        // The last export runs on the export thread: this one only waits for it, and on a
        // multi-thread runtime's worker lets the runtime move its other tasks elsewhere first.
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let shut = if multi_thread {
            tokio::task::block_in_place(|| provider.shutdown())
        } else {
            provider.shutdown()
        };
        if let Err(e) = shut {
            tracing::warn!("rally-otel: the last spans were not exported: {e}");
        }
    }
}

impl TracingBuilder {
    /// Where the OTLP/gRPC receiver listens (an OpenTelemetry Collector, Jaeger, Tempo…),
    /// e.g. `http://localhost:4317`. Unset: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else `http://localhost:4317`.
    pub fn endpoint(&mut self, endpoint: impl Into<String>) -> &mut Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The `service.name` of this process's spans. Unset: `OTEL_SERVICE_NAME`, else
    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, else `unknown_service`.
    pub fn service_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.service_name = Some(name.into());
        self
    }

    /// The [`MEMBER_ATTRIBUTE`] (`rally.member`) of this process's spans: which cluster member
    /// made them (typically `cluster.self_member().id`).
    pub fn member(&mut self, member: impl Into<String>) -> &mut Self {
        self.member = Some(member.into());
        self
    }

    /// Another resource attribute of this process's spans (`deployment.environment`, say).
    pub fn resource_attribute(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> &mut Self {
        self.attributes.push((key.into(), value.into()));
        self
    }

    /// The share of new traces recorded, from 0.0 (none) to 1.0 (all); a hop whose caller's
    /// trace was recorded (or not) follows that decision, so a trace is whole or absent.
    /// Unset: `OTEL_TRACES_SAMPLER` (`always_on`, `always_off`, `traceidratio`, or their
    /// `parentbased_` forms) with `OTEL_TRACES_SAMPLER_ARG`, else every trace.
    pub fn sampling_ratio(&mut self, ratio: f64) -> &mut Self {
        self.sampling_ratio = Some(ratio);
        self
    }

    /// How long one export may take. Unset: `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s.
    pub fn export_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = Some(timeout);
        self
    }

    /// Starts the exporter, on a thread of its own (from inside a tokio runtime or not).
    ///
    /// # Errors
    ///
    /// [`InstallError::SamplingRatio`] for a ratio outside 0.0..=1.0,
    /// [`InstallError::Sampler`] for sampler variables that are not a ratio,
    /// [`InstallError::Exporter`] for an endpoint that is not a URI, and
    /// [`InstallError::ExportThread`] when the export thread could not be started.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::otel::{InstallError, Tracing};
    ///
    /// # #[tokio::main] async fn main() {
    /// let refused = Tracing::builder().sampling_ratio(1.5).install();
    /// assert!(matches!(refused, Err(InstallError::SamplingRatio(_))));
    /// # }
    /// ```
    pub fn install(&self) -> Result<Tracing, InstallError> {
        let ratio = match self.sampling_ratio {
            Some(ratio) => ratio,
            None => ratio_from_env(
                std::env::var(SAMPLER_ENV).ok().as_deref(),
                std::env::var(SAMPLER_ARG_ENV).ok().as_deref(),
            )?,
        };
        if !(0.0..=1.0).contains(&ratio) {
            return Err(InstallError::SamplingRatio(ratio));
        }
        let mut exporter = SpanExporter::builder().with_tonic();
        if let Some(endpoint) = &self.endpoint {
            exporter = exporter.with_endpoint(endpoint);
        }
        if let Some(timeout) = self.timeout {
            exporter = exporter.with_timeout(timeout);
        }
        let mut resource = Resource::builder();
        if let Some(name) = &self.service_name {
            resource = resource.with_service_name(name.clone());
        }
        if let Some(member) = &self.member {
            resource = resource.with_attribute(KeyValue::new(MEMBER_ATTRIBUTE, member.clone()));
        }
        for (key, value) in &self.attributes {
            resource = resource.with_attribute(KeyValue::new(key.clone(), value.clone()));
        }
        // The SDK's batch processor queues an ended span without waking anyone: its thread is
        // woken when a batch is full (or by its timer), so a span costs no task wake-up on the
        // actors' runtime. Its exports run on the export thread.
        let (export, runtime) = ExportThread::start()?;
        let exporter = {
            let _inside = runtime.enter();
            exporter
                .build()
                .map_err(|e| InstallError::Exporter(e.to_string()))?
        };
        let processor = BatchSpanProcessor::builder(exporter).build();
        // New traces are drawn by the filter (`RootSampler`); the SDK records what it is given
        // and follows the parent of everything else.
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.build())
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .build();
        let filter = Arc::new(TracingFilter::new(
            provider.tracer(SCOPE),
            RootSampler::new(ratio),
        ));
        Ok(Tracing {
            provider: Some(provider),
            filter,
            _export: export,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_sampler_variables_give_a_ratio_or_a_typed_error() {
        assert_eq!(ratio_from_env(None, None), Ok(1.0));
        assert_eq!(ratio_from_env(Some("always_off"), None), Ok(0.0));
        assert_eq!(
            ratio_from_env(Some("parentbased_always_on"), Some("0.3")),
            Ok(1.0)
        );
        assert_eq!(
            ratio_from_env(Some("parentbased_traceidratio"), Some("0.01")),
            Ok(0.01)
        );
        assert_eq!(ratio_from_env(Some("traceidratio"), None), Ok(1.0));
        assert!(matches!(
            ratio_from_env(Some("traceidratio"), Some("lots")),
            Err(InstallError::Sampler(e)) if e.contains("lots")
        ));
        assert!(matches!(
            ratio_from_env(Some("jaeger_remote"), None),
            Err(InstallError::Sampler(e)) if e.contains("jaeger_remote")
        ));
    }
}
