//! The etcd provider's view, sans-I/O: registrations and keep-alive results in (with the time),
//! members, events and the self-fencing deadline out. The task in `etcd.rs` only moves them
//! between etcd and this.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::member::{Member, MemberEvent, MemberId, MemberStatus};
use crate::membership::MembershipStats;

/// What a member stores under its key: its identity, the lease the key lives under (so an
/// operator's `down` can revoke it), and whether it is leaving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Registration {
    pub(crate) member: MemberId,
    pub(crate) lease: i64,
    pub(crate) leaving: bool,
}

impl Registration {
    pub(crate) fn encode(&self) -> Vec<u8> {
        // A MemberId and two small fields always encode.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        postcard::from_bytes(bytes).ok()
    }
}

/// The bytes of a lease id (or a lease's TTL) in a request: what a keep-alive, a grant or a
/// revoke carries.
pub(crate) const LEASE_ID_BYTES: usize = 8;

/// The key of `member` under `root` (`<prefix>/<cluster>/members/`).
pub(crate) fn key_of(root: &str, member: &MemberId) -> String {
    format!(
        "{root}{}:{}/{}",
        member.address.host, member.address.port, member.incarnation.0
    )
}

/// This member's view of the registrations under its cluster's prefix.
pub(crate) struct LeaseView {
    local: Member,
    root: String,
    /// Fence this long after the last keep-alive that etcd answered was *sent*: etcd renewed
    /// the lease after that instant, so the lease outlives the fence by at least
    /// `lease-ttl - fence_after`.
    fence_after: Duration,
    registered: bool,
    leaving: bool,
    stopped: bool,
    /// Since when the lease is known to be alive (send instant of the last answered keep-alive).
    renewed_at: Instant,
    members: BTreeMap<String, Registration>,
    events: Vec<MemberEvent>,
    stats: MembershipStats,
}

impl LeaseView {
    pub(crate) fn new(local: MemberId, root: String, fence_after: Duration, now: Instant) -> Self {
        Self {
            local: Member::new(local, MemberStatus::Joining, true),
            root,
            fence_after,
            registered: false,
            leaving: false,
            stopped: false,
            renewed_at: now,
            members: BTreeMap::new(),
            events: Vec::new(),
            stats: MembershipStats::default(),
        }
    }

    pub(crate) fn local(&self) -> &Member {
        &self.local
    }

    pub(crate) fn local_key(&self) -> String {
        key_of(&self.root, &self.local.id)
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    pub(crate) fn stats(&self) -> MembershipStats {
        self.stats
    }

    /// Every registered member, oldest first, with this member's own record for itself.
    pub(crate) fn members(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .members
            .values()
            .filter(|r| r.member != self.local.id)
            .map(|r| Member::new(r.member.clone(), status_of(r), true))
            .collect();
        if self.local.status != MemberStatus::Removed {
            members.push(self.local.clone());
        }
        members.sort_by(|a, b| a.id.cmp(&b.id));
        members
    }

    pub(crate) fn drain_events(&mut self) -> Vec<MemberEvent> {
        std::mem::take(&mut self.events)
    }

    /// This member's registration was written under its lease at `now`: it is up.
    pub(crate) fn registered(&mut self, registration: Registration, now: Instant) {
        if self.stopped {
            return;
        }
        self.registered = true;
        self.renewed_at = now;
        self.local.status = MemberStatus::Up;
        self.events.push(MemberEvent::Joined(self.local.id.clone()));
        self.events.push(MemberEvent::Up(self.local.id.clone()));
        self.members.insert(self.local_key(), registration);
    }

    /// A key under the prefix was written.
    pub(crate) fn put(&mut self, key: &str, value: &[u8]) {
        if self.stopped {
            return;
        }
        self.stats.packets_in += 1;
        self.stats.bytes_in += (key.len() + value.len()) as u64;
        let Some(registration) = Registration::decode(value).filter(|r| {
            r.member.address.system == self.local.id.address.system
                && key_of(&self.root, &r.member) == key
        }) else {
            // Not a registration of this cluster, or filed under another member's key.
            self.stats.malformed += 1;
            return;
        };
        if registration.member == self.local.id {
            return;
        }
        let id = registration.member.clone();
        match self.members.insert(key.to_owned(), registration.clone()) {
            None => {
                self.events.push(MemberEvent::Joined(id.clone()));
                self.events.push(MemberEvent::Up(id.clone()));
                if registration.leaving {
                    self.events.push(MemberEvent::Leaving(id));
                }
            }
            Some(before) if registration.leaving && !before.leaving => {
                self.events.push(MemberEvent::Leaving(id));
            }
            Some(_) => {}
        }
    }

    /// A key under the prefix was deleted: its member left (if it said so), or its lease
    /// expired or was revoked, or an operator downed it.
    pub(crate) fn delete(&mut self, key: &str) {
        if self.stopped {
            return;
        }
        self.stats.packets_in += 1;
        self.stats.bytes_in += key.len() as u64;
        if key == self.local_key() {
            if self.registered && !self.leaving {
                // Downed by an operator, or the lease expired while this member was cut off.
                self.down_self("its registration was deleted");
            }
            return;
        }
        if let Some(gone) = self.members.remove(key) {
            let id = gone.member;
            if !gone.leaving {
                self.stats.decisions += 1;
                self.events.push(MemberEvent::Down(id.clone()));
            }
            self.events.push(MemberEvent::Removed(id));
        }
    }

    /// The whole prefix as read after a (re)connection: deletes what is gone, adds what is new.
    pub(crate) fn snapshot(&mut self, entries: &[(String, Vec<u8>)]) {
        let present: std::collections::BTreeSet<&str> =
            entries.iter().map(|(k, _)| k.as_str()).collect();
        let gone: Vec<String> = self
            .members
            .keys()
            .filter(|k| !present.contains(k.as_str()))
            .cloned()
            .collect();
        for key in gone {
            self.delete(&key);
        }
        for (key, value) in entries {
            self.put(key, value);
        }
    }

    /// A request to etcd carrying `bytes` of keys, values and lease ids was sent (what the
    /// membership figures count as sent: the payload, not gRPC's framing).
    pub(crate) fn sent(&mut self, bytes: usize) {
        self.stats.packets_out += 1;
        self.stats.bytes_out += bytes as u64;
    }

    /// A keep-alive sent at `sent_at` was answered with `ttl` seconds left (0: the lease is
    /// gone).
    pub(crate) fn keep_alive(&mut self, sent_at: Instant, ttl: i64) {
        if self.stopped || !self.registered {
            return;
        }
        if ttl <= 0 {
            self.down_self("its lease expired");
        } else if sent_at > self.renewed_at {
            self.renewed_at = sent_at;
        }
    }

    /// When this member must fence itself if no keep-alive is answered before.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        (self.registered && !self.stopped).then(|| self.renewed_at + self.fence_after)
    }

    /// Runs what is due at `now`: the fence.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|deadline| now >= deadline) {
            self.down_self("no keep-alive was answered in time");
        }
    }

    /// This member is leaving: its registration says so, then is revoked.
    pub(crate) fn leave(&mut self) -> Option<Registration> {
        if self.stopped {
            return None;
        }
        self.leaving = true;
        self.local.status = MemberStatus::Leaving;
        self.events
            .push(MemberEvent::Leaving(self.local.id.clone()));
        let registration = self.members.get_mut(&self.local_key())?;
        registration.leaving = true;
        Some(registration.clone())
    }

    /// The leave is done (the lease revoked, or given up on): this member is gone.
    pub(crate) fn left(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.local.status = MemberStatus::Removed;
        self.events
            .push(MemberEvent::Removed(self.local.id.clone()));
    }

    /// The registration of `member` to delete for an operator's down, if it is known.
    pub(crate) fn registration_of(&self, member: &MemberId) -> Option<(String, Registration)> {
        let key = key_of(&self.root, member);
        self.members.get(&key).map(|r| (key, r.clone()))
    }

    /// This member was downed by its own operator's `down`.
    pub(crate) fn down_local(&mut self) {
        if !self.stopped {
            self.down_self("an operator downed it");
        }
    }

    fn down_self(&mut self, why: &str) {
        tracing::warn!(member = %self.local.id, why, "downing itself");
        self.stopped = true;
        self.stats.decisions += 1;
        self.local.status = MemberStatus::Down;
        self.events.push(MemberEvent::Down(self.local.id.clone()));
    }
}

fn status_of(registration: &Registration) -> MemberStatus {
    if registration.leaving {
        MemberStatus::Leaving
    } else {
        MemberStatus::Up
    }
}

#[cfg(test)]
mod tests {
    use rally_remote::{Incarnation, NodeAddress};

    use super::*;

    const ROOT: &str = "/rally/c/members/";

    fn id(port: u16, incarnation: u64, generation: u64) -> MemberId {
        MemberId::new(
            NodeAddress {
                system: "c".into(),
                host: "h".into(),
                port,
            },
            Incarnation(incarnation),
            generation,
        )
    }

    fn reg(member: &MemberId, leaving: bool) -> (String, Vec<u8>) {
        let r = Registration {
            member: member.clone(),
            lease: 1,
            leaving,
        };
        (key_of(ROOT, member), r.encode())
    }

    fn registered_view(now: Instant) -> LeaseView {
        let me = id(1, 1, 1);
        let mut view = LeaseView::new(me.clone(), ROOT.into(), Duration::from_secs(4), now);
        view.registered(
            Registration {
                member: me,
                lease: 1,
                leaving: false,
            },
            now,
        );
        view.drain_events();
        view
    }

    #[test]
    fn requests_sent_are_counted_with_their_bytes_beside_what_is_received() {
        let now = Instant::now();
        let mut view = registered_view(now);
        let (key, value) = reg(&id(2, 2, 2), false);
        view.sent(key.len() + value.len());
        view.sent(LEASE_ID_BYTES);
        view.put(&key, &value);
        let stats = view.stats();
        assert_eq!(
            (stats.packets_out, stats.bytes_out),
            (2, (key.len() + value.len() + LEASE_ID_BYTES) as u64)
        );
        assert_eq!(
            (stats.packets_in, stats.bytes_in),
            (1, (key.len() + value.len()) as u64)
        );
    }

    #[test]
    fn a_put_is_a_join_a_leaving_put_then_delete_is_a_removal_not_a_down() {
        let now = Instant::now();
        let mut view = registered_view(now);
        let other = id(2, 2, 2);
        let (key, value) = reg(&other, false);
        view.put(&key, &value);
        assert_eq!(
            view.drain_events(),
            [
                MemberEvent::Joined(other.clone()),
                MemberEvent::Up(other.clone())
            ]
        );
        let (_, leaving) = reg(&other, true);
        view.put(&key, &leaving);
        view.delete(&key);
        assert_eq!(
            view.drain_events(),
            [
                MemberEvent::Leaving(other.clone()),
                MemberEvent::Removed(other)
            ]
        );
        assert_eq!(view.members().len(), 1);
    }

    #[test]
    fn a_delete_without_leaving_is_a_down() {
        let now = Instant::now();
        let mut view = registered_view(now);
        let other = id(2, 2, 2);
        let (key, value) = reg(&other, false);
        view.put(&key, &value);
        view.drain_events();
        view.delete(&key);
        assert_eq!(
            view.drain_events(),
            [
                MemberEvent::Down(other.clone()),
                MemberEvent::Removed(other)
            ]
        );
    }

    #[test]
    fn the_member_fences_itself_before_its_lease_can_expire() {
        let start = Instant::now();
        let mut view = registered_view(start);
        assert_eq!(view.poll_timeout(), Some(start + Duration::from_secs(4)));
        // A keep-alive sent at +1 s is answered: the fence moves to +5 s.
        view.keep_alive(start + Duration::from_secs(1), 5);
        view.handle_timeout(start + Duration::from_millis(4_500));
        assert!(!view.is_stopped());
        view.handle_timeout(start + Duration::from_secs(5));
        assert!(view.is_stopped());
        assert_eq!(view.local().status, MemberStatus::Down);
        assert_eq!(view.drain_events(), [MemberEvent::Down(id(1, 1, 1))]);
        assert_eq!(view.poll_timeout(), None);
    }

    #[test]
    fn a_lease_found_gone_or_its_own_key_deleted_downs_itself() {
        let now = Instant::now();
        let mut view = registered_view(now);
        view.keep_alive(now, 0);
        assert_eq!(view.local().status, MemberStatus::Down);

        let mut view = registered_view(now);
        let own = view.local_key();
        view.delete(&own);
        assert_eq!(view.local().status, MemberStatus::Down);
    }

    #[test]
    fn a_snapshot_after_a_reconnection_reports_what_changed_meanwhile() {
        let now = Instant::now();
        let mut view = registered_view(now);
        let (stay, gone, new) = (id(2, 2, 2), id(3, 3, 3), id(4, 4, 4));
        for m in [&stay, &gone] {
            let (k, v) = reg(m, false);
            view.put(&k, &v);
        }
        view.drain_events();
        let own = {
            let r = Registration {
                member: id(1, 1, 1),
                lease: 1,
                leaving: false,
            };
            (view.local_key(), r.encode())
        };
        view.snapshot(&[own, reg(&stay, false), reg(&new, false)]);
        assert_eq!(
            view.drain_events(),
            [
                MemberEvent::Down(gone.clone()),
                MemberEvent::Removed(gone),
                MemberEvent::Joined(new.clone()),
                MemberEvent::Up(new)
            ]
        );
        assert!(!view.is_stopped());
    }

    #[test]
    fn garbage_or_a_registration_under_another_key_is_dropped_and_counted() {
        let now = Instant::now();
        let mut view = registered_view(now);
        view.put("/rally/c/members/h:9/9", b"not postcard");
        let (_, value) = reg(&id(2, 2, 2), false);
        view.put("/rally/c/members/h:3/3", &value);
        let stranger = MemberId::new("rally://other@h:5".parse().unwrap(), Incarnation(5), 5);
        let (key, value) = reg(&stranger, false);
        view.put(&key, &value);
        assert_eq!(view.stats().malformed, 3);
        assert!(view.drain_events().is_empty());
        assert_eq!(view.members().len(), 1);
    }
}
