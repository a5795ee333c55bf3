//! The errors of installing, flushing and shutting down tracing.

/// Why [`TracingBuilder::install`](crate::TracingBuilder::install) refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The sampling ratio is not in 0.0..=1.0.
    #[error("sampling ratio {0} is not between 0.0 and 1.0")]
    SamplingRatio(f64),
    /// The OTLP exporter refused its settings (an endpoint that is not a URI, say).
    #[error("the OTLP exporter refused its settings: {0}")]
    Exporter(String),
    /// Called outside a tokio runtime: the exporter runs on the runtime that installs it.
    #[error("tracing must be installed from inside a tokio runtime")]
    NoRuntime,
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
