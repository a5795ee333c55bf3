//! The contract of every store as a model: a few maps, one operation at a time, no SQL. The
//! stores are run against it over random sequences of operations (see [`check_against_model`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rally::state::{Claim, Epoch, Fence, MAX_LIFE, StateStore, StoreError};

/// An epoch as a sequence names it: relative to the scope's latest epoch when the operation
/// runs (so that most operations carry an epoch that matters), or one never granted.
#[derive(Debug, Clone, Copy)]
pub enum Pick {
    /// The scope's latest epoch (held or released).
    Latest,
    /// The one before it.
    Previous,
    /// The one after it (not granted yet).
    Next,
    /// Never granted: 0, and the largest (past what SQL stores).
    Zero,
    Max,
}

/// One call of the store, on keys from small sets so that sequences meet the same leases and
/// identities again and again; its epochs named by [`Pick`].
#[derive(Debug, Clone)]
pub enum Step {
    Claim {
        scope: usize,
        owner: usize,
    },
    TakeOver {
        scope: usize,
        owner: usize,
        from: Pick,
    },
    Release {
        scope: usize,
        epoch: Pick,
    },
    Save {
        scope: usize,
        epoch: Pick,
        life: u64,
        identity: usize,
        value: u8,
    },
    Fence {
        scope: usize,
        epoch: Pick,
        life: u64,
        identity: usize,
    },
    Load {
        identity: usize,
    },
}

/// One call of the store with its epochs resolved.
#[derive(Debug, Clone)]
pub enum Op {
    Claim {
        scope: usize,
        owner: usize,
    },
    TakeOver {
        scope: usize,
        owner: usize,
        from: Epoch,
    },
    Release {
        scope: usize,
        epoch: Epoch,
    },
    Save {
        scope: usize,
        fence: Fence,
        identity: usize,
        value: u8,
    },
    Fence {
        scope: usize,
        fence: Fence,
        identity: usize,
    },
    Load {
        identity: usize,
    },
}

/// Two shards and one identity leased alone: the floor's scope matters.
const SCOPES: [&str; 3] = ["#0", "#1", "=x"];
const OWNERS: [&str; 3] = ["a", "b", "c"];
const IDENTITIES: [&str; 3] = ["x", "y", "z"];

/// What one call answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Claim(Result<Claim, StoreError>),
    Done(Result<(), StoreError>),
    Load(Result<Option<Vec<u8>>, StoreError>),
}

/// The reference: what a store must answer, one operation after another.
#[derive(Debug, Default)]
pub struct Model {
    /// scope → (epoch, owner, held)
    leases: BTreeMap<&'static str, (Epoch, &'static str, bool)>,
    states: BTreeMap<&'static str, Record>,
}

/// An identity's state, and its floor with the scope it belongs to.
type Record = (Option<Vec<u8>>, Option<(&'static str, Fence)>);

impl Model {
    /// `step` with its epochs resolved against the leases as they are now.
    pub fn resolve(&self, step: &Step) -> Op {
        let epoch = |scope: usize, pick: Pick| {
            let latest = self.leases.get(SCOPES[scope]).map_or(0, |lease| lease.0);
            match pick {
                Pick::Latest => latest,
                Pick::Previous => latest.saturating_sub(1),
                Pick::Next => latest + 1,
                Pick::Zero => 0,
                Pick::Max => u64::MAX,
            }
        };
        match *step {
            Step::Claim { scope, owner } => Op::Claim { scope, owner },
            Step::TakeOver { scope, owner, from } => Op::TakeOver {
                scope,
                owner,
                from: epoch(scope, from),
            },
            Step::Release { scope, epoch: pick } => Op::Release {
                scope,
                epoch: epoch(scope, pick),
            },
            Step::Save {
                scope,
                epoch: pick,
                life,
                identity,
                value,
            } => Op::Save {
                scope,
                fence: Fence {
                    epoch: epoch(scope, pick),
                    life,
                },
                identity,
                value,
            },
            Step::Fence {
                scope,
                epoch: pick,
                life,
                identity,
            } => Op::Fence {
                scope,
                fence: Fence {
                    epoch: epoch(scope, pick),
                    life,
                },
                identity,
            },
            Step::Load { identity } => Op::Load { identity },
        }
    }

    /// The record a write under `scope` carrying `fence` may change, or why it may not.
    fn writable(
        &mut self,
        scope: &str,
        fence: Fence,
        identity: usize,
    ) -> Result<&mut Record, StoreError> {
        if fence.life > MAX_LIFE {
            return Err(StoreError::InvalidKey(String::new()));
        }
        if !self.held(scope, fence.epoch) {
            return Err(StoreError::StaleEpoch { fence });
        }
        Ok(self.states.entry(IDENTITIES[identity]).or_default())
    }

    fn held(&self, scope: &str, epoch: Epoch) -> bool {
        self.leases
            .get(scope)
            .is_some_and(|&(e, _, held)| held && e == epoch)
    }

    fn grant(&mut self, scope: &'static str, owner: &'static str, granted: bool) -> Answer {
        let lease = self.leases.entry(scope).or_insert((0, "", false));
        Answer::Claim(Ok(if granted {
            *lease = (lease.0 + 1, owner, true);
            Claim::Granted(lease.0)
        } else {
            Claim::Held {
                owner: lease.1.to_owned(),
                epoch: lease.0,
            }
        }))
    }

    pub fn apply(&mut self, op: &Op) -> Answer {
        let stale = |fence| Err(StoreError::StaleEpoch { fence });
        match *op {
            Op::Claim { scope, owner } => {
                let (scope, owner) = (SCOPES[scope], OWNERS[owner]);
                let granted = self
                    .leases
                    .get(scope)
                    .is_none_or(|&(_, o, held)| !held || o == owner);
                self.grant(scope, owner, granted)
            }
            Op::TakeOver { scope, owner, from } => {
                let (scope, owner) = (SCOPES[scope], OWNERS[owner]);
                let granted = self
                    .leases
                    .get(scope)
                    .is_none_or(|&(e, _, held)| !held || e == from);
                self.grant(scope, owner, granted)
            }
            Op::Release { scope, epoch } => {
                let scope = SCOPES[scope];
                Answer::Done(if self.held(scope, epoch) {
                    self.leases.get_mut(scope).expect("held").2 = false;
                    Ok(())
                } else {
                    stale(Fence { epoch, life: 0 })
                })
            }
            Op::Save {
                scope,
                fence,
                identity,
                value,
            } => {
                let scope = SCOPES[scope];
                Answer::Done(self.writable(scope, fence, identity).and_then(|record| {
                    if record
                        .1
                        .is_some_and(|(s, floor)| s == scope && fence < floor)
                    {
                        return Err(StoreError::StaleEpoch { fence });
                    }
                    record.0 = Some(vec![value]);
                    Ok(())
                }))
            }
            Op::Fence {
                scope,
                fence,
                identity,
            } => {
                let scope = SCOPES[scope];
                Answer::Done(self.writable(scope, fence, identity).map(|record| {
                    if record
                        .1
                        .is_none_or(|(s, floor)| s != scope || floor < fence)
                    {
                        record.1 = Some((scope, fence));
                    }
                }))
            }
            Op::Load { identity } => Answer::Load(Ok(self
                .states
                .get(IDENTITIES[identity])
                .and_then(|record| record.0.clone()))),
        }
    }
}

/// Runs `op` against `store`, its keys under `kind`.
pub async fn call(store: &dyn StateStore, kind: &str, op: &Op) -> Answer {
    match *op {
        Op::Claim { scope, owner } => {
            Answer::Claim(store.claim(kind, SCOPES[scope], OWNERS[owner]).await)
        }
        Op::TakeOver { scope, owner, from } => Answer::Claim(
            store
                .take_over(kind, SCOPES[scope], OWNERS[owner], from)
                .await,
        ),
        Op::Release { scope, epoch } => {
            Answer::Done(store.release(kind, SCOPES[scope], epoch).await)
        }
        Op::Save {
            scope,
            fence,
            identity,
            value,
        } => Answer::Done(
            store
                .save(kind, SCOPES[scope], fence, IDENTITIES[identity], &[value])
                .await,
        ),
        Op::Fence {
            scope,
            fence,
            identity,
        } => Answer::Done(
            store
                .fence(kind, SCOPES[scope], fence, IDENTITIES[identity])
                .await,
        ),
        Op::Load { identity } => Answer::Load(store.load(kind, IDENTITIES[identity]).await),
    }
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        12 => Just(Pick::Latest),
        3 => Just(Pick::Previous),
        2 => Just(Pick::Next),
        1 => Just(Pick::Zero),
        1 => Just(Pick::Max),
    ]
}

/// Lives 0 to 3 mostly, so that fences and saves of one lease meet; the largest accepted and
/// the smallest refused now and then.
fn life() -> impl Strategy<Value = u64> {
    prop_oneof![24 => 0..4u64, 1 => Just(MAX_LIFE), 1 => Just(MAX_LIFE + 1)]
}

fn step() -> impl Strategy<Value = Step> {
    let scope = 0..SCOPES.len();
    let owner = 0..OWNERS.len();
    let identity = 0..IDENTITIES.len();
    prop_oneof![
        3 => (scope.clone(), owner.clone()).prop_map(|(scope, owner)| Step::Claim { scope, owner }),
        2 => (scope.clone(), owner, pick())
            .prop_map(|(scope, owner, from)| Step::TakeOver { scope, owner, from }),
        2 => (scope.clone(), pick()).prop_map(|(scope, epoch)| Step::Release { scope, epoch }),
        6 => (scope.clone(), pick(), life(), identity.clone(), any::<u8>()).prop_map(
            |(scope, epoch, life, identity, value)| Step::Save { scope, epoch, life, identity, value }
        ),
        4 => (scope, pick(), life(), identity.clone())
            .prop_map(|(scope, epoch, life, identity)| Step::Fence { scope, epoch, life, identity }),
        3 => identity.prop_map(|identity| Step::Load { identity }),
    ]
}

/// Each case runs under a kind of its own, so one store (one file, one database) serves every
/// case and shrinking step without one seeing another's leases.
static CASE: AtomicU64 = AtomicU64::new(0);

/// Runs `cases` random sequences of up to 60 operations against `store` and the model, one
/// operation at a time, and fails on the first answer that differs (an `InvalidKey`'s message
/// is not compared).
pub fn check_against_model(
    store: &dyn StateStore,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(step(), 1..60);
    let result = runner.run(&strategy, |steps| {
        let kind = format!("{name}-{}", CASE.fetch_add(1, Ordering::Relaxed));
        let mut model = Model::default();
        for (i, step) in steps.iter().enumerate() {
            let op = model.resolve(step);
            let expected = model.apply(&op);
            let got = runtime.block_on(call(store, &kind, &op));
            let same = match (&expected, &got) {
                (
                    Answer::Done(Err(StoreError::InvalidKey(_))),
                    Answer::Done(Err(StoreError::InvalidKey(_))),
                ) => true,
                _ => expected == got,
            };
            if !same {
                return Err(TestCaseError::fail(format!(
                    "operation {i} ({op:?}): the model answers {expected:?}, the store {got:?}"
                )));
            }
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
}
