//! Requests waiting for their replies: registered after their frame is queued, freed by the
//! reply, by the asker giving up, or by the peer going down (with what is known of the outcome).

use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use crate::envelope::ReplyStatus;

/// A waiting request, as the table needs to see it.
pub trait Waiting {
    /// Whether the asker has given up (timed out or cancelled): the slot may be freed.
    fn is_abandoned(&self) -> bool;
}

/// What is known of a request that will get no reply because the peer went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its frame never left this node: it was not and will not be handled.
    NeverSent,
    /// Its frame was handed to the transport: it may or may not have been handled.
    Unknown,
}

/// Replies kept for requests not yet registered: legitimately a handful at a time (a reply
/// that overtook its registration); the bound stops a peer answering requests never made from
/// growing the table.
pub const MAX_EARLY_REPLIES: usize = 1024;
/// Slots held before the first sweep for abandoned asks. A whole sweep runs when the table has
/// grown to twice what the last sweep left (plus this): abandoned slots never make it more than
/// twice the requests really waiting, at an amortised O(1) cost per request and no cost at all
/// while the number in flight holds steady.
const SWEEP_SLACK: usize = 1024;

enum Slot<P> {
    Waiting {
        pending: P,
        lane: usize,
        sequence: u64,
    },
    Early {
        status: ReplyStatus,
        payload: Vec<u8>,
    },
}

/// The requests of one peer: a hash map of slots, swept for abandoned asks whenever it doubles,
/// without a timer per request.
///
/// # Example
///
/// ```
/// use rally_wire::{Outcome, ReplyStatus, RequestTable, Waiting};
///
/// struct Ask { gave_up: bool }
/// impl Waiting for Ask { fn is_abandoned(&self) -> bool { self.gave_up } }
///
/// let mut table = RequestTable::default();
/// let id = table.next_id();
/// assert!(table.register(id, Ask { gave_up: false }, 0, 1).is_none());
/// assert_eq!(table.waiting_on(0), 1);
/// let (_ask, lane) = table.complete(id, ReplyStatus::Ok, b"reply").unwrap();
/// assert_eq!((lane, table.waiting_on(0)), (0, 0));
///
/// let lost = table.next_id();
/// table.register(lost, Ask { gave_up: false }, 0, 2);
/// let failed = table.fail_all(|_lane| 1);
/// assert_eq!(failed.len(), 1);
/// assert_eq!(failed[0].1, Outcome::NeverSent); // sequence 2 was never handed over
/// ```
pub struct RequestTable<P> {
    slots: FxHashMap<u64, Slot<P>>,
    /// Waiting requests by the lane their frame went out on (abandoned ones not yet swept
    /// count), kept here so a transport reads it under the lock it already holds.
    on_lane: Vec<usize>,
    early: usize,
    next: u64,
    /// The size at which the next registration sweeps.
    sweep_at: usize,
}

impl<P> Default for RequestTable<P> {
    fn default() -> Self {
        Self {
            slots: FxHashMap::default(),
            on_lane: Vec::new(),
            early: 0,
            next: 1,
            sweep_at: SWEEP_SLACK,
        }
    }
}

impl<P> std::fmt::Debug for RequestTable<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestTable")
            .field("slots", &self.slots.len())
            .field("early", &self.early)
            .finish()
    }
}

impl<P: Waiting> RequestTable<P> {
    /// A fresh request id (never 0, which means "no reply wanted"). A caller that hands out
    /// ids itself (from an atomic counter, say) says so with [`issued`](Self::issued).
    pub fn next_id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// Ids below `next` have been handed out (by the caller's own counter): replies to them
    /// may arrive before their registration.
    pub fn issued(&mut self, next: u64) {
        self.next = self.next.max(next);
    }

    /// Registers request `id`, whose frame went out on `lane` as message `sequence`. If its
    /// reply already came, the request is not kept: it is returned with the reply. When the
    /// table has doubled since the last sweep, abandoned slots are freed first.
    pub fn register(
        &mut self,
        id: u64,
        pending: P,
        lane: usize,
        sequence: u64,
    ) -> Option<(P, ReplyStatus, Vec<u8>)> {
        if self.slots.len() >= self.sweep_at {
            self.sweep();
        }
        match self.slots.entry(id) {
            Entry::Occupied(slot) if matches!(slot.get(), Slot::Early { .. }) => {
                let Slot::Early { status, payload } = slot.remove() else {
                    unreachable!("the slot was just matched as early");
                };
                self.early -= 1;
                Some((pending, status, payload))
            }
            // Ids are never reused; keep the first registration.
            Entry::Occupied(_) => None,
            Entry::Vacant(slot) => {
                slot.insert(Slot::Waiting {
                    pending,
                    lane,
                    sequence,
                });
                if self.on_lane.len() <= lane {
                    self.on_lane.resize(lane + 1, 0);
                }
                self.on_lane[lane] += 1;
                None
            }
        }
    }

    /// A reply to `id` arrived: the waiting request, if any, and the lane its frame went out
    /// on. A reply for a request not yet registered is kept (up to [`MAX_EARLY_REPLIES`]); a
    /// second reply is ignored.
    pub fn complete(&mut self, id: u64, status: ReplyStatus, payload: &[u8]) -> Option<(P, usize)> {
        match self.slots.remove(&id) {
            Some(Slot::Waiting { pending, lane, .. }) => {
                self.on_lane[lane] -= 1;
                Some((pending, lane))
            }
            Some(early @ Slot::Early { .. }) => {
                self.slots.insert(id, early);
                None
            }
            None if id < self.next && self.early < MAX_EARLY_REPLIES => {
                self.early += 1;
                self.slots.insert(
                    id,
                    Slot::Early {
                        status,
                        payload: payload.to_vec(),
                    },
                );
                None
            }
            // A reply to an id never handed out, or beyond the bound: dropped.
            None => None,
        }
    }

    /// Takes back the registration of `id` (its frame was refused after all), with the lane
    /// its frame went out on.
    pub fn cancel(&mut self, id: u64) -> Option<(P, usize)> {
        match self.slots.remove(&id) {
            Some(Slot::Waiting { pending, lane, .. }) => {
                self.on_lane[lane] -= 1;
                Some((pending, lane))
            }
            Some(early) => {
                self.slots.insert(id, early);
                None
            }
            None => None,
        }
    }

    /// Frees the slots of asks that gave up. Returns how many.
    pub fn sweep(&mut self) -> usize {
        let before = self.slots.len();
        let on_lane = &mut self.on_lane;
        self.slots.retain(|_, slot| match slot {
            Slot::Waiting { pending, lane, .. } => {
                let keep = !pending.is_abandoned();
                if !keep {
                    on_lane[*lane] -= 1;
                }
                keep
            }
            Slot::Early { .. } => true,
        });
        self.sweep_at = 2 * self.slots.len() + SWEEP_SLACK;
        before - self.slots.len()
    }

    /// The peer is down: every waiting request, with what is known of its outcome given the
    /// highest sequence `handed(lane)` handed to the transport on each lane. Early replies go.
    pub fn fail_all(&mut self, handed: impl Fn(usize) -> u64) -> Vec<(P, Outcome)> {
        self.early = 0;
        self.on_lane.fill(0);
        let mut slots: Vec<(u64, Slot<P>)> = std::mem::take(&mut self.slots).into_iter().collect();
        slots.sort_unstable_by_key(|(id, _)| *id);
        slots
            .into_iter()
            .map(|(_, slot)| slot)
            .filter_map(|slot| match slot {
                Slot::Waiting {
                    pending,
                    lane,
                    sequence,
                } => {
                    let outcome = if sequence <= handed(lane) {
                        Outcome::Unknown
                    } else {
                        Outcome::NeverSent
                    };
                    Some((pending, outcome))
                }
                Slot::Early { .. } => None,
            })
            .collect()
    }

    /// Requests waiting for a reply (abandoned ones not yet swept count).
    pub fn waiting(&self) -> usize {
        self.slots.len() - self.early
    }

    /// Requests waiting for a reply whose frame went out on `lane` (abandoned ones not yet
    /// swept count).
    pub fn waiting_on(&self, lane: usize) -> usize {
        self.on_lane.get(lane).copied().unwrap_or(0)
    }

    /// Slots held, early replies included: the table's memory.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    struct Ask(Rc<Cell<bool>>);
    impl Waiting for Ask {
        fn is_abandoned(&self) -> bool {
            self.0.get()
        }
    }

    #[test]
    fn a_storm_of_abandoned_asks_does_not_grow_the_table() {
        let mut table = RequestTable::default();
        let keep = Rc::new(Cell::new(false));
        let long = table.next_id();
        table.register(long, Ask(keep.clone()), 0, 0);
        for _ in 0..100_000 {
            let gave_up = Rc::new(Cell::new(false));
            let id = table.next_id();
            table.register(id, Ask(gave_up.clone()), 0, 0);
            gave_up.set(true); // a 1 ms timeout
        }
        // Never more than twice the live requests plus the slack.
        assert!(
            table.slots() <= 2 + SWEEP_SLACK,
            "{} slots held",
            table.slots()
        );
        table.sweep();
        assert_eq!(table.slots(), 1, "the live ask stays");
        assert!(table.complete(long, ReplyStatus::Ok, &[]).is_some());
    }

    #[test]
    fn replies_reach_their_request_in_either_order_and_strangers_are_bounded() {
        let mut table = RequestTable::default();
        let id = table.next_id();
        assert!(table.complete(id, ReplyStatus::Ok, b"x").is_none());
        let (_, status, payload) = table
            .register(id, Ask(Rc::default()), 0, 1)
            .expect("the early reply");
        assert_eq!((status, &payload[..]), (ReplyStatus::Ok, &b"x"[..]));
        assert_eq!(table.slots(), 0);
        // Replies to ids never handed out are not kept at all.
        for stranger in 1_000..3_000 {
            table.complete(stranger, ReplyStatus::Ok, &[1]);
        }
        assert_eq!(table.slots(), 0);
    }

    #[test]
    fn going_down_tells_sent_from_never_sent() {
        let mut table = RequestTable::default();
        for sequence in 1..=4 {
            let id = table.next_id();
            table.register(id, Ask(Rc::default()), (sequence % 2) as usize, sequence);
        }
        // Lane 0 handed sequences up to 2 over, lane 1 up to 1.
        let failed = table.fail_all(|lane| if lane == 0 { 2 } else { 1 });
        let outcomes: Vec<Outcome> = failed.into_iter().map(|(_, o)| o).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Unknown,   // seq 1, lane 1
                Outcome::Unknown,   // seq 2, lane 0
                Outcome::NeverSent, // seq 3, lane 1
                Outcome::NeverSent  // seq 4, lane 0
            ]
        );
        assert_eq!(table.waiting(), 0);
    }

    /// Every way a request leaves the table (reply, cancel, sweep, peer down) ends its count
    /// on its lane; early replies and duplicate registrations never count.
    #[test]
    fn each_lane_counts_the_requests_waiting_on_it() {
        use proptest::prelude::*;
        #[derive(Debug, Clone)]
        enum Op {
            Register { lane: usize },
            Early,
            Complete(usize),
            Cancel(usize),
            Abandon(usize),
            Sweep,
            FailAll,
        }
        let op = prop_oneof![
            6 => (0..3usize).prop_map(|lane| Op::Register { lane }),
            1 => Just(Op::Early),
            4 => (0..64usize).prop_map(Op::Complete),
            1 => (0..64usize).prop_map(Op::Cancel),
            2 => (0..64usize).prop_map(Op::Abandon),
            1 => Just(Op::Sweep),
            1 => Just(Op::FailAll),
        ];
        proptest!(|(ops in proptest::collection::vec(op, 1..200))| {
            let mut table = RequestTable::default();
            // The model: per id, its lane and whether it waits.
            let mut model: Vec<(u64, usize, Rc<Cell<bool>>, bool)> = Vec::new();
            for op in ops {
                match op {
                    Op::Register { lane } => {
                        let id = table.next_id();
                        let gave_up = Rc::new(Cell::new(false));
                        prop_assert!(table.register(id, Ask(gave_up.clone()), lane, id).is_none());
                        // A second registration of the same id is ignored.
                        table.register(id, Ask(Rc::default()), lane, id);
                        model.push((id, lane, gave_up, true));
                    }
                    Op::Early => {
                        // A reply to an issued id that waits for nobody here: kept early.
                        let id = table.next_id();
                        table.complete(id, ReplyStatus::Ok, &[]);
                    }
                    Op::Complete(k) | Op::Cancel(k) => {
                        if let Some((id, lane, _, waiting)) = model.get_mut(k) {
                            let taken = if matches!(op, Op::Complete(_)) {
                                table.complete(*id, ReplyStatus::Ok, &[])
                            } else {
                                table.cancel(*id)
                            };
                            prop_assert_eq!(taken.map(|(_, l)| l), waiting.then_some(*lane));
                            *waiting = false;
                        }
                    }
                    Op::Abandon(k) => {
                        if let Some((_, _, gave_up, _)) = model.get(k) {
                            gave_up.set(true);
                        }
                    }
                    Op::Sweep => {
                        table.sweep();
                        for (_, _, gave_up, waiting) in &mut model {
                            *waiting &= !gave_up.get();
                        }
                    }
                    Op::FailAll => {
                        table.fail_all(|_| 0);
                        for entry in &mut model {
                            entry.3 = false;
                        }
                    }
                }
                for lane in 0..4 {
                    let expected = model.iter().filter(|e| e.3 && e.1 == lane).count();
                    prop_assert_eq!(table.waiting_on(lane), expected, "lane {}", lane);
                }
            }
        });
    }
}
