//! The Prometheus text exposition format, and an HTTP endpoint (hyper) serving it.
//!
//! `GET /metrics` answers the counters as Prometheus text; `GET /report` answers the latest
//! [`PeriodReport`] as JSON (what `rally top` shows). Besides the actors and dispatchers, both
//! carry the figures of every source registered with the system's monitor: the cluster's
//! membership (`rally_cluster_*`) and virtual actors (`rally_grain_*`) register theirs when they
//! start, so a member's endpoint shows them with no setting.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rally_actor::ActorSystem;
use rally_actor::monitor::{Figure, FigureKind, Snapshot};
use tokio::net::TcpListener;

use crate::PeriodReport;
use crate::report::periodic;
use rally_actor::sync::Mutex;

/// Renders a snapshot (cumulative counters) and a period report (rates, utilization, verdicts)
/// as Prometheus text.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally::ActorSystem::new("doc");
/// let text = rally::metrics::prometheus::render(&system.monitor().snapshot(), &Default::default());
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
    render_sources(&mut out, &snapshot.figures);
    out
}

/// The figures of registered sources, one family per name (in the order names first appear),
/// with the help and type of the family's first figure.
fn render_sources(out: &mut String, figures: &[Figure]) {
    let mut names: Vec<&str> = Vec::new();
    for figure in figures {
        if !names.contains(&figure.name) {
            names.push(figure.name);
        }
    }
    for name in names {
        let mut family = figures.iter().filter(|f| f.name == name).peekable();
        let Some(first) = family.peek() else { continue };
        let kind = match first.kind {
            FigureKind::Counter => "counter",
            _ => "gauge",
        };
        let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} {kind}", first.help);
        for figure in family {
            let labels = figure
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect::<Vec<_>>()
                .join(",");
            let _ = writeln!(out, "{name}{{{labels}}} {}", figure.value);
        }
    }
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
    tasks: [tokio::task::AbortHandle; 2],
}

impl Endpoint {
    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The latest period report.
    pub fn latest(&self) -> PeriodReport {
        self.latest.lock().clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Serves `GET /metrics` (Prometheus text) and `GET /report` (JSON) for `system` on `addr`,
/// with a period report every `period`. HTTP/1.1 by `hyper`; anything else answers 404.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally::ActorSystem::new("doc");
/// let endpoint = rally::metrics::prometheus::serve(
///     &system,
///     "127.0.0.1:0".parse().unwrap(),
///     std::time::Duration::from_secs(1),
/// )
/// .await
/// .unwrap();
/// println!("scrape http://{}/metrics", endpoint.local_addr());
/// # }
/// ```
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
/// Cancel safe: nothing is started before the listener is bound, and a cancelled call drops it.
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
    let latest = Arc::new(Mutex::new(PeriodReport::default()));
    let recorder = periodic(system, period, latest.clone()).abort_handle();
    let system = system.clone();
    let cell = latest.clone();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors and the like: wait instead of spinning on the error.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let system = system.clone();
            let cell = cell.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let response = answer(&system, &cell, request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            tokio::spawn(async move {
                // A client that hangs up or speaks garbage ends only its own connection.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
    .abort_handle();
    Ok(Endpoint {
        addr: local,
        latest,
        tasks: [server, recorder],
    })
}

fn answer(system: &ActorSystem, cell: &Mutex<PeriodReport>, path: &str) -> Response<Full<Bytes>> {
    let report = || cell.lock().clone();
    let (status, kind, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            render(&system.monitor().snapshot(), &report()),
        ),
        "/report" => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string(&report()).unwrap_or_default(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics or /report\n".to_owned(),
        ),
    };
    respond(status, kind, body)
}

/// A response of `kind` with `body` (the dashboard's server answers with it too).
pub(crate) fn respond(
    status: StatusCode,
    kind: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_of_source_figures_has_one_help_and_type_and_escaped_labels() {
        let figures = [
            Figure::counter("jobs_total", "Jobs done.", 3).label("queue", "mail"),
            Figure::gauge("queue_length", "Waiting now.", 2.5).label("queue", "a\"b\\c"),
            Figure::counter("jobs_total", "Jobs done.", 4).label("queue", "print"),
        ];
        let mut out = String::new();
        render_sources(&mut out, &figures);
        assert_eq!(
            out,
            "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\n\
             jobs_total{queue=\"mail\"} 3\njobs_total{queue=\"print\"} 4\n\
             # HELP queue_length Waiting now.\n# TYPE queue_length gauge\n\
             queue_length{queue=\"a\\\"b\\\\c\"} 2.5\n"
        );
    }
}
