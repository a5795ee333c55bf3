//! Tracing in the benchmarks (feature `otel`): with `RALLY_BENCH_OTEL=1` in the environment
//! (child processes inherit it), every node of the remote and grain scenarios installs
//! `rally::otel` before it spawns an actor, configured by the standard `OTEL_*` variables
//! (endpoint, sampler), as a deployment would be; `otlp-sink` is a receiver that counts what
//! it is sent, so that the spans have somewhere to go.

use clap::Args;
use rally::ActorSystem;

/// The variable that turns tracing on in every process of a run.
const ENABLE: &str = "RALLY_BENCH_OTEL";

/// Traces `system` when `RALLY_BENCH_OTEL` is set; call before it spawns an actor, inside the
/// runtime. One pipeline per process, shared by its systems, kept until the process ends.
///
/// # Errors
///
/// The variable is set and tracing does not install (or the feature `otel` is off).
pub(crate) fn traced(system: &ActorSystem) -> anyhow::Result<()> {
    if std::env::var_os(ENABLE).is_none() {
        return Ok(());
    }
    #[cfg(feature = "otel")]
    {
        let tracing = match TRACING.get() {
            Some(tracing) => tracing,
            None => {
                let installed = rally::otel::Tracing::builder().install()?;
                TRACING.get_or_init(|| installed)
            }
        };
        system.add_call_filter(tracing.filter());
        Ok(())
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = system;
        anyhow::bail!("{ENABLE} is set, but rally-bench was built without the feature `otel`")
    }
}

/// The process's pipeline, once a node installed it; kept until the process ends.
#[cfg(feature = "otel")]
static TRACING: std::sync::OnceLock<rally::otel::Tracing> = std::sync::OnceLock::new();

/// Exports the spans still buffered, when tracing is on: call it at the end of a node's run,
/// on the runtime that installed tracing (the exporter's connection lives there). A failed
/// export is reported on stderr and does not fail the run.
pub(crate) async fn flush() {
    #[cfg(feature = "otel")]
    if let Some(tracing) = TRACING.get() {
        if let Err(e) = tracing.flush().await {
            eprintln!("otel: the last spans were not exported: {e}");
        }
    }
}

/// `otlp-sink`: an OTLP/gRPC trace receiver that counts the spans it is sent.
#[derive(Debug, Clone, Args)]
pub(crate) struct SinkArgs {
    /// Where it listens (the exporters' `OTEL_EXPORTER_OTLP_ENDPOINT`); port 0 for any free
    /// one, printed as the first line of standard output (`http://<address>`).
    #[arg(long, default_value = "127.0.0.1:4317")]
    listen: std::net::SocketAddr,
}

/// Runs the sink until stdin closes: prints its endpoint first, the spans received each second
/// it received any (on standard error), and the count at the end.
///
/// # Errors
///
/// The address cannot be bound (or the feature `otel` is off).
pub(crate) fn sink(args: &SinkArgs) -> anyhow::Result<()> {
    #[cfg(feature = "otel")]
    {
        use tokio::io::AsyncReadExt as _;

        super::common::current_thread_runtime().block_on(async {
            let receiver = rally_test::otlp::Receiver::counting(args.listen).await?;
            println!("http://{}", receiver.address);
            let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1));
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 64];
            let mut last = 0;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {
                        let count = receiver.count();
                        if count != last {
                            eprintln!("otlp-sink: {count} spans ({} in the last second)", count - last);
                            last = count;
                        }
                    }
                    read = stdin.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) { break },
                }
            }
            println!("{}", receiver.count());
            Ok(())
        })
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = args;
        anyhow::bail!("otlp-sink needs rally-bench built with the feature `otel`")
    }
}
