//! The Prometheus text exposition format, and a small HTTP endpoint serving it.
//!
//! `GET /metrics` answers the counters as Prometheus text; `GET /report` answers the latest
//! [`PeriodReport`] as JSON (what `rally top` shows).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rally_actor::ActorSystem;
use rally_actor::monitor::Snapshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::{PeriodReport, spawn_periodic};

/// Renders a snapshot (cumulative counters) and a period report (rates, utilization, verdicts)
/// as Prometheus text.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally_actor::ActorSystem::new("doc");
/// let text = rally_metrics::prometheus::render(&system.monitor().snapshot(), &Default::default());
/// assert!(text.contains("rally_dispatcher_threads{dispatcher=\"default\"}"));
/// # }
/// ```
pub fn render(snapshot: &Snapshot, report: &PeriodReport) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let actor = |path: &str, dispatcher: &str| {
        format!(
            "actor=\"{}\",dispatcher=\"{}\"",
            escape(path),
            escape(dispatcher)
        )
    };
    let a = &snapshot.actors;
    let rows = |f: &dyn Fn(&rally_actor::monitor::ActorSnapshot) -> f64| {
        a.iter()
            .map(|s| (actor(&s.path, &s.dispatcher), f(s)))
            .collect::<Vec<_>>()
    };
    family(
        "rally_actor_messages_arrived_total",
        "counter",
        "User messages accepted into the mailbox.",
        rows(&|s| s.arrived as f64),
    );
    family(
        "rally_actor_messages_completed_total",
        "counter",
        "User messages handled.",
        rows(&|s| s.completed as f64),
    );
    family(
        "rally_actor_mailbox_length",
        "gauge",
        "Messages waiting now.",
        rows(&|s| s.queued as f64),
    );
    family(
        "rally_actor_mailbox_length_max",
        "gauge",
        "The longest queue in the current period.",
        rows(&|s| s.max_queued as f64),
    );
    family(
        "rally_actor_busy_seconds_total",
        "counter",
        "Time spent handling messages.",
        rows(&|s| s.busy.as_secs_f64()),
    );
    family(
        "rally_actor_on_thread_seconds_total",
        "counter",
        "Time the actor held a thread.",
        rows(&|s| s.on_thread.as_secs_f64()),
    );
    family(
        "rally_actor_blocking_seconds_total",
        "counter",
        "Time held in polls longer than the blocking threshold.",
        rows(&|s| s.blocking.as_secs_f64()),
    );
    family(
        "rally_actor_waiting_seconds_sum",
        "counter",
        "Mailbox waiting time of the sampled messages.",
        rows(&|s| s.waited.as_secs_f64()),
    );
    family(
        "rally_actor_waiting_samples_total",
        "counter",
        "Messages sampled for waiting time.",
        rows(&|s| s.wait_samples as f64),
    );
    let period = |f: &dyn Fn(&crate::ActorPeriod) -> f64| {
        report
            .actors
            .iter()
            .map(|p| (actor(&p.path, &p.dispatcher), f(p)))
            .collect::<Vec<_>>()
    };
    family(
        "rally_actor_utilization",
        "gauge",
        "Share of the last period spent handling messages.",
        period(&|p| p.utilization),
    );
    family(
        "rally_actor_service_seconds",
        "gauge",
        "Mean handling time in the last period.",
        period(&|p| p.service_ms / 1e3),
    );
    family(
        "rally_actor_waiting_seconds",
        "gauge",
        "Mean mailbox waiting time in the last period.",
        period(&|p| p.waiting_ms / 1e3),
    );
    family(
        "rally_actor_diagnosis",
        "gauge",
        "1 for the verdict of the last period.",
        report
            .actors
            .iter()
            .map(|p| {
                (
                    format!(
                        "{},verdict=\"{}\"",
                        actor(&p.path, &p.dispatcher),
                        p.diagnosis.verdict.words()
                    ),
                    1.0,
                )
            })
            .collect(),
    );
    let d = &snapshot.dispatchers;
    let label = |name: &str| format!("dispatcher=\"{}\"", escape(name));
    family(
        "rally_dispatcher_threads",
        "gauge",
        "Threads actors run on.",
        d.iter()
            .map(|s| (label(&s.name), s.threads as f64))
            .collect(),
    );
    family(
        "rally_dispatcher_busy_threads",
        "gauge",
        "Threads running an actor now.",
        d.iter()
            .map(|s| (label(&s.name), s.busy_threads as f64))
            .collect(),
    );
    family(
        "rally_dispatcher_runnable_waiting",
        "gauge",
        "Runnable actors waiting for a thread.",
        d.iter()
            .map(|s| (label(&s.name), s.runnable_waiting as f64))
            .collect(),
    );
    family(
        "rally_dispatcher_busy_seconds_total",
        "counter",
        "Thread time held by monitored actors.",
        d.iter()
            .map(|s| (label(&s.name), s.busy.as_secs_f64()))
            .collect(),
    );
    family(
        "rally_dispatcher_utilization",
        "gauge",
        "Share of the threads' time in use in the last period.",
        report
            .dispatchers
            .iter()
            .map(|p| (label(&p.name), p.utilization))
            .collect(),
    );
    out
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// A running endpoint; dropping it stops serving.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    latest: Arc<Mutex<PeriodReport>>,
    task: tokio::task::AbortHandle,
}

impl Endpoint {
    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The latest period report.
    pub fn latest(&self) -> PeriodReport {
        self.latest
            .lock()
            .expect("the report lock is never poisoned: only an assignment runs under it")
            .clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `GET /metrics` (Prometheus text) and `GET /report` (JSON) for `system` on `addr`,
/// with a period report every `period`.
///
/// # Errors
///
/// [`ServeError::Bind`] when the address cannot be bound.
///
/// # Panics
///
/// Outside a tokio runtime.
///
/// # Cancel safety
///
/// Not cancel safe only in that a cancelled call may leave the listener unbound; nothing else
/// is started before it returns.
pub async fn serve(
    system: &ActorSystem,
    addr: SocketAddr,
    period: Duration,
) -> Result<Endpoint, ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let latest = spawn_periodic(system, period);
    let system = system.clone();
    let cell = latest.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let system = system.clone();
            let cell = cell.clone();
            tokio::spawn(async move {
                let mut request = Vec::with_capacity(1024);
                let mut buf = [0u8; 1024];
                // Read the request head (we ignore any body).
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request);
                let target = head.split_whitespace().nth(1).unwrap_or("/");
                let report = cell
                    .lock()
                    .expect("the report lock is never poisoned: only an assignment runs under it")
                    .clone();
                let (status, kind, body) = match target {
                    "/metrics" => (
                        "200 OK",
                        "text/plain; version=0.0.4",
                        render(&system.monitor().snapshot(), &report),
                    ),
                    "/report" => (
                        "200 OK",
                        "application/json",
                        serde_json::to_string(&report).unwrap_or_default(),
                    ),
                    _ => ("404 Not Found", "text/plain", "try /metrics or /report\n".to_owned()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    })
    .abort_handle();
    Ok(Endpoint {
        addr: local,
        latest,
        task,
    })
}
