//! One kind's leases on one member: the scopes it holds in the state store, under which epoch
//! and for how many activations, and the claims under way with the activations waiting on
//! them. Plain data, no I/O: the host claims and releases in the store as this table says.

use std::collections::HashMap;
use std::sync::Arc;

use rally_state::Epoch;

use super::placement::Scope;

/// A lease's key in the table: a shard's number, or the identity leased alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum LeaseKey {
    Shard(u32),
    Identity(Arc<str>),
}

impl LeaseKey {
    pub(crate) fn new(scope: Scope, identity: &Arc<str>) -> Self {
        match scope {
            Scope::Shard(shard) => Self::Shard(shard),
            Scope::Identity => Self::Identity(Arc::clone(identity)),
        }
    }

    /// The scope as the state store records it (see `StateStore`): the prefixes keep a shard
    /// and an identity that reads like one apart.
    pub(crate) fn name(&self) -> Arc<str> {
        match self {
            Self::Shard(shard) => Arc::from(format!("#{shard}")),
            Self::Identity(identity) => Arc::from(format!("={identity}")),
        }
    }
}

enum Lease {
    /// A claim is under way; these identities' activations wait for its outcome.
    Claiming(Vec<Arc<str>>),
    /// Held under `epoch` by `users` activations (started, or running their hook).
    Held {
        name: Arc<str>,
        epoch: Epoch,
        users: usize,
    },
}

/// What an activation that wants its lease is to do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The lease is held: act under it (the scope's name and epoch).
    Held(Arc<str>, Epoch),
    /// Claim it; the activations that want it meanwhile wait for the outcome.
    Claim,
    /// Another activation's claim is under way: its outcome decides this one's.
    Waiting,
}

#[derive(Default)]
pub(crate) struct Leases {
    map: HashMap<LeaseKey, Lease>,
}

impl Leases {
    /// An activation of `identity` wants the lease `key`.
    pub(crate) fn acquire(&mut self, key: &LeaseKey, identity: &Arc<str>) -> Acquired {
        match self.map.get_mut(key) {
            Some(Lease::Held { name, epoch, users }) => {
                *users += 1;
                Acquired::Held(Arc::clone(name), *epoch)
            }
            Some(Lease::Claiming(waiting)) => {
                waiting.push(Arc::clone(identity));
                Acquired::Waiting
            }
            None => {
                self.map.insert(key.clone(), Lease::Claiming(Vec::new()));
                Acquired::Claim
            }
        }
    }

    /// The claim of `key` was granted: the claimer and every activation that waited hold it.
    /// Returns those that waited.
    pub(crate) fn granted(
        &mut self,
        key: &LeaseKey,
        name: Arc<str>,
        epoch: Epoch,
    ) -> Vec<Arc<str>> {
        let waiting = match self.map.remove(key) {
            Some(Lease::Claiming(waiting)) => waiting,
            _ => Vec::new(),
        };
        let users = 1 + waiting.len();
        self.map
            .insert(key.clone(), Lease::Held { name, epoch, users });
        waiting
    }

    /// The claim of `key` was not granted (another member holds the scope, or the claim
    /// failed): returns the activations that waited on it, which end as the claimer's does.
    pub(crate) fn not_granted(&mut self, key: &LeaseKey) -> Vec<Arc<str>> {
        match self.map.remove(key) {
            Some(Lease::Claiming(waiting)) => waiting,
            Some(held) => {
                self.map.insert(key.clone(), held);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// An activation under `key` ended. The last one out gets the lease to release in the
    /// store (its name and epoch), and the lease leaves the table: the next activation in the
    /// scope claims it again.
    pub(crate) fn leave(&mut self, key: &LeaseKey) -> Option<(Arc<str>, Epoch)> {
        let Some(Lease::Held { users, .. }) = self.map.get_mut(key) else {
            return None;
        };
        *users -= 1;
        if *users > 0 {
            return None;
        }
        match self.map.remove(key) {
            Some(Lease::Held { name, epoch, .. }) => Some((name, epoch)),
            _ => None,
        }
    }

    /// Leases held now.
    pub(crate) fn held(&self) -> usize {
        self.map
            .values()
            .filter(|lease| matches!(lease, Lease::Held { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn one_claim_serves_the_activations_that_wait_on_it_and_the_last_out_releases() {
        let mut leases = Leases::default();
        let shard = LeaseKey::Shard(7);
        assert_eq!(leases.acquire(&shard, &id("a")), Acquired::Claim);
        assert_eq!(leases.acquire(&shard, &id("b")), Acquired::Waiting);
        assert_eq!(leases.acquire(&shard, &id("c")), Acquired::Waiting);
        assert_eq!(leases.held(), 0);
        assert_eq!(leases.granted(&shard, id("#7"), 3), vec![id("b"), id("c")]);
        assert_eq!(leases.held(), 1);
        // Held: a later activation acts under it at once.
        assert_eq!(
            leases.acquire(&shard, &id("d")),
            Acquired::Held(id("#7"), 3)
        );
        for _ in 0..3 {
            assert_eq!(leases.leave(&shard), None);
        }
        assert_eq!(leases.leave(&shard), Some((id("#7"), 3)));
        assert_eq!(leases.held(), 0);
        // Released: the next activation claims again.
        assert_eq!(leases.acquire(&shard, &id("a")), Acquired::Claim);
    }

    #[test]
    fn a_claim_not_granted_hands_back_those_that_waited_and_leaves_nothing_held() {
        let mut leases = Leases::default();
        let key = LeaseKey::Shard(1);
        assert_eq!(leases.acquire(&key, &id("a")), Acquired::Claim);
        assert_eq!(leases.acquire(&key, &id("b")), Acquired::Waiting);
        assert_eq!(leases.not_granted(&key), vec![id("b")]);
        assert_eq!(leases.leave(&key), None);
        assert_eq!(leases.acquire(&key, &id("a")), Acquired::Claim);
    }

    #[test]
    fn scopes_are_apart_and_named_apart() {
        let mut leases = Leases::default();
        let (shard, alone) = (LeaseKey::Shard(5), LeaseKey::Identity(id("#5")));
        assert_eq!(leases.acquire(&shard, &id("x")), Acquired::Claim);
        assert_eq!(leases.acquire(&alone, &id("#5")), Acquired::Claim);
        assert_ne!(shard.name(), alone.name());
        assert_eq!(&*shard.name(), "#5");
        assert_eq!(&*alone.name(), "=#5");
    }
}
