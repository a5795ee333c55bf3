//! The serving member: every second it asks every member in its view for its figures (through
//! their `rally.dashboard.figures` endpoints, on Rally's own connections), keeps the last
//! minutes of them, and serves the page, its fragment, the JSON view, the active-identity
//! listing and the vendored chart library over HTTP.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CACHE_CONTROL, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rally_actor::sync::Mutex;
use rally_cluster::virtual_actors::{ActiveCursor, ActiveError, ActivePage, MAX_ACTIVE_PAGE};
use rally_cluster::{Cluster, MemberStatus};
use rally_remote::RemoteNode;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::member::{ENDPOINT, Figures, FiguresRequest, PERIOD};
use super::page::{self, listing};
use super::view::{Charts, ClusterView, KindView, MemberView};
use super::{Dashboard, DashboardError};
use crate::prometheus::respond;

/// How long the charts reach back: five minutes of one point a second.
const HISTORY: usize = 300;

/// How long a member has to answer: less than the period, so one slow member never delays
/// the next gathering.
const ASK_TIMEOUT: Duration = Duration::from_millis(900);

/// How long a listing waits for each member.
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// The page size of a listing asked for without one.
const DEFAULT_PAGE: usize = 100;

const UPLOT_JS: &str = include_str!("assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("assets/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("assets/LICENSE-uPlot");
const PAGE_JS: &str = include_str!("assets/dashboard.js");
const PAGE_CSS: &str = include_str!("assets/dashboard.css");

pub(crate) async fn serve(
    cluster: &Cluster,
    node: &RemoteNode,
    addr: SocketAddr,
) -> Result<Dashboard, DashboardError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| DashboardError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| DashboardError::Bind { addr, source })?;
    // Exposed already (`expose` called before `serve`): that endpoint answers.
    match super::member::expose(node) {
        Ok(()) | Err(DashboardError::AlreadyExposed) => {}
        Err(e) => return Err(e),
    }
    let view = Arc::new(Mutex::new(ClusterView {
        served_by: cluster.self_member().id.to_string(),
        ..ClusterView::default()
    }));
    let gatherer = tokio::spawn(gather(cluster.clone(), node.clone(), Arc::clone(&view)));
    let state = Arc::new(State {
        cluster: cluster.clone(),
        view: Arc::clone(&view),
    });
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors and the like: wait instead of spinning on the error.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let state = Arc::clone(&state);
            let service = service_fn(move |request: Request<Incoming>| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(state.answer(&request).await) }
            });
            tokio::spawn(async move {
                // A client that hangs up or speaks garbage ends only its own connection.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(Dashboard {
        addr: local,
        view,
        tasks: [gatherer.abort_handle(), server.abort_handle()],
    })
}

/// What the HTTP side reads.
struct State {
    cluster: Cluster,
    view: Arc<Mutex<ClusterView>>,
}

impl State {
    async fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        let query = request.uri().query().unwrap_or("");
        match request.uri().path() {
            "/" => html(page::page(&self.view.lock())),
            "/fragment" => html(page::fragment(&self.view.lock())),
            "/api/cluster" => json(StatusCode::OK, serde_json::to_string(&*self.view.lock())),
            "/api/active" => match self.list(query).await {
                Ok(page) => json(
                    StatusCode::OK,
                    serde_json::to_string(&ActiveJson::from(&page)),
                ),
                Err(why) => json(
                    StatusCode::BAD_REQUEST,
                    serde_json::to_string(&serde_json::json!({ "error": why })),
                ),
            },
            "/active" => {
                let kind = param(query, "kind").unwrap_or_default();
                let listed = self.list(query).await;
                let page = listed.as_ref().map(listing_of).map_err(Clone::clone);
                let limit = param(query, "limit").unwrap_or_else(|| DEFAULT_PAGE.to_string());
                html(page::active_page(
                    &kind,
                    &limit,
                    page.as_ref().map_err(Clone::clone),
                ))
            }
            "/assets/uPlot.iife.min.js" => asset("text/javascript", UPLOT_JS),
            "/assets/uPlot.min.css" => asset("text/css", UPLOT_CSS),
            "/assets/LICENSE-uPlot" => asset("text/plain", UPLOT_LICENSE),
            "/assets/dashboard.js" => asset("text/javascript", PAGE_JS),
            "/assets/dashboard.css" => asset("text/css", PAGE_CSS),
            _ => respond(
                StatusCode::NOT_FOUND,
                "text/plain",
                "try /, /api/cluster or /api/active?kind=<kind>\n".to_owned(),
            ),
        }
    }

    /// A page of the listing the query asks for (`kind`, `cursor`, `limit`), or why not (an
    /// [`ActiveError`]'s words, or a limit that is not a number).
    async fn list(&self, query: &str) -> Result<ActivePage, String> {
        let kind = param(query, "kind").unwrap_or_default();
        let cursor = param(query, "cursor")
            .filter(|c| !c.is_empty())
            .map(|c| c.parse::<ActiveCursor>())
            .transpose()
            .map_err(|e| e.to_string())?;
        let limit = match param(query, "limit") {
            None => DEFAULT_PAGE,
            Some(text) => text.parse().map_err(|_| {
                format!(
                    "the limit is a number of identities from 1 to {MAX_ACTIVE_PAGE}, not {text:?}"
                )
            })?,
        };
        let grains = self
            .cluster
            .virtual_actors()
            .ok_or_else(|| ActiveError::NotStarted.to_string())?;
        grains
            .active_in_cluster(&kind, cursor.as_ref(), limit, LIST_TIMEOUT)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The listing as `/api/active` answers it.
#[derive(serde::Serialize)]
struct ActiveJson {
    identities: Vec<serde_json::Value>,
    next: Option<String>,
    skipped: Vec<(String, String)>,
}

impl From<&ActivePage> for ActiveJson {
    fn from(page: &ActivePage) -> Self {
        Self {
            identities: page
                .identities
                .iter()
                .map(|a| {
                    serde_json::json!({
                        "kind": a.kind,
                        "identity": a.identity,
                        "member": a.member,
                        "age_s": a.age.as_secs_f64(),
                        "last_message_s": a.last_message.as_secs_f64(),
                        "busy": a.busy,
                        "queued": a.queued,
                    })
                })
                .collect(),
            next: page.next.as_ref().map(ToString::to_string),
            skipped: page.skipped.clone(),
        }
    }
}

fn listing_of(page: &ActivePage) -> listing::Listing {
    listing::Listing {
        identities: page
            .identities
            .iter()
            .map(|a| listing::Identity {
                identity: a.identity.clone(),
                member: a.member.clone(),
                age_s: a.age.as_secs_f64(),
                last_message_s: a.last_message.as_secs_f64(),
                busy: a.busy,
                queued: a.queued,
            })
            .collect(),
        next: page.next.as_ref().map(ToString::to_string),
        skipped: page.skipped.clone(),
    }
}

/// Every period: every member's figures into the view, and a point on the charts.
async fn gather(cluster: Cluster, node: RemoteNode, view: Arc<Mutex<ClusterView>>) {
    let mut history: VecDeque<(f64, BTreeMap<String, Point>)> = VecDeque::with_capacity(HISTORY);
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let served_by = cluster.self_member().id.to_string();
    while !node.system().is_shutting_down() {
        ticks.tick().await;
        let mut asks = JoinSet::new();
        let mut members: Vec<MemberView> = Vec::new();
        for (i, member) in cluster.members().into_iter().enumerate() {
            members.push(MemberView {
                member: member.id.to_string(),
                status: status_word(member.status).to_owned(),
                reachable: member.reachable,
                figures: None,
                error: None,
            });
            if matches!(member.status, MemberStatus::Down | MemberStatus::Removed) {
                members[i].error = Some("not asked: the member is out of the cluster".into());
                continue;
            }
            let endpoint = node.lookup::<Figures>(&member.id.address, ENDPOINT);
            asks.spawn(async move { (i, endpoint.ask(FiguresRequest, ASK_TIMEOUT).await) });
        }
        while let Some(done) = asks.join_next().await {
            let Ok((i, answer)) = done else { continue };
            match answer {
                Ok(figures) => members[i].figures = Some(figures),
                Err(e) => {
                    members[i].error = Some(format!(
                        "{e} (is rally::metrics::dashboard::expose called on that member?)"
                    ));
                }
            }
        }
        members.sort_by(|a, b| a.member.cmp(&b.member));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if history.len() == HISTORY {
            history.pop_front();
        }
        history.push_back((now, points(&members)));
        let kinds = KindView::totals(&members);
        *view.lock() = ClusterView {
            served_by: served_by.clone(),
            members,
            kinds,
            charts: charts(&history),
        };
    }
}

/// One member's values at one gathering.
#[derive(Clone, Copy)]
struct Point {
    calls_per_sec: f64,
    messages_per_sec: f64,
    p99_ms: Option<f64>,
    queued: f64,
}

fn points(members: &[MemberView]) -> BTreeMap<String, Point> {
    members
        .iter()
        .filter_map(|m| {
            let f = m.figures.as_ref()?;
            Some((
                m.member.clone(),
                Point {
                    calls_per_sec: f.calls_per_sec(),
                    messages_per_sec: f.messages_per_sec,
                    p99_ms: f.p99_ms(),
                    // A count of messages, exact in an f64.
                    queued: f.queued as f64,
                },
            ))
        })
        .collect()
}

/// The series of every member seen in the history, aligned on the gatherings.
fn charts(history: &VecDeque<(f64, BTreeMap<String, Point>)>) -> Charts {
    let mut names: Vec<String> = history
        .iter()
        .flat_map(|(_, points)| points.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    let series = |value: fn(&Point) -> Option<f64>| -> Vec<Vec<Option<f64>>> {
        names
            .iter()
            .map(|name| {
                history
                    .iter()
                    .map(|(_, points)| points.get(name).and_then(value))
                    .collect()
            })
            .collect()
    };
    Charts {
        at: history.iter().map(|(at, _)| *at).collect(),
        calls_per_sec: series(|p| Some(p.calls_per_sec)),
        messages_per_sec: series(|p| Some(p.messages_per_sec)),
        p99_ms: series(|p| p.p99_ms),
        queued: series(|p| Some(p.queued)),
        members: names,
    }
}

fn status_word(status: MemberStatus) -> &'static str {
    match status {
        MemberStatus::Joining => "joining",
        MemberStatus::Up => "up",
        MemberStatus::Leaving => "leaving",
        MemberStatus::Down => "down",
        MemberStatus::Removed => "removed",
        _ => "unknown",
    }
}

/// The value of `name` in a query string, percent-decoded (`+` is a space).
fn param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| decode(value))
    })
}

/// Percent-decoding of a query value; a malformed escape is kept as it is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn html(body: String) -> Response<Full<Bytes>> {
    respond(StatusCode::OK, "text/html; charset=utf-8", body)
}

fn json(status: StatusCode, body: serde_json::Result<String>) -> Response<Full<Bytes>> {
    respond(status, "application/json", body.unwrap_or_default())
}

fn asset(kind: &'static str, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = respond(StatusCode::OK, kind, String::new());
    *response.body_mut() = Full::new(Bytes::from_static(body.as_bytes()));
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_found_and_decoded() {
        let query = "kind=cart&cursor=3%40rally%3A%2F%2Fa%40h%3A1%232&limit=5&x=a+b%zz";
        assert_eq!(param(query, "kind").as_deref(), Some("cart"));
        assert_eq!(param(query, "cursor").as_deref(), Some("3@rally://a@h:1#2"));
        assert_eq!(param(query, "limit").as_deref(), Some("5"));
        assert_eq!(
            param(query, "x").as_deref(),
            Some("a b%zz"),
            "a bad escape stays"
        );
        assert_eq!(param(query, "missing"), None);
    }

    #[test]
    fn the_charts_align_every_members_series_on_the_gatherings() {
        let point = |calls| Point {
            calls_per_sec: calls,
            messages_per_sec: 0.0,
            p99_ms: None,
            queued: 1.0,
        };
        let history: VecDeque<_> = [
            (1.0, [("a".to_owned(), point(5.0))].into_iter().collect()),
            (
                2.0,
                [("a".to_owned(), point(6.0)), ("b".to_owned(), point(7.0))]
                    .into_iter()
                    .collect(),
            ),
        ]
        .into_iter()
        .collect();
        let charts = charts(&history);
        assert_eq!(charts.members, ["a", "b"]);
        assert_eq!(charts.at, [1.0, 2.0]);
        assert_eq!(
            charts.calls_per_sec,
            [vec![Some(5.0), Some(6.0)], vec![None, Some(7.0)]]
        );
        assert_eq!(charts.p99_ms, [vec![None, None], vec![None, None]]);
    }
}
