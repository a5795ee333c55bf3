//! The cluster sections of the view: one row per virtual-actor kind, one line per member.

use rally_metrics::PeriodReport;

use super::window::Window;

/// One kind of virtual actor on one member, from the report's `rally_grain_*` figures.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct KindRow {
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
pub(super) struct MembershipRow {
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

/// The value and rate of figure `name` with `labels`, zero if the report has none: the rate
/// across `window` when it has one, else the node's over its last period.
fn figure(
    report: &PeriodReport,
    window: &Window,
    name: &str,
    labels: &[(&str, &str)],
) -> (f64, f64) {
    report
        .figures_named(name, labels)
        .next()
        .map_or((0.0, 0.0), |f| {
            let rate = window.rate(name, labels).or(f.rate);
            (f.value, rate.unwrap_or(0.0))
        })
}

/// A row per kind and member, sorted by kind then member.
pub(super) fn kind_rows(report: &PeriodReport, window: &Window) -> Vec<KindRow> {
    let mut rows: Vec<KindRow> = report
        .figures_named("rally_grain_active", &[])
        .map(|active| {
            let kind = active.label("kind").unwrap_or("?");
            let member = active.label("member").unwrap_or("?");
            let labels = [("kind", kind), ("member", member)];
            let get = |name| figure(report, window, name, &labels);
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
pub(super) fn membership_rows(report: &PeriodReport, window: &Window) -> Vec<MembershipRow> {
    report
        .figures_named("rally_cluster_members_unreachable", &[])
        .map(|unreachable| {
            let member = unreachable.label("member").unwrap_or("?");
            let labels = [("member", member)];
            let get = |name| figure(report, window, name, &labels);
            MembershipRow {
                member: member.to_owned(),
                statuses: STATUSES.map(|status| {
                    figure(
                        report,
                        window,
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
    pub(super) const HEADER: [&'static str; 8] = [
        "kind",
        "member",
        "active",
        "activations",
        "act/s",
        "deact/s",
        "moves",
        "forwarded",
    ];

    pub(super) fn cells(&self) -> [String; 8] {
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
    pub(super) fn line(&self) -> String {
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
