//! The dashboard's HTML, rendered on the server from a [`ClusterView`]: the page, the fragment
//! of tables the page fetches again every second, and a page of the active-identity listing.
//! The charts are drawn in the browser by uPlot (vendored, served from the binary) from
//! `/api/cluster`'s series.

use std::fmt::Write as _;

use super::view::{ClusterView, MemberFigures, MemberView};

/// The whole page, with the tables of `view` already in it.
pub(crate) fn page(view: &ClusterView) -> String {
    let mut out = String::with_capacity(16 * 1024);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<header><h1>Rally cluster</h1><span id=\"served\">served by {}</span>\
         <span id=\"updated\"></span></header>\n<main>\n",
        esc(&view.served_by)
    );
    out.push_str(CHARTS);
    out.push_str("<div id=\"tables\">");
    fragment_into(&mut out, view);
    out.push_str("</div>\n");
    out.push_str(
        "</main>\n<script src=\"/assets/uPlot.iife.min.js\"></script>\n\
         <script src=\"/assets/dashboard.js\"></script>\n</body>\n</html>\n",
    );
    out
}

/// The tables alone (members, kinds, then each member's dispatchers and hottest actors).
pub(crate) fn fragment(view: &ClusterView) -> String {
    let mut out = String::with_capacity(8 * 1024);
    fragment_into(&mut out, view);
    out
}

fn fragment_into(out: &mut String, view: &ClusterView) {
    let _ = write!(
        out,
        "<section><h2>Members <span class=\"count\" id=\"member-count\">{}</span></h2>\
         <table id=\"members\"><thead><tr><th>member</th><th>status</th><th>reachable</th>\
         <th>messages/s</th><th>grain calls/s</th><th>p99 call</th><th>grains active</th>\
         <th>queued</th><th>monitored actors</th><th>diagnosis</th></tr></thead><tbody>",
        view.members.len()
    );
    for m in &view.members {
        member_row(out, m);
    }
    out.push_str("</tbody></table></section>\n");

    out.push_str(
        "<section><h2>Virtual-actor kinds</h2><table id=\"kinds\"><thead><tr><th>kind</th>\
         <th>members</th><th>active</th><th>leases</th><th>activations/s</th><th>moves/s</th>\
         <th>calls/s</th><th>p99 call</th><th></th></tr></thead><tbody>",
    );
    for k in &view.kinds {
        let _ = write!(
            out,
            "<tr data-kind=\"{kind}\"><td>{kind}</td><td>{}</td><td class=\"active\">{}</td>\
             <td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td>\
             <td><a href=\"/active?kind={}\">what is active</a></td></tr>",
            k.members,
            k.active,
            k.leases,
            k.activations_per_sec,
            k.moves_per_sec,
            k.calls_per_sec,
            ms(k.p99_ms),
            query_escape(&k.kind),
            kind = esc(&k.kind),
        );
    }
    if view.kinds.is_empty() {
        out.push_str("<tr><td colspan=\"9\">no member reports a virtual-actor kind</td></tr>");
    }
    out.push_str("</tbody></table></section>\n");

    for m in &view.members {
        let Some(f) = &m.figures else { continue };
        member_detail(out, m, f);
    }
}

fn member_row(out: &mut String, m: &MemberView) {
    let status = esc(&m.status);
    let _ = write!(
        out,
        "<tr class=\"member {status}\" data-member=\"{name}\"><td>{name}</td><td>{status}</td><td>{}</td>",
        if m.reachable { "yes" } else { "no" },
        name = esc(&m.member),
    );
    match &m.figures {
        Some(f) => {
            let worst = f
                .hottest
                .first()
                .map(|a| format!("{}: {}", a.path, a.diagnosis.text))
                .unwrap_or_else(|| "no monitored actor".to_owned());
            let _ = write!(
                out,
                "<td>{:.0}</td><td>{:.1}</td><td>{}</td><td class=\"grains-active\">{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                f.messages_per_sec,
                f.calls_per_sec(),
                ms(f.p99_ms()),
                f.kinds.iter().map(|k| k.active).sum::<u64>(),
                f.queued,
                f.monitored_actors,
                esc(&worst)
            );
        }
        None => {
            let _ = write!(
                out,
                "<td colspan=\"7\" class=\"missing\">no figures: {}</td></tr>",
                esc(m.error.as_deref().unwrap_or("not asked"))
            );
        }
    }
}

fn member_detail(out: &mut String, m: &MemberView, f: &MemberFigures) {
    let _ = write!(
        out,
        "<section class=\"detail\"><h3>{}</h3><div class=\"pair\"><table class=\"dispatchers\">\
         <thead><tr><th>dispatcher</th><th>kind</th><th>threads</th><th>busy</th>\
         <th>utilization</th><th>waiting</th></tr></thead><tbody>",
        esc(&m.member)
    );
    for d in &f.dispatchers {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td><td>{}</td></tr>",
            esc(&d.name),
            esc(&d.kind),
            d.threads,
            d.busy_threads,
            d.utilization * 100.0,
            d.runnable_waiting
        );
    }
    out.push_str(
        "</tbody></table><table class=\"hottest\"><thead><tr><th>actor</th><th>msg/s</th>\
         <th>queue</th><th>utilization</th><th>service</th><th>wait</th><th>diagnosis</th>\
         </tr></thead><tbody>",
    );
    for a in &f.hottest {
        let _ = write!(
            out,
            "<tr class=\"{}\"><td>{}</td><td>{:.0}</td><td>{}</td><td>{:.0}%</td><td>{:.2} ms</td>\
             <td>{:.2} ms</td><td>{}</td></tr>",
            esc(a.diagnosis.verdict.words()).replace(' ', "-"),
            esc(&a.path),
            a.throughput,
            a.queue,
            a.utilization * 100.0,
            a.service_ms,
            a.waiting_ms,
            esc(&a.diagnosis.text)
        );
    }
    if f.hottest.is_empty() {
        out.push_str(
            "<tr><td colspan=\"7\">no monitored actor (Props::monitored, or \
             MonitoringConfig::all_actors)</td></tr>",
        );
    }
    out.push_str("</tbody></table></div></section>\n");
}

/// A page of the active-identity listing, with a link to the next.
pub(crate) fn active_page(
    kind: &str,
    limit: &str,
    page: Result<&listing::Listing, String>,
) -> String {
    let mut out = String::with_capacity(8 * 1024);
    out.push_str(HEAD);
    let _ = write!(
        out,
        "<header><h1>What is active: {}</h1><a href=\"/\">back to the cluster</a></header><main>",
        esc(kind)
    );
    match page {
        Err(why) => {
            let _ = write!(out, "<p class=\"error\">{}</p>", esc(&why));
        }
        Ok(listing) => {
            out.push_str(
                "<table id=\"active\"><thead><tr><th>identity</th><th>member</th><th>age</th>\
                 <th>last message</th><th>busy</th><th>queued</th></tr></thead><tbody>",
            );
            for a in &listing.identities {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{:.0} s</td><td>{:.1} s ago</td><td>{}</td>\
                     <td>{}</td></tr>",
                    esc(&a.identity),
                    esc(&a.member),
                    a.age_s,
                    a.last_message_s,
                    if a.busy { "yes" } else { "no" },
                    a.queued
                );
            }
            out.push_str("</tbody></table>");
            for (member, why) in &listing.skipped {
                let _ = write!(
                    out,
                    "<p class=\"error\">{} did not answer: {}</p>",
                    esc(member),
                    esc(why)
                );
            }
            if let Some(next) = &listing.next {
                let _ = write!(
                    out,
                    "<p><a id=\"next\" href=\"/active?kind={}&amp;limit={}&amp;cursor={}\">next \
                     page</a></p>",
                    query_escape(kind),
                    query_escape(limit),
                    query_escape(next)
                );
            }
        }
    }
    out.push_str("</main></body></html>\n");
    out
}

/// Milliseconds, or a dash when there is no figure.
fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("≤ {v} ms"))
}

/// Text safe inside HTML elements and quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text safe as a query value: everything but unreserved characters percent-encoded (then
/// HTML-safe too).
pub(crate) fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The listing as the page shows it (a plain copy, so this file needs nothing of the cluster).
pub(crate) mod listing {
    /// One page of a listing.
    pub(crate) struct Listing {
        pub(crate) identities: Vec<Identity>,
        pub(crate) next: Option<String>,
        pub(crate) skipped: Vec<(String, String)>,
    }

    /// One active identity.
    pub(crate) struct Identity {
        pub(crate) identity: String,
        pub(crate) member: String,
        pub(crate) age_s: f64,
        pub(crate) last_message_s: f64,
        pub(crate) busy: bool,
        pub(crate) queued: usize,
    }
}

const HEAD: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Rally cluster</title>
<link rel="stylesheet" href="/assets/uPlot.min.css">
<link rel="stylesheet" href="/assets/dashboard.css">
</head>
<body>
"#;

const CHARTS: &str = r#"<section id="charts">
<div class="chart" id="chart-calls" data-series="calls_per_sec" data-title="grain calls per second"></div>
<div class="chart" id="chart-p99" data-series="p99_ms" data-title="p99 grain call time (ms)"></div>
<div class="chart" id="chart-queued" data-series="queued" data-title="messages queued (monitored actors)"></div>
<div class="chart" id="chart-messages" data-series="messages_per_sec" data-title="messages per second (monitored actors)"></div>
</section>
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::view::{KindView, MemberView};

    #[test]
    fn text_from_members_is_escaped_and_query_values_are_encoded() {
        assert_eq!(esc("<b a=\"x\">&'"), "&lt;b a=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(
            query_escape("3@rally://a@h:1#2 x"),
            "3%40rally%3A%2F%2Fa%40h%3A1%232%20x"
        );
    }

    #[test]
    fn the_page_lists_every_member_and_kind_and_says_why_a_member_has_no_figures() {
        let view = ClusterView {
            served_by: "rally://c@h:1#1".into(),
            members: vec![
                MemberView {
                    member: "rally://c@h:1#1".into(),
                    status: "up".into(),
                    reachable: true,
                    figures: Some(MemberFigures::default()),
                    error: None,
                },
                MemberView {
                    member: "rally://c@h:2#<2>".into(),
                    status: "down".into(),
                    reachable: false,
                    figures: None,
                    error: Some("timed out".into()),
                },
            ],
            kinds: vec![KindView {
                kind: "cart".into(),
                members: 1,
                active: 42,
                ..KindView::default()
            }],
            ..ClusterView::default()
        };
        let html = page(&view);
        assert!(html.contains("data-member=\"rally://c@h:1#1\""));
        assert!(
            html.contains("data-member=\"rally://c@h:2#&lt;2&gt;\""),
            "escaped"
        );
        assert!(html.contains("no figures: timed out"));
        assert!(html.contains("<td class=\"active\">42</td>"));
        assert!(html.contains("/assets/uPlot.iife.min.js"));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "nothing from the network"
        );
    }
}
