//! The live view, drawn with ratatui.

use std::net::SocketAddr;

use rally_metrics::{PeriodReport, Verdict};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, Wrap};

use super::plain::NO_ACTORS;
use super::rows::{KindRow, MembershipRow, kind_rows, membership_rows};
use super::window::Window;

fn colour(verdict: Verdict) -> Color {
    match verdict {
        Verdict::Healthy => Color::Green,
        Verdict::StarvedForThreads | Verdict::BlockingItsDispatcher => Color::Yellow,
        _ => Color::Red,
    }
}

pub(super) fn draw(
    frame: &mut Frame<'_>,
    addr: SocketAddr,
    report: &anyhow::Result<PeriodReport>,
    window: &Window,
) {
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            frame.render_widget(
                Paragraph::new(format!("{error:#}\n\nretrying; q quits")).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(format!(" rally top {addr} ")),
                ),
                frame.area(),
            );
            return;
        }
    };
    let kinds = kind_rows(report, window);
    let membership = membership_rows(report, window);
    let grains_height = if kinds.is_empty() {
        0
    } else {
        kinds.len() as u16 + 3
    };
    let cluster_height = if membership.is_empty() {
        0
    } else {
        membership.len() as u16 * 2 + 2
    };
    let [
        actors_area,
        dispatchers_area,
        grains_area,
        cluster_area,
        diagnosis_area,
    ] = Layout::vertical([
        Constraint::Min(6),
        Constraint::Length(report.dispatchers.len() as u16 + 3),
        Constraint::Length(grains_height),
        Constraint::Length(cluster_height),
        Constraint::Length(5),
    ])
    .areas(frame.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let actors = Table::new(
        report.actors.iter().map(|a| {
            Row::new(vec![
                a.path.clone(),
                a.diagnosis.verdict.words().to_owned(),
                a.queue.to_string(),
                a.max_queue.to_string(),
                format!("{:.0}%", a.utilization * 100.0),
                format!("{:.2}", a.service_ms),
                format!("{:.2}", a.waiting_ms),
                format!("{:.0}", a.arrival_rate),
                format!("{:.0}", a.throughput),
                a.dispatcher.clone(),
            ])
            .style(Style::default().fg(colour(a.diagnosis.verdict)))
        }),
        [
            Constraint::Min(20),
            Constraint::Length(24),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(6),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(12),
        ],
    )
    .header(
        Row::new(vec![
            "actor",
            "verdict",
            "queue",
            "max",
            "util",
            "svc ms",
            "wait ms",
            "in/s",
            "out/s",
            "dispatcher",
        ])
        .style(bold),
    )
    .block(Block::default().borders(Borders::ALL).title(format!(
        " rally top {addr}: {} actors, period {:.1} s, worst first (q quits) ",
        report.actors.len(),
        report.seconds
    )));
    frame.render_widget(actors, actors_area);
    let dispatchers = Table::new(
        report.dispatchers.iter().map(|d| {
            Row::new(vec![
                d.name.clone(),
                d.kind.clone(),
                d.threads.to_string(),
                d.busy_threads.to_string(),
                format!("{:.0}%", d.utilization * 100.0),
                d.runnable_waiting.to_string(),
            ])
        }),
        [
            Constraint::Min(16),
            Constraint::Length(16),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(9),
        ],
    )
    .header(
        Row::new(vec![
            "dispatcher",
            "kind",
            "threads",
            "busy",
            "util",
            "runnable",
        ])
        .style(bold),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(" dispatchers "),
    );
    frame.render_widget(dispatchers, dispatchers_area);
    if !kinds.is_empty() {
        let grains = Table::new(
            kinds.iter().map(|row| Row::new(row.cells().to_vec())),
            [
                Constraint::Length(16),
                Constraint::Min(20),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(7),
                Constraint::Length(10),
            ],
        )
        .header(Row::new(KindRow::HEADER.to_vec()).style(bold))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" virtual actors ({}) ", window.caption(report))),
        );
        frame.render_widget(grains, grains_area);
    }
    if !membership.is_empty() {
        let lines = membership
            .iter()
            .map(MembershipRow::line)
            .collect::<Vec<_>>()
            .join("\n");
        frame.render_widget(
            Paragraph::new(lines)
                .wrap(Wrap { trim: true })
                .block(Block::default().borders(Borders::ALL).title(" cluster ")),
            cluster_area,
        );
    }
    let worst = report.actors.first().map_or_else(
        || NO_ACTORS.to_owned(),
        |a| format!("{}: {}", a.path, a.diagnosis.text),
    );
    frame.render_widget(
        Paragraph::new(worst)
            .wrap(Wrap { trim: true })
            .block(Block::default().borders(Borders::ALL).title(" diagnosis ")),
        diagnosis_area,
    );
}
