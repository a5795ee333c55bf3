//! The cluster's figures for observers: membership and virtual actors, read from the counters
//! they already keep and handed to the actor system's monitor, so that any observer (the
//! Prometheus endpoint of `rally-metrics`, `rally top`) exports them without depending on this
//! crate. Names and labels are listed in `docs/cluster.md` ("Observability").

use std::sync::{Arc, Weak};

use rally_actor::ActorSystem;
use rally_actor::monitor::{Figure, FigureSource};

use crate::member::MemberStatus;
use crate::provider::Shared;
use crate::virtual_actors::Runtime;

/// The statuses counted in `rally_cluster_members`, each reported even when no member has it,
/// so a dashboard sees a zero rather than a missing series. `Removed` members are no longer in
/// the view.
const STATUSES: [(MemberStatus, &str); 4] = [
    (MemberStatus::Joining, "joining"),
    (MemberStatus::Up, "up"),
    (MemberStatus::Leaving, "leaving"),
    (MemberStatus::Down, "down"),
];

/// Registers `source` with `system`'s monitor for as long as it lives.
pub(crate) fn register<S: FigureSource>(system: &ActorSystem, source: &Arc<S>) {
    let weak: Weak<S> = Arc::downgrade(source);
    system.monitor().add_source(weak);
}

impl FigureSource for Shared {
    fn figures(&self, out: &mut Vec<Figure>) {
        let (member, members, stats) = {
            let state = self.state();
            (
                state.local.id.address.to_string(),
                state
                    .members
                    .iter()
                    .map(|m| (m.status, m.reachable))
                    .collect::<Vec<_>>(),
                state.stats,
            )
        };
        for (status, name) in STATUSES {
            let count = members.iter().filter(|(s, _)| *s == status).count();
            out.push(
                Figure::gauge(
                    "rally_cluster_members",
                    "Members this member sees, by status (itself included).",
                    count as f64,
                )
                .label("member", member.clone())
                .label("status", name),
            );
        }
        out.push(
            Figure::gauge(
                "rally_cluster_downed",
                "1 once the cluster downed this member (it serves no more), else 0.",
                f64::from(u8::from(*self.downed.borrow())),
            )
            .label("member", member.clone()),
        );
        let unreachable = members
            .iter()
            .filter(|(s, reachable)| !reachable && *s != MemberStatus::Down)
            .count();
        out.push(
            Figure::gauge(
                "rally_cluster_members_unreachable",
                "Members not down that this member cannot reach now.",
                unreachable as f64,
            )
            .label("member", member.clone()),
        );
        let counters = [
            (
                "rally_cluster_membership_packets_received_total",
                "Membership packets (or etcd updates) handed in.",
                stats.packets_in,
            ),
            (
                "rally_cluster_membership_packets_sent_total",
                "Membership packets handed out.",
                stats.packets_out,
            ),
            (
                "rally_cluster_membership_bytes_received_total",
                "Bytes of the membership packets handed in.",
                stats.bytes_in,
            ),
            (
                "rally_cluster_membership_bytes_sent_total",
                "Bytes of the membership packets handed out.",
                stats.bytes_out,
            ),
            (
                "rally_cluster_downing_decisions_total",
                "Downing decisions taken by this member.",
                stats.decisions,
            ),
        ];
        for (name, help, value) in counters {
            out.push(Figure::counter(name, help, value).label("member", member.clone()));
        }
        for (reason, value) in [
            ("malformed", stats.malformed),
            ("forged", stats.forged),
            ("impossible-transition", stats.impossible),
            ("full", stats.full),
        ] {
            out.push(
                Figure::counter(
                    "rally_cluster_membership_dropped_total",
                    "Membership packets dropped, by reason.",
                    value,
                )
                .label("member", member.clone())
                .label("reason", reason),
            );
        }
    }
}

impl FigureSource for Runtime {
    fn figures(&self, out: &mut Vec<Figure>) {
        let member = self.local().address.to_string();
        for kind in self.stats() {
            let labelled = |figure: Figure| {
                figure
                    .label("member", member.clone())
                    .label("kind", kind.kind)
            };
            out.push(labelled(Figure::gauge(
                "rally_grain_active",
                "Virtual actors of the kind active on this member now.",
                kind.active as f64,
            )));
            out.push(labelled(Figure::gauge(
                "rally_grain_leases",
                "Leases (shards, or identities leased alone) of the kind this member holds now.",
                kind.leases as f64,
            )));
            let counters = [
                (
                    "rally_grain_activations_total",
                    "Activations started on this member.",
                    kind.activations,
                ),
                (
                    "rally_grain_deactivations_total",
                    "Activations ended on this member (idle, over the cap, moved, stopping).",
                    kind.deactivations,
                ),
                (
                    "rally_grain_failed_activations_total",
                    "Activations whose claim or activation hook failed.",
                    kind.failed_activations,
                ),
                (
                    "rally_grain_moves_total",
                    "Activations ended because their identity now belongs to another member.",
                    kind.moves,
                ),
                (
                    "rally_grain_forwarded_total",
                    "Messages passed on to another member instead of handled here.",
                    kind.forwarded,
                ),
            ];
            for (name, help, value) in counters {
                out.push(labelled(Figure::counter(name, help, value)));
            }
            // Cumulative, as a Prometheus histogram's buckets: calls within each bound.
            let mut within = 0;
            for (i, calls) in kind.call_times.iter().enumerate() {
                within += calls;
                let le = crate::virtual_actors::CALL_TIME_BOUNDS
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), |b| b.as_secs_f64().to_string());
                out.push(labelled(Figure::counter(
                    "rally_grain_calls_within_total",
                    "Calls handled on this member that took at most `le` seconds from being handed to their activation until it finished them.",
                    within,
                )).label("le", le));
            }
        }
    }
}
