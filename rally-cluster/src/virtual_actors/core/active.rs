//! What is active: a page of the kind's running lives on this member, with their ages and last
//! message, as a query answered from the core's state (no effect, no clock read).
//!
//! Pages follow the slot table's positions: the answer says where the next page starts, so a
//! listing costs what its pages hold, never the whole set at once, and a life that runs
//! throughout a listing is listed exactly once (one that starts or ends meanwhile may or may
//! not be).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::slots::Slot;
use super::{KindCore, Types};

/// One running life of the kind on this member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveEntry {
    pub(crate) identity: Arc<str>,
    /// Since it started, to within a second.
    pub(crate) age: Duration,
    /// Since it was last handed a call or finished one (or started).
    pub(crate) last_message: Duration,
    /// Whether it is handling a call now.
    pub(crate) busy: bool,
    /// Calls waiting for it.
    pub(crate) queued: usize,
}

/// A page of running lives and where the next page starts (`None`: this was the last).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CorePage {
    pub(crate) entries: Vec<ActiveEntry>,
    pub(crate) next: Option<u32>,
}

impl<T: Types> KindCore<T> {
    /// At most `limit` running lives from position `from` on, seen at `now`.
    pub(crate) fn active(&self, from: u32, limit: usize, now: Instant) -> CorePage {
        let mut running =
            self.slots
                .iter_from(from)
                .filter_map(|(at, identity, slot)| match slot {
                    Slot::Active(active) => Some((at, identity, active)),
                    _ => None,
                });
        let mut page = CorePage::default();
        for (at, identity, active) in running.by_ref() {
            if page.entries.len() == limit {
                page.next = Some(at);
                break;
            }
            page.entries.push(ActiveEntry {
                identity: Arc::clone(identity),
                age: self.clock.since_second(active.started, now),
                last_message: self.clock.since(active.last_message, now),
                busy: active.is_busy(),
                queued: active.queued(),
            });
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::super::harness::{Cluster, Knobs};
    use super::*;

    fn roomy() -> Knobs {
        let mut knobs = Knobs {
            hook_overrun: 0.0,
            big_reply: 0.0,
            hook_fails: 0.0,
            ..Knobs::default()
        };
        knobs.config.idle_timeout = Duration::from_secs(600);
        knobs.config.max_active = 1_000;
        knobs
    }

    /// Every page of every host, followed to the end, by identity.
    fn list_all(
        cluster: &Cluster,
        hosts: usize,
        limit: usize,
    ) -> BTreeMap<Arc<str>, (usize, ActiveEntry)> {
        let mut all = BTreeMap::new();
        for m in 0..hosts {
            let mut from = 0;
            loop {
                let page = cluster.core(m).active(from, limit, cluster.now);
                assert!(page.entries.len() <= limit);
                for entry in page.entries {
                    let again = all.insert(Arc::clone(&entry.identity), (m, entry));
                    assert!(again.is_none(), "listed twice");
                }
                match page.next {
                    Some(next) => from = next,
                    None => break,
                }
            }
        }
        all
    }

    #[test]
    fn pages_list_every_active_identity_once_with_its_member_age_and_last_message() {
        let mut cluster = Cluster::new(5, 2, 1, roomy());
        for i in 0..30 {
            cluster.deposit(2, &format!("acct-{i}"), Some(Duration::from_secs(5)));
        }
        cluster.run_for(Duration::from_secs(1));
        cluster.run_for(Duration::from_secs(3));
        // One identity gets another message: its last message is recent, the others' are not.
        cluster.deposit(2, "acct-7", Some(Duration::from_secs(5)));
        cluster.run_for(Duration::from_millis(200));

        let listed = list_all(&cluster, 2, 4);
        let sent: Vec<Arc<str>> = cluster.identities().into_iter().collect();
        assert_eq!(
            listed.keys().cloned().collect::<Vec<_>>(),
            sent,
            "every identity, once"
        );
        for m in 0..2 {
            let on_m = listed.values().filter(|(at, _)| *at == m).count();
            assert_eq!(
                on_m,
                cluster.core(m).stats().active,
                "member {m}'s own count"
            );
            assert!(on_m > 0, "both hosts hold some");
        }
        for (identity, (_, entry)) in &listed {
            assert!(!entry.busy && entry.queued == 0, "{identity} is idle");
            assert!(
                entry.age >= Duration::from_secs(3),
                "{identity}: {:?}",
                entry.age
            );
            assert!(
                entry.age <= Duration::from_secs(5),
                "{identity}: {:?}",
                entry.age
            );
            if &**identity == "acct-7" {
                assert!(
                    entry.last_message < Duration::from_millis(200),
                    "{:?}",
                    entry.last_message
                );
            } else {
                assert!(
                    entry.last_message >= Duration::from_secs(3),
                    "{identity}: {:?}",
                    entry.last_message
                );
            }
        }
    }

    #[test]
    fn a_listing_meets_each_life_that_runs_throughout_once_while_others_come_and_go() {
        let mut cluster = Cluster::new(9, 1, 1, roomy());
        for i in 0..20 {
            cluster.deposit(1, &format!("stays-{i}"), Some(Duration::from_secs(5)));
        }
        cluster.run_for(Duration::from_secs(1));
        let mut seen: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        let mut from = 0;
        let mut round = 0;
        loop {
            let page = cluster.core(0).active(from, 3, cluster.now);
            for entry in &page.entries {
                *seen.entry(Arc::clone(&entry.identity)).or_default() += 1;
            }
            // Between pages, new identities activate (taking new or freed positions).
            for i in 0..2 {
                cluster.deposit(1, &format!("new-{round}-{i}"), Some(Duration::from_secs(5)));
            }
            cluster.run_for(Duration::from_millis(100));
            round += 1;
            match page.next {
                Some(next) => from = next,
                None => break,
            }
        }
        for i in 0..20 {
            let id = format!("stays-{i}");
            assert_eq!(seen.get(id.as_str()), Some(&1), "{id}");
        }
        assert!(seen.values().all(|n| *n == 1), "nothing listed twice");
    }

    #[test]
    fn an_empty_kind_lists_nothing_and_a_full_last_page_says_so() {
        let mut cluster = Cluster::new(3, 1, 1, roomy());
        assert_eq!(
            cluster.core(0).active(0, 10, cluster.now),
            CorePage::default()
        );
        for i in 0..4 {
            cluster.deposit(1, &format!("acct-{i}"), Some(Duration::from_secs(5)));
        }
        cluster.run_for(Duration::from_secs(1));
        let page = cluster.core(0).active(0, 4, cluster.now);
        assert_eq!(page.entries.len(), 4);
        assert_eq!(page.next, None, "nothing after the fourth: no further page");
        let first = cluster.core(0).active(0, 3, cluster.now);
        let rest = cluster
            .core(0)
            .active(first.next.expect("a fourth"), 3, cluster.now);
        assert_eq!(rest.entries.len(), 1);
        assert_eq!(rest.next, None);
    }
}
