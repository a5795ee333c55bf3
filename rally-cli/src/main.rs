//! `rally`: the command-line companion of a Rally node.
//!
//! `rally top` shows a running node's actors and dispatchers, worst first, refreshed live. It
//! reads the JSON report that `rally_metrics::prometheus::serve` publishes at `/report` next to
//! the Prometheus `/metrics`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use crossterm::event::{self, Event, KeyCode};
use rally_metrics::{PeriodReport, Verdict};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, Wrap};
use ratatui::{DefaultTerminal, Frame};

/// The `rally` command.
#[derive(Debug, Parser)]
#[command(name = "rally", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A live view of a node's actors and dispatchers, worst first (q or Esc quits).
    Top(TopArgs),
}

#[derive(Debug, clap::Args)]
struct TopArgs {
    /// The node's metrics endpoint (host:port of `rally::metrics::prometheus::serve`).
    #[arg(long, default_value = "127.0.0.1:9464")]
    endpoint: String,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Print one plain-text view and exit (for scripts and terminals without a TUI).
    #[arg(long)]
    once: bool,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Top(args) => top(&args),
    }
}

fn top(args: &TopArgs) -> anyhow::Result<()> {
    let addr = args
        .endpoint
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {}", args.endpoint))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.endpoint))?;
    if args.once {
        print!("{}", plain(&fetch(&agent(), addr)?));
        return Ok(());
    }
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let terminal = ratatui::init();
    let result = live(terminal, addr, interval);
    ratatui::restore();
    result
}

fn live(mut terminal: DefaultTerminal, addr: SocketAddr, interval: Duration) -> anyhow::Result<()> {
    let agent = agent();
    loop {
        let report = fetch(&agent, addr);
        terminal.draw(|frame| draw(frame, addr, &report))?;
        if event::poll(interval)? {
            if let Event::Key(key) = event::read()? {
                if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                    return Ok(());
                }
            }
        }
    }
}

/// `GET /report` with an HTTP client.
fn fetch(agent: &ureq::Agent, addr: SocketAddr) -> anyhow::Result<PeriodReport> {
    let mut response = agent
        .get(&format!("http://{addr}/report"))
        .call()
        .with_context(|| format!("cannot read http://{addr}/report"))?;
    let body = response.body_mut().read_to_string()?;
    serde_json::from_str(&body).with_context(|| format!("{addr} sent a report that does not parse"))
}

/// A client that gives up on a node that does not answer within two seconds.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into()
}

fn colour(verdict: Verdict) -> Color {
    match verdict {
        Verdict::Healthy => Color::Green,
        Verdict::StarvedForThreads | Verdict::BlockingItsDispatcher => Color::Yellow,
        _ => Color::Red,
    }
}

fn draw(frame: &mut Frame<'_>, addr: SocketAddr, report: &anyhow::Result<PeriodReport>) {
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
    let [actors_area, dispatchers_area, diagnosis_area] = Layout::vertical([
        Constraint::Min(6),
        Constraint::Length(report.dispatchers.len() as u16 + 3),
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
    let worst = report.actors.first().map_or_else(
        || "no monitored actors".to_owned(),
        |a| format!("{}: {}", a.path, a.diagnosis.text),
    );
    frame.render_widget(
        Paragraph::new(worst)
            .wrap(Wrap { trim: true })
            .block(Block::default().borders(Borders::ALL).title(" diagnosis ")),
        diagnosis_area,
    );
}

/// The same view as plain text.
fn plain(report: &PeriodReport) -> String {
    let mut out = format!(
        "{:<32} {:<24} {:>6} {:>6} {:>5} {:>9} {:>9} {}\n",
        "actor", "verdict", "queue", "max", "util", "svc ms", "wait ms", "dispatcher"
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_view_lists_actors_and_dispatchers() {
        let report: PeriodReport = serde_json::from_str(
            r#"{"seconds":1.0,"actors":[{"path":"/user/a","dispatcher":"default",
            "arrival_rate":66.0,"throughput":4.0,"queue":120,"max_queue":120,"utilization":0.04,
            "service_ms":10.0,"waiting_ms":900.0,"blocking_share":1.0,
            "diagnosis":{"verdict":"starved-for-threads","text":"starved for threads: fix"}}],
            "dispatchers":[{"name":"default","kind":"shared","threads":4,"busy_threads":4,
            "utilization":1.0,"runnable_waiting":3}]}"#,
        )
        .unwrap();
        let text = plain(&report);
        assert!(text.contains("/user/a"));
        assert!(text.contains("starved for threads"));
        assert!(text.contains("default          shared"));
    }

    #[test]
    fn the_live_view_draws_into_a_buffer() {
        let backend = ratatui::backend::TestBackend::new(120, 30);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        let report = Ok(PeriodReport::default());
        terminal
            .draw(|frame| draw(frame, "127.0.0.1:1".parse().unwrap(), &report))
            .unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|cell| cell.symbol())
            .collect();
        assert!(screen.contains("rally top"));
        assert!(screen.contains("no monitored actors"));
    }
}
