//! The leases this member holds or claims for the kind's scopes, and the claim policy: claim,
//! wait for a live holder to hand over, wait out a holder that went away and take over, release
//! when the last life in a scope ends, retry what the store failed. Plain data: the store
//! operations go out as effects and come back through [`KindCore::stored`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use rally_state::{Claim, Epoch, StoreError};

use super::slots::Slot;
use super::{CallMeta, KindCore, LifeId, OpId, StoreAnswer, StoreRequest, Timer, Types, backoff};
use crate::virtual_actors::outcome::Refusal;
use crate::virtual_actors::ownership::{Holder, Route};
use crate::virtual_actors::placement::Scope;

/// How many times a claim follows a holder that went away or a lost race before its calls fail.
const CLAIM_ATTEMPTS: u32 = 8;

/// How many store failures in a row a claim sits out (with [`backoff`] between them, about 10 s
/// in all) before its calls fail with the store's error.
const CLAIM_FAILURES: u32 = 8;

/// How often, at first, a member that now owns an identity asks the store again whether the
/// previous owner, still serving, has handed it over; doubled after each ask up to
/// [`HANDOVER_POLL_MAX`].
const HANDOVER_POLL: Duration = Duration::from_millis(10);
const HANDOVER_POLL_MAX: Duration = Duration::from_millis(100);

/// How often at most a member waiting to take a lease over from a holder that is down or gone
/// asks the store whether the holder released it meanwhile (a graceful leaver does, as it
/// stops; a crashed one never does, so this stays rare: about ten asks in a takeover wait).
const GONE_POLL_MAX: Duration = Duration::from_secs(1);

/// A lease's key: a shard's number, or the identity leased alone.
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

    /// The scope as the state store records it: the prefixes keep a shard and an identity that
    /// reads like one apart.
    pub(crate) fn name(&self) -> Arc<str> {
        match self {
            Self::Shard(shard) => Arc::from(format!("#{shard}")),
            Self::Identity(identity) => Arc::from(format!("={identity}")),
        }
    }
}

/// One scope's lease on this member.
pub(super) enum Lease {
    /// A claim is under way (in the store, or waiting to ask again); these identities wait.
    Claiming {
        waiters: Vec<Arc<str>>,
        attempt: u64,
        progress: Progress,
    },
    /// Held under `epoch` by `users` lives (running, starting, or stopping).
    Held {
        name: Arc<str>,
        epoch: Epoch,
        users: usize,
    },
    /// The last life ended: the release is under way. Identities that want the scope wait,
    /// and claim again once it is done.
    Releasing {
        name: Arc<str>,
        epoch: Epoch,
        waiters: Vec<Arc<str>>,
        attempt: u64,
        failures: u32,
    },
}

/// How far a claim has gone.
pub(super) struct Progress {
    /// Until when a live previous owner is waited for to hand the scope over.
    handover_until: Instant,
    poll: Duration,
    gone_poll: Duration,
    /// Holders followed away or races lost.
    attempts: u32,
    /// Whether the wait for a handover was lengthened once because calls the holder handed
    /// over were waiting here.
    lengthened: bool,
    /// Store failures in a row.
    failures: u32,
}

/// A store operation under way.
pub(super) enum Op {
    Claim { key: LeaseKey, attempt: u64 },
    Release { key: LeaseKey, attempt: u64 },
    Fence { identity: Arc<str>, life: LifeId },
}

impl<T: Types> KindCore<T> {
    /// `identity` wants its lease: `Some((scope, epoch))` to act under it now (counted), or
    /// `None` when it must wait for a claim (its slot is `Claiming`, set by the caller).
    pub(super) fn acquire(
        &mut self,
        key: &LeaseKey,
        identity: &Arc<str>,
        now: Instant,
    ) -> Option<(Arc<str>, Epoch)> {
        match self.leases.get_mut(key) {
            Some(Lease::Held { name, epoch, users }) => {
                *users += 1;
                Some((Arc::clone(name), *epoch))
            }
            Some(Lease::Claiming { waiters, .. } | Lease::Releasing { waiters, .. }) => {
                waiters.push(Arc::clone(identity));
                None
            }
            None => {
                self.begin_claim(key.clone(), vec![Arc::clone(identity)], now);
                None
            }
        }
    }

    /// The lease `key` if held: its scope's name and epoch.
    pub(super) fn held(&self, key: &LeaseKey) -> Option<(Arc<str>, Epoch)> {
        match self.leases.get(key) {
            Some(Lease::Held { name, epoch, .. }) => Some((Arc::clone(name), *epoch)),
            _ => None,
        }
    }

    /// A life under `key` is over. The last one out releases the lease.
    pub(super) fn leave_lease(&mut self, key: &LeaseKey, now: Instant) {
        let Some(Lease::Held { users, .. }) = self.leases.get_mut(key) else {
            return;
        };
        *users = users.saturating_sub(1);
        if *users > 0 {
            return;
        }
        let Some(Lease::Held { name, epoch, .. }) = self.leases.remove(key) else {
            unreachable!("checked above")
        };
        let attempt = self.new_attempt();
        self.leases.insert(
            key.clone(),
            Lease::Releasing {
                name,
                epoch,
                waiters: Vec::new(),
                attempt,
                failures: 0,
            },
        );
        self.release(key, now);
    }

    fn begin_claim(&mut self, key: LeaseKey, waiters: Vec<Arc<str>>, now: Instant) {
        let attempt = self.new_attempt();
        let progress = Progress {
            handover_until: now + 2 * self.config.deactivation_timeout,
            poll: HANDOVER_POLL,
            gone_poll: HANDOVER_POLL,
            attempts: 0,
            lengthened: false,
            failures: 0,
        };
        self.leases.insert(
            key.clone(),
            Lease::Claiming {
                waiters,
                attempt,
                progress,
            },
        );
        self.new_op(
            Op::Claim {
                key: key.clone(),
                attempt,
            },
            StoreRequest::Claim { scope: key.name() },
        );
    }

    /// The store answered operation `op`.
    pub(crate) fn stored(&mut self, op: OpId, answer: StoreAnswer, now: Instant) {
        let Some(op) = self.ops.remove(&op) else {
            return;
        };
        match (op, answer) {
            (Op::Claim { key, attempt }, StoreAnswer::Claim(answer)) => {
                self.claim_answered(&key, attempt, answer, now);
            }
            (Op::Release { key, attempt }, StoreAnswer::Done(answer)) => {
                self.release_answered(&key, attempt, answer, now);
            }
            (Op::Fence { identity, life }, StoreAnswer::Done(answer)) => match answer {
                Ok(()) | Err(StoreError::StaleEpoch { .. }) => self.fenced(&identity, life, now),
                Err(error) => {
                    tracing::warn!(kind = self.kind, %identity, %error, "fencing a life failed; trying again");
                    let at = now + backoff(1);
                    self.arm(at, Timer::Fence(identity, life));
                }
            },
            // An answer of the wrong shape (a driver's bug): the operation is lost; what waited
            // on it is failed by its deadline.
            _ => {}
        }
    }

    fn claim_answered(
        &mut self,
        key: &LeaseKey,
        attempt: u64,
        answer: Result<Claim, StoreError>,
        now: Instant,
    ) {
        let current = matches!(self.leases.get(key), Some(Lease::Claiming { attempt: a, .. }) if *a == attempt);
        if !current {
            // A claim nobody waits for any more: give back what it got.
            if let Ok(Claim::Granted(epoch)) = answer {
                self.leases.insert(
                    key.clone(),
                    Lease::Held {
                        name: key.name(),
                        epoch,
                        users: 1,
                    },
                );
                self.leave_lease(key, now);
            }
            return;
        }
        match answer {
            Ok(Claim::Granted(epoch)) => self.granted(key, epoch, now),
            Ok(Claim::Held { owner, epoch }) => self.held_by(key, &owner, epoch, now),
            Ok(other) => self.claim_failed(key, format!("unexpected claim {other:?}"), now),
            Err(error) => self.claim_failed(key, error.to_string(), now),
        }
    }

    /// The scope is this member's under `epoch`: every identity still waiting starts a life.
    fn granted(&mut self, key: &LeaseKey, epoch: Epoch, now: Instant) {
        let Some(Lease::Claiming { waiters, .. }) = self.leases.remove(key) else {
            unreachable!("checked by the caller")
        };
        let name = key.name();
        let starting: Vec<Arc<str>> = waiters
            .into_iter()
            .filter(|identity| matches!(self.slots.get(identity), Some(Slot::Claiming(_))))
            .collect();
        self.leases.insert(
            key.clone(),
            Lease::Held {
                name: Arc::clone(&name),
                epoch,
                users: starting.len(),
            },
        );
        if starting.is_empty() {
            // Everyone who wanted it gave up meanwhile.
            self.leases.insert(
                key.clone(),
                Lease::Held {
                    name,
                    epoch,
                    users: 1,
                },
            );
            return self.leave_lease(key, now);
        }
        for identity in starting {
            let Some(Slot::Claiming(queue)) = self.slots.remove(&identity) else {
                unreachable!("filtered above")
            };
            if self.stopped {
                // Granted after this member stopped hosting: the calls go elsewhere.
                self.leave_lease(key, now);
                for call in queue {
                    self.request(Arc::clone(&identity), call, now);
                }
            } else {
                self.begin_life(identity, queue, Arc::clone(&name), epoch);
            }
        }
    }

    /// Another owner holds the scope under `epoch`: wait for it to hand over, wait it out and
    /// take over, or send the calls to it.
    fn held_by(&mut self, key: &LeaseKey, owner: &str, epoch: Epoch, now: Instant) {
        let decision = self.ownership.holder(owner, now);
        let still_ours = self.claim_still_ours(key);
        let handed_over = self.holds_handed_over(key);
        let lengthen = now + 2 * self.config.deactivation_timeout;
        let Some(Lease::Claiming {
            progress, attempt, ..
        }) = self.leases.get_mut(key)
        else {
            unreachable!("checked by the caller")
        };
        let attempt = *attempt;
        // Calls the holder handed over wait here: it is letting the scope go (it leaves the
        // lease once this member confirmed them, or after the deactivation timeout), however
        // long its last call took. Sent back to it now, they would come back behind the calls
        // it handed over with them.
        if handed_over && !progress.lengthened {
            progress.lengthened = true;
            progress.handover_until = progress.handover_until.max(lengthen);
        }
        match decision {
            // The previous owner still serves the scope: with a placement that moves
            // identities, it is about to hand it over (it sees the change a moment later and
            // releases the lease once its last life in the scope has ended). Wait for that
            // rather than send it calls that would overtake, or trail, those it hands over;
            // past the wait, it keeps the scope.
            Holder::Forward(_)
                if still_ours
                    && self.placement.moves_on_change()
                    && now + progress.poll < progress.handover_until =>
            {
                let at = now + progress.poll;
                progress.poll = (progress.poll * 2).min(HANDOVER_POLL_MAX);
                self.arm(at, Timer::Claim(key.clone(), attempt));
            }
            Holder::Forward(to) => {
                let Some(Lease::Claiming { waiters, .. }) = self.leases.remove(key) else {
                    unreachable!("matched above")
                };
                for identity in waiters {
                    if let Some(Slot::Claiming(queue)) = self.slots.remove(&identity) {
                        for call in queue {
                            self.forward(Arc::clone(&identity), to.clone(), call, false);
                        }
                    }
                }
            }
            // Seen down or gone: it may not have stopped yet, so its lease is taken over only
            // at `at`. A member that left gracefully releases as it stops, often a moment after
            // the others saw it gone: ask again soon, then less and less often.
            Holder::WaitUntil(at) => {
                let next = (now + progress.gone_poll).min(at);
                progress.gone_poll = (progress.gone_poll * 2).min(GONE_POLL_MAX);
                if next == at {
                    progress.attempts += 1;
                }
                if progress.attempts > CLAIM_ATTEMPTS {
                    return self.fail_claim(key, "the claim did not settle".into());
                }
                self.arm(next, Timer::Claim(key.clone(), attempt));
            }
            // Gone long enough that it has stopped; or this member's own hold, left by a lease
            // whose release did not reach the store.
            Holder::TakeOver | Holder::Local => {
                progress.attempts += 1;
                if progress.attempts > CLAIM_ATTEMPTS {
                    return self.fail_claim(key, "the claim did not settle".into());
                }
                self.new_op(
                    Op::Claim {
                        key: key.clone(),
                        attempt,
                    },
                    StoreRequest::TakeOver {
                        scope: key.name(),
                        from: epoch,
                    },
                );
            }
        }
    }

    /// Whether a call handed over by another member waits for the claim `key`.
    fn holds_handed_over(&self, key: &LeaseKey) -> bool {
        let Some(Lease::Claiming { waiters, .. }) = self.leases.get(key) else {
            return false;
        };
        waiters.iter().any(|identity| {
            matches!(self.slots.get(identity), Some(Slot::Claiming(queue))
                if queue.iter().any(CallMeta::handed_over))
        })
    }

    /// Whether the identities waiting on `key` are still placed here.
    fn claim_still_ours(&self, key: &LeaseKey) -> bool {
        match self.leases.get(key) {
            Some(Lease::Claiming { waiters, .. }) => waiters
                .first()
                .is_some_and(|identity| self.route(identity) == Route::Local),
            _ => false,
        }
    }

    /// The store failed the claim: try again after a backoff while someone waits, up to
    /// [`CLAIM_FAILURES`] times in a row.
    fn claim_failed(&mut self, key: &LeaseKey, why: String, now: Instant) {
        let Some(Lease::Claiming {
            progress, attempt, ..
        }) = self.leases.get_mut(key)
        else {
            return;
        };
        progress.failures += 1;
        if progress.failures > CLAIM_FAILURES {
            return self.fail_claim(key, why);
        }
        tracing::debug!(kind = self.kind, scope = %key.name(), %why, "a claim failed; trying again");
        let at = now + backoff(progress.failures);
        let attempt = *attempt;
        self.arm(at, Timer::Claim(key.clone(), attempt));
    }

    /// The claim is given up: its calls fail, not handled.
    fn fail_claim(&mut self, key: &LeaseKey, why: String) {
        let Some(Lease::Claiming { waiters, .. }) = self.leases.remove(key) else {
            return;
        };
        for identity in waiters {
            if let Some(Slot::Claiming(queue)) = self.slots.remove(&identity) {
                self.counters.failed += 1;
                for call in queue {
                    self.refuse(call, Refusal::Store(why.clone()));
                }
            }
        }
    }

    /// Asks the store again for a claim that waits (timer `attempt`).
    pub(super) fn claim_again(&mut self, key: &LeaseKey, attempt: u64, _now: Instant) {
        let waiting = matches!(self.leases.get(key), Some(Lease::Claiming { attempt: a, .. }) if *a == attempt);
        if !waiting {
            return;
        }
        if !self.claim_has_waiters(key) {
            self.leases.remove(key);
            return;
        }
        self.new_op(
            Op::Claim {
                key: key.clone(),
                attempt,
            },
            StoreRequest::Claim { scope: key.name() },
        );
    }

    /// Whether any identity still waits for the claim of `key`.
    fn claim_has_waiters(&self, key: &LeaseKey) -> bool {
        match self.leases.get(key) {
            Some(Lease::Claiming { waiters, .. }) => waiters
                .iter()
                .any(|identity| matches!(self.slots.get(identity), Some(Slot::Claiming(_)))),
            _ => false,
        }
    }

    fn release(&mut self, key: &LeaseKey, _now: Instant) {
        let Some(Lease::Releasing {
            name,
            epoch,
            attempt,
            ..
        }) = self.leases.get(key)
        else {
            return;
        };
        let request = StoreRequest::Release {
            scope: Arc::clone(name),
            epoch: *epoch,
        };
        let attempt = *attempt;
        self.new_op(
            Op::Release {
                key: key.clone(),
                attempt,
            },
            request,
        );
    }

    fn release_answered(
        &mut self,
        key: &LeaseKey,
        attempt: u64,
        answer: Result<(), StoreError>,
        now: Instant,
    ) {
        let current = matches!(self.leases.get(key), Some(Lease::Releasing { attempt: a, .. }) if *a == attempt);
        if !current {
            return;
        }
        match answer {
            // Released, or overtaken (someone took it over): either way no longer held here.
            Ok(()) | Err(StoreError::StaleEpoch { .. }) => {
                let Some(Lease::Releasing { waiters, .. }) = self.leases.remove(key) else {
                    unreachable!("checked above")
                };
                let waiters: Vec<Arc<str>> = waiters
                    .into_iter()
                    .filter(|identity| matches!(self.slots.get(identity), Some(Slot::Claiming(_))))
                    .collect();
                if !waiters.is_empty() {
                    self.begin_claim(key.clone(), waiters, now);
                }
            }
            Err(error) => {
                let Some(Lease::Releasing { failures, .. }) = self.leases.get_mut(key) else {
                    unreachable!("checked above")
                };
                *failures += 1;
                let at = now + backoff(*failures);
                tracing::warn!(kind = self.kind, scope = %key.name(), %error, "releasing a lease failed; trying again");
                self.arm(at, Timer::Release(key.clone(), attempt));
            }
        }
    }

    /// Tries a failed release again (timer `attempt`).
    pub(super) fn release_again(&mut self, key: &LeaseKey, attempt: u64, now: Instant) {
        if matches!(self.leases.get(key), Some(Lease::Releasing { attempt: a, .. }) if *a == attempt)
        {
            self.release(key, now);
        }
    }
}
