//! `rally top --cluster`: the cluster dashboard's view (`/api/cluster` of
//! `rally::metrics::dashboard::serve`) in the terminal, as plain text (`--once`) or live, with a
//! sparkline of the cluster's virtual-actor calls per second over the last minutes.

use std::fmt::Write as _;
use std::net::SocketAddr;

use rally_metrics::dashboard::ClusterView;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::widgets::{Block, Borders, Paragraph, Sparkline};

/// The whole view as text: members, kinds, then each member's dispatchers and hottest actors.
pub(super) fn plain(view: &ClusterView) -> String {
    let up = view.members.iter().filter(|m| m.status == "up").count();
    let mut out = format!(
        "cluster served by {}: {} members, {up} up\n\n{:<44} {:<8} {:<5} {:>8} {:>9} {:>10} {:>7} {:>7}  {}\n",
        view.served_by,
        view.members.len(),
        "member",
        "status",
        "reach",
        "msg/s",
        "calls/s",
        "p99 call",
        "grains",
        "queued",
        "worst actor",
    );
    for m in &view.members {
        let reach = if m.reachable { "yes" } else { "no" };
        match &m.figures {
            Some(f) => {
                let worst = f.hottest.first().map_or_else(
                    || "no monitored actor".to_owned(),
                    |a| format!("{}: {}", a.path, a.diagnosis.verdict.words()),
                );
                let _ = writeln!(
                    out,
                    "{:<44} {:<8} {:<5} {:>8.0} {:>9.1} {:>10} {:>7} {:>7}  {}",
                    m.member,
                    m.status,
                    reach,
                    f.messages_per_sec,
                    f.calls_per_sec(),
                    ms(f.p99_ms()),
                    f.kinds.iter().map(|k| k.active).sum::<u64>(),
                    f.queued,
                    worst
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{:<44} {:<8} {:<5} no figures: {}",
                    m.member,
                    m.status,
                    reach,
                    m.error.as_deref().unwrap_or("not asked")
                );
            }
        }
    }
    let _ = write!(
        out,
        "\n{:<16} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9} {:>10}\n",
        "kind", "members", "active", "leases", "act/s", "moves/s", "calls/s", "p99 call"
    );
    for k in &view.kinds {
        let _ = writeln!(
            out,
            "{:<16} {:>7} {:>7} {:>7} {:>8.1} {:>8.1} {:>9.1} {:>10}",
            k.kind,
            k.members,
            k.active,
            k.leases,
            k.activations_per_sec,
            k.moves_per_sec,
            k.calls_per_sec,
            ms(k.p99_ms)
        );
    }
    if view.kinds.is_empty() {
        out.push_str("(no member reports a virtual-actor kind)\n");
    }
    for m in &view.members {
        let Some(f) = &m.figures else { continue };
        let _ = writeln!(out, "\n{}", m.member);
        for d in &f.dispatchers {
            let _ = writeln!(
                out,
                "  dispatcher {:<16} {:<16} threads {:>3}  busy {:>3}  util {:>3.0}%  waiting {}",
                d.name,
                d.kind,
                d.threads,
                d.busy_threads,
                d.utilization * 100.0,
                d.runnable_waiting
            );
        }
        for a in &f.hottest {
            let _ = writeln!(out, "  {:<30} {}", a.path, a.diagnosis.text);
        }
    }
    out
}

/// The live view: the plain text, under a sparkline of the cluster's calls per second.
pub(super) fn draw(frame: &mut Frame<'_>, addr: SocketAddr, view: &anyhow::Result<ClusterView>) {
    let view = match view {
        Ok(view) => view,
        Err(error) => {
            frame.render_widget(
                Paragraph::new(format!("{error:#}\n\nretrying; q quits")).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(format!(" rally top --cluster {addr} ")),
                ),
                frame.area(),
            );
            return;
        }
    };
    let [chart_area, text_area] =
        Layout::vertical([Constraint::Length(6), Constraint::Min(6)]).areas(frame.area());
    let calls = calls_per_tick(view);
    let latest = calls.last().copied().unwrap_or(0);
    frame.render_widget(
        Sparkline::default()
            .data(&calls)
            .block(Block::default().borders(Borders::ALL).title(format!(
                " grain calls per second, cluster-wide: {latest} now "
            ))),
        chart_area,
    );
    frame.render_widget(
        Paragraph::new(plain(view)).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" rally top --cluster {addr} (q quits) ")),
        ),
        text_area,
    );
}

/// The cluster's calls per second at each gathering of the charts (members summed).
fn calls_per_tick(view: &ClusterView) -> Vec<u64> {
    let charts = &view.charts;
    (0..charts.at.len())
        .map(|t| {
            let sum: f64 = charts
                .calls_per_sec
                .iter()
                .filter_map(|series| series.get(t).copied().flatten())
                .sum();
            // A rate shown whole: the sparkline draws integers.
            sum.max(0.0).round() as u64
        })
        .collect()
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("<={v}ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_view_lists_members_kinds_and_why_one_has_no_figures() {
        let view: ClusterView = serde_json::from_str(
            r#"{"served_by":"rally://s@h:1#a","members":[
                {"member":"rally://s@h:1#a","status":"up","reachable":true,"error":null,
                 "figures":{"seconds":1.0,"dispatchers":[],"hottest":[],"monitored_actors":0,
                   "messages_per_sec":0.0,"queued":0,"kinds":[{"kind":"cart","active":4,"leases":2,
                   "activations":4,"activations_per_sec":0.0,"moves":0,"moves_per_sec":0.0,
                   "calls_per_sec":10.0,"calls_within":[[0.001,10.0],[null,10.0]],"p99_ms":1.0}]}},
                {"member":"rally://s@h:2#b","status":"down","reachable":false,"figures":null,
                 "error":"not asked: the member is out of the cluster"}],
              "kinds":[{"kind":"cart","members":1,"active":4,"leases":2,"activations_per_sec":0.0,
                "moves_per_sec":0.0,"calls_per_sec":10.0,"p99_ms":1.0}],
              "charts":{"members":["rally://s@h:1#a"],"at":[1.0,2.0],
                "calls_per_sec":[[4.0,10.0]],"messages_per_sec":[[0.0,0.0]],
                "p99_ms":[[null,1.0]],"queued":[[0.0,0.0]]}}"#,
        )
        .unwrap();
        let text = plain(&view);
        assert!(text.contains("2 members, 1 up"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("rally://s@h:1#a") && l.contains(" up ")),
            "{text}"
        );
        assert!(text.contains("no figures: not asked"), "{text}");
        let cart: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("cart "))
            .expect("a row for the kind")
            .split_whitespace()
            .collect();
        assert_eq!(cart[..4], ["cart", "1", "4", "2"], "{text}");
        assert_eq!(calls_per_tick(&view), [4, 10]);

        let backend = ratatui::backend::TestBackend::new(140, 30);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        let view = Ok(view);
        terminal
            .draw(|frame| draw(frame, "127.0.0.1:1".parse().unwrap(), &view))
            .unwrap();
        let screen = crate::top::screen(&terminal);
        assert!(
            screen.contains("cluster-wide: 10 now"),
            "the sparkline's title"
        );
        assert!(screen.contains("rally://s@h:2#b"), "the members below it");
    }
}
