//! The same view as plain text (`rally top --once`).

use rally_metrics::{PeriodReport, Verdict};

use super::rows::{KindRow, kind_rows, membership_rows};
use super::window::Window;

/// What the views say when the report has no actor: monitoring is opt-in per actor, so a node
/// that opted none in shows only its dispatchers.
pub(super) const NO_ACTORS: &str = "no monitored actors: monitoring is opt-in per actor; spawn with \
    `Props::new(actor).monitored(true)`, or monitor every actor with `all-actors = true` in \
    `[monitoring]` (or `monitoring = true` on a dispatcher); see docs/tuning.md";

/// The same view as plain text, rates across `window` (or the node's period before it has two
/// reports).
pub(super) fn plain(report: &PeriodReport, window: &Window) -> String {
    let mut out = format!(
        "{:<32} {:<24} {:>6} {:>6} {:>5} {:>9} {:>9} {}\n",
        "actor", "verdict", "queue", "max", "util", "svc ms", "wait ms", "dispatcher"
    );
    if report.actors.is_empty() {
        out.push_str(&format!("({NO_ACTORS})\n"));
    }
    for a in &report.actors {
        out.push_str(&format!(
            "{:<32} {:<24} {:>6} {:>6} {:>4.0}% {:>9.2} {:>9.2} {}\n",
            a.path,
            a.diagnosis.verdict.words(),
            a.queue,
            a.max_queue,
            a.utilization * 100.0,
            a.service_ms,
            a.waiting_ms,
            a.dispatcher
        ));
    }
    out.push_str(&format!(
        "\n{:<16} {:<16} {:>7} {:>5} {:>5} {:>8}\n",
        "dispatcher", "kind", "threads", "busy", "util", "runnable"
    ));
    for d in &report.dispatchers {
        out.push_str(&format!(
            "{:<16} {:<16} {:>7} {:>5} {:>4.0}% {:>8}\n",
            d.name,
            d.kind,
            d.threads,
            d.busy_threads,
            d.utilization * 100.0,
            d.runnable_waiting
        ));
    }
    let kinds = kind_rows(report, window);
    let membership = membership_rows(report, window);
    if !kinds.is_empty() || !membership.is_empty() {
        out.push_str(&format!("\n({})\n", window.caption(report)));
    }
    if !kinds.is_empty() {
        let [k, m, a, n, r, d, mv, f] = KindRow::HEADER;
        out.push_str(&format!(
            "{k:<16} {m:<32} {a:>7} {n:>11} {r:>8} {d:>8} {mv:>7} {f:>9}\n"
        ));
        for row in &kinds {
            let [k, m, a, n, r, d, mv, f] = row.cells();
            out.push_str(&format!(
                "{k:<16} {m:<32} {a:>7} {n:>11} {r:>8} {d:>8} {mv:>7} {f:>9}\n"
            ));
        }
    }
    for row in membership {
        out.push_str(&format!("\n{}\n", row.line()));
    }
    for a in report
        .actors
        .iter()
        .filter(|a| a.diagnosis.verdict != Verdict::Healthy)
    {
        out.push_str(&format!("\n{}: {}", a.path, a.diagnosis.text));
    }
    out.push('\n');
    out
}
