//! The errors of installing, flushing and shutting down tracing.

/// Why [`TracingBuilder::install`](crate::TracingBuilder::install) refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The sampling ratio is not in 0.0..=1.0.
    #[error("sampling ratio {0} is not between 0.0 and 1.0")]
    SamplingRatio(f64),
    /// `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` name no ratio sampler, or no number.
    #[error("the sampler variables are not understood: {0}")]
    Sampler(String),
    /// The OTLP exporter refused its settings (an endpoint that is not a URI, say).
    #[error("the OTLP exporter refused its settings: {0}")]
    Exporter(String),
    /// The exporter's thread could not be started (the process is out of threads, say).
    #[error("the export thread could not be started: {0}")]
    ExportThread(String),
}

/// Why a flush or a shutdown did not export everything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlushError {
    /// The export failed or timed out (the backend unreachable, say); those spans are lost.
    #[error("exporting spans failed: {0}")]
    Export(String),
    /// Tracing was already shut down.
    #[error("tracing was shut down")]
    ShutDown,
}
