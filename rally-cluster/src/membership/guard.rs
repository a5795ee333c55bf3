//! The gate every membership packet passes before foca sees it: foca's identity type, and a
//! codec that refuses forged members, impossible claims and more members than the bound.
//!
//! Foca decodes a whole packet (header and every update) before it changes any state, so a
//! refusal here drops the packet whole: nothing of it is applied.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::{Buf, BufMut};
use foca::{Codec, Header, Member, PostcardCodec, State};
use rally_remote::NodeAddress;
use serde::{Deserialize, Serialize};

use crate::member::MemberId;
use rally_actor::sync::Mutex;

/// A [`MemberId`] as foca's identity. Private, so foca's trait stays out of Rally's API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct FocaId(pub(crate) MemberId);

impl foca::Identity for FocaId {
    type Addr = NodeAddress;

    /// A member declared down stays down: rejoining takes a new process (a new incarnation),
    /// which the layer above starts; foca never renames a member by itself.
    fn renew(&self) -> Option<Self> {
        None
    }

    fn addr(&self) -> NodeAddress {
        self.0.address.clone()
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.0.supersedes(&adversary.0)
    }
}

/// Why a packet was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Reject {
    /// A member that cannot exist: another cluster's, an impossible address, a seed
    /// placeholder, or a sender claiming this member's address.
    #[error("forged member {member}: {why}")]
    Forged { member: String, why: &'static str },
    /// A transition no honest member can report.
    #[error("impossible transition of {member}: {why}")]
    Impossible { member: String, why: &'static str },
    /// The packet would add members past the bound.
    #[error("member table full ({0} members)")]
    Full(usize),
}

/// The codec's error: the decoder's complaint or a refusal.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodecError {
    #[error("undecodable: {0}")]
    Postcard(#[from] postcard::Error),
    #[error(transparent)]
    Rejected(Reject),
}

/// What the gate knows: shared between the codec (inside foca) and the membership core, which
/// refreshes it after every interaction. No user code runs under its lock.
#[derive(Debug)]
pub(crate) struct Guard {
    cluster: String,
    local: MemberId,
    max_members: usize,
    /// The member foca holds at each address (live or down).
    known: HashMap<NodeAddress, MemberId>,
    /// Addresses first seen in the packet being decoded.
    new_in_packet: HashSet<NodeAddress>,
    /// The highest SWIM incarnation this member has sent about itself.
    own_swim_incarnation: u16,
    /// The sender of the packet being decoded.
    pub(crate) sender: Option<MemberId>,
    /// The node the packet being decoded came from, as its connection's handshake
    /// authenticated it (address, incarnation); `None` for a transport without one.
    pub(crate) authenticated: Option<(NodeAddress, rally_remote::Incarnation)>,
}

impl Guard {
    pub(crate) fn new(local: MemberId, max_members: usize) -> Self {
        Self {
            cluster: local.address.system.clone(),
            local,
            max_members,
            known: HashMap::new(),
            new_in_packet: HashSet::new(),
            own_swim_incarnation: 0,
            sender: None,
            authenticated: None,
        }
    }

    /// Replaces the known members with foca's table.
    pub(crate) fn refresh<'a>(&mut self, members: impl Iterator<Item = &'a MemberId>) {
        self.known.clear();
        for id in members {
            self.known.insert(id.address.clone(), id.clone());
        }
    }

    /// Checks one member named in a packet: its sender (`is_sender`) or an update.
    fn check(
        &mut self,
        id: &MemberId,
        swim_incarnation: u16,
        state: State,
        is_sender: bool,
    ) -> Result<(), Reject> {
        let forged = |why| {
            Err(Reject::Forged {
                member: id.to_string(),
                why,
            })
        };
        if id.address.system != self.cluster {
            return forged("a member of another cluster");
        }
        if id.address.host.is_empty() || id.address.port == 0 {
            return forged("an address no member can listen on");
        }
        if id.generation == 0 && id.incarnation.0 == 0 {
            return forged("a seed placeholder, never a member");
        }
        if is_sender
            && let Some((address, incarnation)) = &self.authenticated
            && (address != &id.address || *incarnation != id.incarnation)
        {
            return forged("a sender other than the node the packet came from");
        }
        let active = state != State::Down;
        if id.address == self.local.address {
            if is_sender {
                return forged("a sender with this member's address");
            }
            if *id == self.local && active && swim_incarnation > self.own_swim_incarnation {
                return Err(Reject::Impossible {
                    member: id.to_string(),
                    why: "this member alive at an incarnation it never announced",
                });
            }
            // Another identity at this address in an update is let through: foca answers it by
            // declaring that identity down to everyone, which refutes an impostor (or buries a
            // previous life) faster than dropping the carrier would.
            return Ok(());
        }
        if !self.known.contains_key(&id.address) && !self.new_in_packet.contains(&id.address) {
            if self.known.len() + self.new_in_packet.len() >= self.max_members {
                return Err(Reject::Full(self.max_members));
            }
            self.new_in_packet.insert(id.address.clone());
        }
        Ok(())
    }

    fn sent_about_self(&mut self, id: &MemberId, swim_incarnation: u16) {
        if *id == self.local {
            self.own_swim_incarnation = self.own_swim_incarnation.max(swim_incarnation);
        }
    }
}

/// Foca's postcard codec behind the guard.
pub(crate) struct GuardedCodec {
    inner: PostcardCodec,
    guard: Arc<Mutex<Guard>>,
}

impl GuardedCodec {
    pub(crate) fn new(guard: Arc<Mutex<Guard>>) -> Self {
        Self {
            inner: PostcardCodec,
            guard,
        }
    }
}

impl Codec<FocaId> for GuardedCodec {
    type Error = CodecError;

    fn encode_header(
        &mut self,
        header: &Header<FocaId>,
        buf: impl BufMut,
    ) -> Result<(), Self::Error> {
        self.guard
            .lock()
            .sent_about_self(&header.src.0, header.src_incarnation);
        Ok(self.inner.encode_header(header, buf)?)
    }

    fn decode_header(&mut self, buf: impl Buf) -> Result<Header<FocaId>, Self::Error> {
        let header: Header<FocaId> = self.inner.decode_header(buf)?;
        let mut guard = self.guard.lock();
        guard.new_in_packet.clear();
        guard.sender = None;
        guard
            .check(&header.src.0, header.src_incarnation, State::Alive, true)
            .map_err(CodecError::Rejected)?;
        guard.sender = Some(header.src.0.clone());
        Ok(header)
    }

    fn encode_member(
        &mut self,
        member: &Member<FocaId>,
        buf: impl BufMut,
    ) -> Result<(), Self::Error> {
        if member.state() != State::Down {
            self.guard
                .lock()
                .sent_about_self(&member.id().0, member.incarnation());
        }
        Ok(self.inner.encode_member(member, buf)?)
    }

    fn decode_member(&mut self, buf: impl Buf) -> Result<Member<FocaId>, Self::Error> {
        let member: Member<FocaId> = self.inner.decode_member(buf)?;
        self.guard
            .lock()
            .check(&member.id().0, member.incarnation(), member.state(), false)
            .map_err(CodecError::Rejected)?;
        Ok(member)
    }
}

#[cfg(test)]
mod tests {
    use rally_remote::Incarnation;

    use super::*;

    fn id(system: &str, port: u16, incarnation: u64, generation: u64) -> MemberId {
        MemberId::new(
            NodeAddress {
                system: system.into(),
                host: "127.0.0.1".into(),
                port,
            },
            Incarnation(incarnation),
            generation,
        )
    }

    fn guard(max_members: usize) -> Guard {
        Guard::new(id("c", 1, 1, 1), max_members)
    }

    #[test]
    fn foreign_impossible_and_placeholder_members_are_forged() {
        let mut g = guard(10);
        for bad in [id("other", 2, 2, 2), id("c", 0, 2, 2), id("c", 2, 0, 0)] {
            assert!(
                matches!(
                    g.check(&bad, 0, State::Alive, false),
                    Err(Reject::Forged { .. })
                ),
                "{bad}"
            );
        }
        let mut empty_host = id("c", 2, 2, 2);
        empty_host.address.host.clear();
        assert!(matches!(
            g.check(&empty_host, 0, State::Alive, false),
            Err(Reject::Forged { .. })
        ));
        assert!(g.check(&id("c", 2, 2, 2), 0, State::Alive, false).is_ok());
    }

    #[test]
    fn this_members_address_as_sender_is_forged_but_as_an_update_is_let_through() {
        let mut g = guard(10);
        let other_life = id("c", 1, 9, 9);
        assert!(matches!(
            g.check(&other_life, 0, State::Alive, true),
            Err(Reject::Forged { .. })
        ));
        // Foca buries it by declaring it down: letting it through is the better answer.
        assert!(g.check(&other_life, 0, State::Alive, false).is_ok());
    }

    #[test]
    fn only_this_member_raises_its_own_incarnation() {
        let mut g = guard(10);
        let me = id("c", 1, 1, 1);
        assert!(g.check(&me, 0, State::Alive, false).is_ok());
        assert!(matches!(
            g.check(&me, 1, State::Suspect, false),
            Err(Reject::Impossible { .. })
        ));
        g.sent_about_self(&me, 3);
        assert!(g.check(&me, 3, State::Alive, false).is_ok());
        assert!(
            g.check(&me, 9, State::Down, false).is_ok(),
            "a down claim is not a liveness claim"
        );
    }

    #[test]
    fn new_addresses_stop_at_the_bound_within_a_packet_and_across_packets() {
        let mut g = guard(3);
        g.refresh([id("c", 2, 2, 2)].iter());
        assert!(
            g.check(&id("c", 2, 2, 2), 0, State::Alive, false).is_ok(),
            "known"
        );
        assert!(g.check(&id("c", 3, 3, 3), 0, State::Alive, false).is_ok());
        assert!(g.check(&id("c", 4, 4, 4), 0, State::Alive, false).is_ok());
        assert!(matches!(
            g.check(&id("c", 5, 5, 5), 0, State::Alive, false),
            Err(Reject::Full(3))
        ));
        // A new life at a known address takes no new place.
        assert!(g.check(&id("c", 2, 7, 7), 0, State::Alive, false).is_ok());
    }
}
