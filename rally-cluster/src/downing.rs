//! Split-brain resolution: which side of a partition survives.
//!
//! A decision is a pure function of a *stable* view (the same members with the same
//! reachability for `stable-after`): [`decide`] takes the strategy and the view, and says
//! whether this member's side downs the unreachable members or downs itself. Every member
//! runs the same function over the same (gossiped) view, so both sides of a partition reach
//! complementary decisions without talking to each other. The timing rules that make this
//! safe are in `docs/cluster-protocol.md`.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::member::MemberId;

/// How a partition is resolved.
///
/// # Example
///
/// ```
/// use rally::cluster::DowningStrategy;
///
/// assert_eq!(DowningStrategy::default(), DowningStrategy::KeepMajority);
/// let strategy: DowningStrategy = toml::from_str::<toml::Table>(
///     "s = { static-quorum = { quorum-size = 3 } }",
/// ).unwrap()["s"].clone().try_into().unwrap();
/// assert_eq!(strategy, DowningStrategy::StaticQuorum { quorum_size: 3 });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case")]
#[non_exhaustive]
pub enum DowningStrategy {
    /// The side with more than half of the members survives; on an exact tie, the side with
    /// the member of lowest address. The default: right for any cluster whose size changes,
    /// and it needs no setting.
    #[default]
    KeepMajority,
    /// The side with at least `quorum_size` members survives. If the cluster has grown past
    /// `2 * quorum_size - 1` members, two sides could both reach the quorum, so every member
    /// downs itself instead.
    StaticQuorum {
        /// Members a side needs to survive.
        quorum_size: usize,
    },
    /// The side with the oldest member survives (where a singleton lives). With
    /// `down_if_alone`, an oldest member cut off alone from a side of two or more downs
    /// itself, so one crashed-looking node cannot take the whole cluster down. With `role`,
    /// only members with that role count (the oldest of the role, where a singleton of that
    /// role lives; "alone" among the members of the role); with no member of the role in the
    /// view, every member counts.
    ///
    /// ```
    /// use rally::cluster::DowningStrategy;
    ///
    /// let strategy: DowningStrategy = toml::from_str::<toml::Table>(
    ///     "s = { keep-oldest = { down-if-alone = true, role = \"backend\" } }",
    /// ).unwrap()["s"].clone().try_into().unwrap();
    /// assert_eq!(
    ///     strategy,
    ///     DowningStrategy::KeepOldest { down_if_alone: true, role: Some("backend".into()) },
    /// );
    /// ```
    KeepOldest {
        /// Whether the oldest member alone on its side gives way.
        down_if_alone: bool,
        /// Only members with this role count (none: every member).
        #[serde(default)]
        role: Option<String>,
    },
    /// Any partition downs every member: safe when a restart is cheaper than any risk.
    DownAll,
    /// A member is down when its lease in etcd expires, and it downs itself before that can
    /// happen if it cannot renew it: etcd is the arbiter, so a partition between members
    /// downs nobody, and a member cut off from etcd downs itself. Only the etcd provider
    /// runs it (feature `etcd`); the gossip and in-memory providers refuse it.
    Lease,
}

/// One member of the view a decision is taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewMember {
    /// Its identity.
    pub id: MemberId,
    /// Whether this member reaches it (this member itself is always reachable).
    pub reachable: bool,
}

/// What this member does about a stable view with unreachable members.
///
/// # Example
///
/// ```
/// use rally::cluster::{decide, Decision, DowningStrategy, MemberId, ViewMember};
/// use rally::remote::Incarnation;
///
/// let member = |port, reachable| ViewMember {
///     id: MemberId::new(format!("rally://c@h:{port}").parse().unwrap(), Incarnation(1), 1),
///     reachable,
/// };
/// // Three of five reachable: this side keeps the cluster and downs the other two.
/// let view = [member(1, true), member(2, true), member(3, true), member(4, false), member(5, false)];
/// match decide(&DowningStrategy::KeepMajority, &view) {
///     Decision::DownUnreachable(down) => assert_eq!(down.len(), 2),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Nobody is unreachable: nothing to do.
    Nothing,
    /// This side survives: down these (the unreachable members).
    DownUnreachable(Vec<MemberId>),
    /// This side loses: every member on it downs itself.
    DownSelf,
    /// Every member, on both sides, downs itself.
    DownAll,
}

/// The decision `strategy` takes for the member whose view this is.
///
/// `view` lists every member that is joining, up or leaving (not down, not removed),
/// including the deciding member itself, with its reachability as this member sees it.
/// The function is pure and deterministic: members with the same view decide the same.
///
/// # Example
///
/// ```
/// use rally::cluster::{decide, Decision, DowningStrategy, MemberId, ViewMember};
/// use rally::remote::Incarnation;
///
/// let member = |port: u16, reachable| ViewMember {
///     id: MemberId::new(format!("rally://c@h:{port}").parse().unwrap(), Incarnation(1), 1),
///     reachable,
/// };
/// // Two of four, and the lowest address (port 1) is on the other side: this side loses.
/// let view = [member(1, false), member(2, false), member(3, true), member(4, true)];
/// assert_eq!(decide(&DowningStrategy::KeepMajority, &view), Decision::DownSelf);
/// ```
pub fn decide(strategy: &DowningStrategy, view: &[ViewMember]) -> Decision {
    let unreachable: Vec<MemberId> = view
        .iter()
        .filter(|m| !m.reachable)
        .map(|m| m.id.clone())
        .collect();
    if unreachable.is_empty() {
        return Decision::Nothing;
    }
    let total = view.len();
    let reachable = total - unreachable.len();
    let survive = match strategy {
        DowningStrategy::KeepMajority => match (reachable * 2).cmp(&total) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => view
                .iter()
                .min_by(|a, b| a.id.address.cmp(&b.id.address))
                .is_some_and(|lowest| lowest.reachable),
        },
        DowningStrategy::StaticQuorum { quorum_size } => {
            if total > (2 * quorum_size).saturating_sub(1) {
                return Decision::DownAll;
            }
            reachable >= *quorum_size
        }
        DowningStrategy::KeepOldest {
            down_if_alone,
            role,
        } => {
            let of_role = |m: &&ViewMember| role.as_deref().is_none_or(|r| m.id.has_role(r));
            let counted: Vec<&ViewMember> = if view.iter().any(|m| of_role(&m)) {
                view.iter().filter(of_role).collect()
            } else {
                view.iter().collect()
            };
            let Some(oldest) = counted.iter().min_by(|a, b| a.id.age_order(&b.id)) else {
                return Decision::Nothing;
            };
            let near = counted.iter().filter(|m| m.reachable).count();
            let far = counted.len() - near;
            if oldest.reachable {
                !(*down_if_alone && near == 1 && far > 1)
            } else {
                *down_if_alone && far == 1 && near > 1
            }
        }
        DowningStrategy::DownAll => return Decision::DownAll,
        // Leases decide, not views (the etcd provider); a SWIM view never downs anyone.
        DowningStrategy::Lease => return Decision::Nothing,
    };
    if survive {
        Decision::DownUnreachable(unreachable)
    } else {
        Decision::DownSelf
    }
}

#[cfg(test)]
mod tests {
    use rally_remote::{Incarnation, NodeAddress};

    use super::*;

    /// Member `port`, joined at `generation`.
    fn m(port: u16, generation: u64, reachable: bool) -> ViewMember {
        ViewMember {
            id: MemberId::new(
                NodeAddress {
                    system: "c".into(),
                    host: "10.0.0.1".into(),
                    port,
                },
                Incarnation(u64::from(port)),
                generation,
            ),
            reachable,
        }
    }

    fn downs(decision: Decision) -> Vec<u16> {
        match decision {
            Decision::DownUnreachable(ids) => ids.iter().map(|id| id.address.port).collect(),
            other => panic!("expected to survive, got {other:?}"),
        }
    }

    /// The two sides of a split decide complementarily: exactly one survives.
    fn sides(
        strategy: DowningStrategy,
        a: &[(u16, u64)],
        b: &[(u16, u64)],
    ) -> (Decision, Decision) {
        let view = |ours: &[(u16, u64)], theirs: &[(u16, u64)]| {
            let mut v: Vec<ViewMember> = ours.iter().map(|&(p, g)| m(p, g, true)).collect();
            v.extend(theirs.iter().map(|&(p, g)| m(p, g, false)));
            v
        };
        (
            decide(&strategy, &view(a, b)),
            decide(&strategy, &view(b, a)),
        )
    }

    #[test]
    fn nothing_to_decide_without_unreachable_members() {
        let view = [m(1, 1, true), m(2, 2, true)];
        for strategy in [
            DowningStrategy::KeepMajority,
            DowningStrategy::StaticQuorum { quorum_size: 2 },
            DowningStrategy::KeepOldest {
                down_if_alone: true,
                role: None,
            },
            DowningStrategy::DownAll,
        ] {
            assert_eq!(decide(&strategy, &view), Decision::Nothing, "{strategy:?}");
        }
    }

    #[test]
    fn keep_majority_keeps_the_larger_side() {
        let (three, two) = sides(
            DowningStrategy::KeepMajority,
            &[(1, 1), (2, 2), (3, 3)],
            &[(4, 4), (5, 5)],
        );
        assert_eq!(downs(three), vec![4, 5]);
        assert_eq!(two, Decision::DownSelf);
    }

    #[test]
    fn keep_majority_breaks_a_tie_by_the_lowest_address() {
        // Port 2 is the lowest address; it is on side B, whatever the ages.
        let (a, b) = sides(
            DowningStrategy::KeepMajority,
            &[(7, 1), (9, 2)],
            &[(2, 3), (8, 4)],
        );
        assert_eq!(a, Decision::DownSelf);
        assert_eq!(downs(b), vec![7, 9]);
        // Two members, one unreachable: the one with the lower address stays.
        let (low, high) = sides(DowningStrategy::KeepMajority, &[(1, 9)], &[(2, 1)]);
        assert_eq!(downs(low), vec![2]);
        assert_eq!(high, Decision::DownSelf);
    }

    #[test]
    fn keep_majority_alone_among_many_downs_itself() {
        let (alone, rest) = sides(
            DowningStrategy::KeepMajority,
            &[(1, 1)],
            &[(2, 2), (3, 3), (4, 4), (5, 5)],
        );
        assert_eq!(alone, Decision::DownSelf);
        assert_eq!(downs(rest), vec![1]);
    }

    #[test]
    fn static_quorum_needs_the_quorum() {
        let strategy = DowningStrategy::StaticQuorum { quorum_size: 3 };
        let (three, two) = sides(
            strategy.clone(),
            &[(1, 1), (2, 2), (3, 3)],
            &[(4, 4), (5, 5)],
        );
        assert_eq!(downs(three), vec![4, 5]);
        assert_eq!(two, Decision::DownSelf);
        // 2 | 2 of 4 with quorum 3: nobody reaches it, both sides down themselves.
        let (a, b) = sides(strategy, &[(1, 1), (2, 2)], &[(3, 3), (4, 4)]);
        assert_eq!((a, b), (Decision::DownSelf, Decision::DownSelf));
    }

    #[test]
    fn static_quorum_downs_all_when_the_cluster_outgrew_it() {
        // Six members with quorum 3: 3 | 3 could both survive, so nobody does.
        let strategy = DowningStrategy::StaticQuorum { quorum_size: 3 };
        let (a, b) = sides(
            strategy,
            &[(1, 1), (2, 2), (3, 3)],
            &[(4, 4), (5, 5), (6, 6)],
        );
        assert_eq!((a, b), (Decision::DownAll, Decision::DownAll));
    }

    #[test]
    fn keep_oldest_keeps_the_side_of_the_oldest_even_in_minority() {
        let strategy = DowningStrategy::KeepOldest {
            down_if_alone: true,
            role: None,
        };
        // The oldest (generation 1, port 9) is with one other member against three.
        let (small, large) = sides(strategy, &[(9, 1), (2, 5)], &[(3, 2), (4, 3), (5, 4)]);
        assert_eq!(downs(small), vec![3, 4, 5]);
        assert_eq!(large, Decision::DownSelf);
    }

    #[test]
    fn keep_oldest_alone_gives_way_only_with_down_if_alone() {
        let oldest_alone = [(1, 1)];
        let others = [(2, 2), (3, 3), (4, 4)];
        let (alone, rest) = sides(
            DowningStrategy::KeepOldest {
                down_if_alone: true,
                role: None,
            },
            &oldest_alone,
            &others,
        );
        assert_eq!(alone, Decision::DownSelf);
        assert_eq!(downs(rest), vec![1]);
        let (alone, rest) = sides(
            DowningStrategy::KeepOldest {
                down_if_alone: false,
                role: None,
            },
            &oldest_alone,
            &others,
        );
        assert_eq!(downs(alone), vec![2, 3, 4]);
        assert_eq!(rest, Decision::DownSelf);
        // One against one: "alone" means against two or more, so the oldest stays.
        let (old, young) = sides(
            DowningStrategy::KeepOldest {
                down_if_alone: true,
                role: None,
            },
            &[(5, 1)],
            &[(1, 2)],
        );
        assert_eq!(downs(old), vec![1]);
        assert_eq!(young, Decision::DownSelf);
    }

    #[test]
    fn keep_oldest_orders_equal_generations_by_address() {
        let strategy = DowningStrategy::KeepOldest {
            down_if_alone: false,
            role: None,
        };
        let (a, b) = sides(strategy, &[(3, 7), (4, 7)], &[(2, 7), (5, 7)]);
        assert_eq!(a, Decision::DownSelf);
        assert_eq!(downs(b), vec![3, 4]);
    }

    /// Member `port`, joined at `generation`, with role `backend`.
    fn backend(port: u16, generation: u64, reachable: bool) -> ViewMember {
        let mut member = m(port, generation, reachable);
        member.id = member.id.with_roles(["backend"]);
        member
    }

    fn backend_oldest(down_if_alone: bool) -> DowningStrategy {
        DowningStrategy::KeepOldest {
            down_if_alone,
            role: Some("backend".into()),
        }
    }

    #[test]
    fn keep_oldest_of_a_role_keeps_the_side_of_the_oldest_member_with_it() {
        // The oldest member overall (port 1) has no role; the oldest backend (port 4) is on
        // the other side, which survives.
        let side_a = [m(1, 1, true), m(2, 2, true), backend(3, 5, true)];
        let side_b = [backend(4, 3, true), backend(5, 4, true)];
        let flip = |side: &[ViewMember]| {
            side.iter()
                .map(|member| ViewMember {
                    reachable: !member.reachable,
                    ..member.clone()
                })
                .collect::<Vec<_>>()
        };
        let view_a: Vec<ViewMember> = side_a.iter().cloned().chain(flip(&side_b)).collect();
        let view_b: Vec<ViewMember> = side_b.iter().cloned().chain(flip(&side_a)).collect();
        let strategy = backend_oldest(false);
        assert_eq!(decide(&strategy, &view_a), Decision::DownSelf);
        assert_eq!(downs(decide(&strategy, &view_b)), vec![1, 2, 3]);
        // Without the role, the oldest overall decides: the other way round.
        let plain = DowningStrategy::KeepOldest {
            down_if_alone: false,
            role: None,
        };
        assert_eq!(downs(decide(&plain, &view_a)), vec![4, 5]);
        assert_eq!(decide(&plain, &view_b), Decision::DownSelf);
    }

    #[test]
    fn keep_oldest_of_a_role_counts_alone_among_the_members_with_it() {
        // The oldest backend is the only backend on its side (with two members of no role),
        // against two backends: alone among the backends, it gives way with down-if-alone.
        let view = [
            backend(1, 1, true),
            m(2, 2, true),
            m(3, 3, true),
            backend(4, 4, false),
            backend(5, 5, false),
        ];
        assert_eq!(decide(&backend_oldest(true), &view), Decision::DownSelf);
        assert_eq!(downs(decide(&backend_oldest(false), &view)), vec![4, 5]);
    }

    #[test]
    fn keep_oldest_of_a_role_no_member_has_counts_every_member() {
        let view = [m(1, 1, true), m(2, 2, false), m(3, 3, false)];
        assert_eq!(downs(decide(&backend_oldest(false), &view)), vec![2, 3]);
    }

    #[test]
    fn down_all_downs_everyone() {
        let (a, b) = sides(
            DowningStrategy::DownAll,
            &[(1, 1), (2, 2), (3, 3)],
            &[(4, 4)],
        );
        assert_eq!((a, b), (Decision::DownAll, Decision::DownAll));
    }

    proptest::proptest! {
        /// For keep-majority and keep-oldest, on any clean split, exactly one side survives.
        #[test]
        fn exactly_one_side_survives_a_clean_split(
            generations in proptest::collection::vec(0u64..5, 2..9),
            split in proptest::collection::vec(proptest::bool::ANY, 9),
            down_if_alone in proptest::bool::ANY,
            roles in proptest::collection::vec(proptest::bool::ANY, 9),
        ) {
            let members: Vec<(u16, u64)> = generations
                .iter()
                .enumerate()
                .map(|(i, &g)| (u16::try_from(i).expect("fewer than 9") + 1, g))
                .collect();
            let (a, b): (Vec<_>, Vec<_>) = members.iter().partition(|(p, _)| split[usize::from(*p)]);
            proptest::prop_assume!(!a.is_empty() && !b.is_empty());
            for strategy in [
                DowningStrategy::KeepMajority,
                DowningStrategy::KeepOldest { down_if_alone, role: None },
                backend_oldest(down_if_alone),
            ] {
                let with_roles = |side: &[&(u16, u64)], reachable: bool| -> Vec<ViewMember> {
                    side.iter()
                        .map(|&&(p, g)| {
                            if roles[usize::from(p) - 1] { backend(p, g, reachable) } else { m(p, g, reachable) }
                        })
                        .collect()
                };
                let view_a: Vec<ViewMember> =
                    with_roles(&a, true).into_iter().chain(with_roles(&b, false)).collect();
                let view_b: Vec<ViewMember> =
                    with_roles(&b, true).into_iter().chain(with_roles(&a, false)).collect();
                let (da, db) = (decide(&strategy, &view_a), decide(&strategy, &view_b));
                let survivors = [da, db]
                    .iter()
                    .filter(|d| matches!(d, Decision::DownUnreachable(_)))
                    .count();
                proptest::prop_assert_eq!(survivors, 1, "{:?} {:?} | {:?}", strategy, a, b);
            }
        }
    }
}
