//! `rally top`: fetch the node's period report, then draw it live ([`draw`]) or print it
//! once ([`plain`]); [`rows`] turns the report's cluster figures into table rows.

mod cluster;
mod draw;
mod plain;
mod rows;
mod window;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Context as _;
use crossterm::event::{self, Event, KeyCode};
use rally_metrics::PeriodReport;
use ratatui::DefaultTerminal;

use crate::TopArgs;
use draw::draw;
use plain::plain;
use window::Window;

/// Runs `rally top` with `args`.
pub(crate) fn run(args: &TopArgs) -> anyhow::Result<()> {
    let addr = args
        .endpoint
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {}", args.endpoint))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.endpoint))?;
    if args.cluster {
        return run_cluster(args, addr);
    }
    let window = Window::new(Duration::from_secs(args.window_s.max(1)));
    if args.once {
        print!("{}", plain(&fetch(&agent(), addr)?, &window));
        return Ok(());
    }
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let terminal = ratatui::init();
    let result = live(terminal, addr, interval, window);
    ratatui::restore();
    result
}

fn live(
    mut terminal: DefaultTerminal,
    addr: SocketAddr,
    interval: Duration,
    mut window: Window,
) -> anyhow::Result<()> {
    let agent = agent();
    loop {
        let report = fetch(&agent, addr);
        if let Ok(report) = &report {
            window.observe(std::time::Instant::now(), report);
        }
        terminal.draw(|frame| draw(frame, addr, &report, &window))?;
        if event::poll(interval)? {
            if let Event::Key(key) = event::read()? {
                if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                    return Ok(());
                }
            }
        }
    }
}

/// `rally top --cluster`: the dashboard's view, once or live.
fn run_cluster(args: &TopArgs, addr: SocketAddr) -> anyhow::Result<()> {
    let agent = agent();
    if args.once {
        print!("{}", cluster::plain(&fetch_cluster(&agent, addr)?));
        return Ok(());
    }
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let mut terminal = ratatui::init();
    let result = (|| loop {
        let view = fetch_cluster(&agent, addr);
        terminal.draw(|frame| cluster::draw(frame, addr, &view))?;
        if event::poll(interval)? {
            if let Event::Key(key) = event::read()? {
                if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                    return Ok(());
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// `GET /api/cluster` of a dashboard.
fn fetch_cluster(
    agent: &ureq::Agent,
    addr: SocketAddr,
) -> anyhow::Result<rally_metrics::dashboard::ClusterView> {
    let mut response = agent
        .get(&format!("http://{addr}/api/cluster"))
        .call()
        .with_context(|| format!("cannot read http://{addr}/api/cluster (is it a dashboard?)"))?;
    let body = response.body_mut().read_to_string()?;
    serde_json::from_str(&body)
        .with_context(|| format!("{addr} sent a cluster view that does not parse"))
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

/// What a test terminal shows, as one string.
#[cfg(test)]
pub(crate) fn screen(terminal: &ratatui::Terminal<ratatui::backend::TestBackend>) -> String {
    terminal
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|cell| cell.symbol())
        .collect()
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
        let text = plain(&report, &Window::new(Duration::from_secs(10)));
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
        let text = plain(&cluster_report(), &Window::new(Duration::from_secs(10)));
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
        let text = plain(
            &PeriodReport::default(),
            &Window::new(Duration::from_secs(10)),
        );
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
            &Window::new(Duration::from_secs(10)),
        );
        assert!(!one.contains("no monitored actors"), "{one}");
    }

    #[test]
    fn a_report_without_cluster_figures_has_no_cluster_sections() {
        let text = plain(
            &PeriodReport::default(),
            &Window::new(Duration::from_secs(10)),
        );
        assert!(!text.contains("act/s"), "{text}");
        assert!(!text.contains("members up"), "{text}");
    }

    #[test]
    fn the_live_view_shows_the_kinds_and_the_cluster() {
        let backend = ratatui::backend::TestBackend::new(160, 40);
        let mut terminal = ratatui::Terminal::new(backend).unwrap();
        let report = Ok(cluster_report());
        terminal
            .draw(|frame| {
                let window = Window::new(Duration::from_secs(10));
                draw(frame, "127.0.0.1:1".parse().unwrap(), &report, &window)
            })
            .unwrap();
        let screen = screen(&terminal);
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
            .draw(|frame| {
                let window = Window::new(Duration::from_secs(10));
                draw(frame, "127.0.0.1:1".parse().unwrap(), &report, &window)
            })
            .unwrap();
        let screen = screen(&terminal);
        assert!(screen.contains("rally top"));
        assert!(screen.contains("no monitored actors"));
    }
}
