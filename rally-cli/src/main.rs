//! `rally`: the command-line companion of a Rally node.
//!
//! `rally top` shows a running node's actors and dispatchers, worst first, refreshed live, and,
//! on a cluster member, its virtual actors per kind and its membership. It reads the JSON report
//! that `rally_metrics::prometheus::serve` publishes at `/report` next to the Prometheus
//! `/metrics`.

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
    /// A live view of a node's actors and dispatchers, worst first, and of a cluster member's
    /// virtual actors and membership (q or Esc quits).
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

/// One kind of virtual actor on one member, from the report's `rally_grain_*` figures.
#[derive(Debug, Clone, PartialEq)]
struct KindRow {
    kind: String,
    member: String,
    active: f64,
    activations: f64,
    activations_per_s: f64,
    deactivations_per_s: f64,
    moves: f64,
    forwarded: f64,
}

/// One member's membership, from the report's `rally_cluster_*` figures.
#[derive(Debug, Clone, PartialEq)]
struct MembershipRow {
    member: String,
    /// Members by status: joining, up, leaving, down.
    statuses: [f64; 4],
    unreachable: f64,
    packets_in_per_s: f64,
    packets_out_per_s: f64,
    bytes_in_per_s: f64,
    bytes_out_per_s: f64,
    decisions: f64,
}

const STATUSES: [&str; 4] = ["joining", "up", "leaving", "down"];

/// The value and rate of figure `name` with `labels`, zero if the report has none.
fn figure(report: &PeriodReport, name: &str, labels: &[(&str, &str)]) -> (f64, f64) {
    report
        .figures_named(name, labels)
        .next()
        .map_or((0.0, 0.0), |f| (f.value, f.rate.unwrap_or(0.0)))
}

/// A row per kind and member, sorted by kind then member.
fn kind_rows(report: &PeriodReport) -> Vec<KindRow> {
    let mut rows: Vec<KindRow> = report
        .figures_named("rally_grain_active", &[])
        .map(|active| {
            let kind = active.label("kind").unwrap_or("?");
            let member = active.label("member").unwrap_or("?");
            let labels = [("kind", kind), ("member", member)];
            let get = |name| figure(report, name, &labels);
            let (activations, activations_per_s) = get("rally_grain_activations_total");
            KindRow {
                kind: kind.to_owned(),
                member: member.to_owned(),
                active: active.value,
                activations,
                activations_per_s,
                deactivations_per_s: get("rally_grain_deactivations_total").1,
                moves: get("rally_grain_moves_total").0,
                forwarded: get("rally_grain_forwarded_total").0,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.member.cmp(&b.member)));
    rows
}

/// A row per member whose membership figures the report carries.
fn membership_rows(report: &PeriodReport) -> Vec<MembershipRow> {
    report
        .figures_named("rally_cluster_members_unreachable", &[])
        .map(|unreachable| {
            let member = unreachable.label("member").unwrap_or("?");
            let labels = [("member", member)];
            let get = |name| figure(report, name, &labels);
            MembershipRow {
                member: member.to_owned(),
                statuses: STATUSES.map(|status| {
                    figure(
                        report,
                        "rally_cluster_members",
                        &[("member", member), ("status", status)],
                    )
                    .0
                }),
                unreachable: unreachable.value,
                packets_in_per_s: get("rally_cluster_membership_packets_received_total").1,
                packets_out_per_s: get("rally_cluster_membership_packets_sent_total").1,
                bytes_in_per_s: get("rally_cluster_membership_bytes_received_total").1,
                bytes_out_per_s: get("rally_cluster_membership_bytes_sent_total").1,
                decisions: get("rally_cluster_downing_decisions_total").0,
            }
        })
        .collect()
}

impl KindRow {
    const HEADER: [&'static str; 8] = [
        "kind",
        "member",
        "active",
        "activations",
        "act/s",
        "deact/s",
        "moves",
        "forwarded",
    ];

    fn cells(&self) -> [String; 8] {
        [
            self.kind.clone(),
            self.member.clone(),
            format!("{:.0}", self.active),
            format!("{:.0}", self.activations),
            format!("{:.1}", self.activations_per_s),
            format!("{:.1}", self.deactivations_per_s),
            format!("{:.0}", self.moves),
            format!("{:.0}", self.forwarded),
        ]
    }
}

impl MembershipRow {
    /// One line: members by status, traffic, decisions.
    fn line(&self) -> String {
        let [joining, up, leaving, down] = self.statuses;
        format!(
            "{}: members up {up:.0}, joining {joining:.0}, leaving {leaving:.0}, down {down:.0}, \
             unreachable {:.0}; membership in {:.1} packets/s {:.0} B/s, out {:.1} packets/s \
             {:.0} B/s; downing decisions {:.0}",
            self.member,
            self.unreachable,
            self.packets_in_per_s,
            self.bytes_in_per_s,
            self.packets_out_per_s,
            self.bytes_out_per_s,
            self.decisions
        )
    }
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
    let kinds = kind_rows(report);
    let membership = membership_rows(report);
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
                .title(" virtual actors "),
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

/// What the views say when the report has no actor: monitoring is opt-in per actor, so a node
/// that opted none in shows only its dispatchers.
const NO_ACTORS: &str = "no monitored actors: monitoring is opt-in per actor; spawn with \
    `Props::new(actor).monitored(true)`, or monitor every actor with `all-actors = true` in \
    `[monitoring]` (or `monitoring = true` on a dispatcher); see docs/tuning.md";

/// The same view as plain text.
fn plain(report: &PeriodReport) -> String {
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
    let kinds = kind_rows(report);
    if !kinds.is_empty() {
        let [k, m, a, n, r, d, mv, f] = KindRow::HEADER;
        out.push_str(&format!(
            "\n{k:<16} {m:<32} {a:>7} {n:>11} {r:>8} {d:>8} {mv:>7} {f:>9}\n"
        ));
        for row in &kinds {
            let [k, m, a, n, r, d, mv, f] = row.cells();
            out.push_str(&format!(
                "{k:<16} {m:<32} {a:>7} {n:>11} {r:>8} {d:>8} {mv:>7} {f:>9}\n"
            ));
        }
    }
    for row in membership_rows(report) {
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

    /// A report of one member hosting `cart`, as the endpoint serves it.
    fn cluster_report() -> PeriodReport {
        let member = r#""member":"rally://shop@127.0.0.1:2552""#;
        let figure = |name: &str, labels: &str, value: f64, rate: Option<f64>| {
            let rate = rate.map_or("null".to_owned(), |r| r.to_string());
            format!(
                r#"{{"name":"{name}","labels":{{{member}{labels}}},"value":{value},"rate":{rate}}}"#
            )
        };
        let cart = r#","kind":"cart""#;
        let figures = [
            figure("rally_grain_active", cart, 40.0, None),
            figure("rally_grain_activations_total", cart, 50.0, Some(2.5)),
            figure("rally_grain_deactivations_total", cart, 10.0, Some(0.5)),
            figure("rally_grain_moves_total", cart, 3.0, Some(0.0)),
            figure("rally_grain_forwarded_total", cart, 7.0, Some(0.0)),
            figure("rally_cluster_members", r#","status":"up""#, 3.0, None),
            figure("rally_cluster_members", r#","status":"down""#, 1.0, None),
            figure("rally_cluster_members_unreachable", "", 0.0, None),
            figure(
                "rally_cluster_membership_packets_received_total",
                "",
                900.0,
                Some(4.0),
            ),
            figure(
                "rally_cluster_membership_bytes_received_total",
                "",
                90000.0,
                Some(400.0),
            ),
            figure("rally_cluster_downing_decisions_total", "", 1.0, Some(0.0)),
        ];
        serde_json::from_str(&format!(
            r#"{{"seconds":2.0,"actors":[],"dispatchers":[],"figures":[{}]}}"#,
            figures.join(",")
        ))
        .unwrap()
    }

    #[test]
    fn the_plain_view_has_a_row_per_kind_and_a_line_per_member() {
        let text = plain(&cluster_report());
        let header = text
            .lines()
            .find(|l| l.starts_with("kind "))
            .unwrap_or_else(|| panic!("no kinds header in:\n{text}"));
        assert!(header.contains("act/s"), "{header}");
        let cart: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("cart "))
            .unwrap_or_else(|| panic!("no row for the kind in:\n{text}"))
            .split_whitespace()
            .collect();
        assert_eq!(
            cart,
            [
                "cart",
                "rally://shop@127.0.0.1:2552",
                "40",
                "50",
                "2.5",
                "0.5",
                "3",
                "7"
            ]
        );
        assert!(
            text.contains(
                "rally://shop@127.0.0.1:2552: members up 3, joining 0, leaving 0, down 1, \
                 unreachable 0; membership in 4.0 packets/s 400 B/s, out 0.0 packets/s 0 B/s; \
                 downing decisions 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_plain_view_of_a_node_with_no_monitored_actor_says_how_to_opt_in() {
        let text = plain(&PeriodReport::default());
        assert!(text.contains("no monitored actors"), "{text}");
        assert!(text.contains("monitored(true)"), "{text}");
        assert!(text.contains("all-actors = true"), "{text}");
        let one = plain(
            &serde_json::from_str(
                r#"{"seconds":1.0,"actors":[{"path":"/user/a","dispatcher":"default",
                "arrival_rate":1.0,"throughput":1.0,"queue":0,"max_queue":0,"utilization":0.0,
                "service_ms":0.0,"waiting_ms":0.0,"blocking_share":0.0,
                "diagnosis":{"verdict":"healthy","text":"healthy"}}],"dispatchers":[]}"#,
            )
            .unwrap(),
        );
        assert!(!one.contains("no monitored actors"), "{one}");
    }

    #[test]
    fn a_report_without_cluster_figures_has_no_cluster_sections() {
        let text = plain(&PeriodReport::default());
        assert!(!text.contains("act/s"), "{text}");
        assert!(!text.contains("members up"), "{text}");
    }

    #[test]
    fn the_live_view_shows_the_kinds_and_the_cluster() {
        let backend = ratatui::backend::TestBackend::new(160, 40);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        let report = Ok(cluster_report());
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
        assert!(screen.contains("virtual actors"), "{screen}");
        assert!(screen.contains("cart"), "{screen}");
        assert!(screen.contains("members up 3"), "{screen}");
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
