//! The contract of every store as a model: a few maps, one operation at a time, no SQL. The
//! stores are run against it over random sequences of operations (see [`check_against_model`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rally::state::{Claim, Epoch, Fence, MAX_LIFE, StateStore, StoreError};

/// One call of the store, on keys from small sets so that sequences meet the same leases and
/// identities again and again.
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
    /// identity → (state, floor with its scope)
    states: BTreeMap<&'static str, (Option<Vec<u8>>, Option<(&'static str, Fence)>)>,
}

impl Model {
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
                let (scope, identity) = (SCOPES[scope], IDENTITIES[identity]);
                if fence.life > MAX_LIFE {
                    return Answer::Done(Err(StoreError::InvalidKey(String::new())));
                }
                if !self.held(scope, fence.epoch) {
                    return Answer::Done(stale(fence));
                }
                let record = self.states.entry(identity).or_default();
                if record
                    .1
                    .is_some_and(|(s, floor)| s == scope && fence < floor)
                {
                    return Answer::Done(stale(fence));
                }
                record.0 = Some(vec![value]);
                Answer::Done(Ok(()))
            }
            Op::Fence {
                scope,
                fence,
                identity,
            } => {
                let (scope, identity) = (SCOPES[scope], IDENTITIES[identity]);
                if fence.life > MAX_LIFE {
                    return Answer::Done(Err(StoreError::InvalidKey(String::new())));
                }
                if !self.held(scope, fence.epoch) {
                    return Answer::Done(stale(fence));
                }
                let record = self.states.entry(identity).or_default();
                if record
                    .1
                    .is_none_or(|(s, floor)| s != scope || floor < fence)
                {
                    record.1 = Some((scope, fence));
                }
                Answer::Done(Ok(()))
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

/// Epochs near those granted (1 to 5 in a sequence this long), 0 (never granted) and the
/// largest (past what SQL stores).
fn epoch() -> impl Strategy<Value = Epoch> {
    prop_oneof![8 => 0..6u64, 1 => Just(u64::MAX)]
}

fn fence() -> impl Strategy<Value = Fence> {
    let life = prop_oneof![12 => 0..4u64, 1 => Just(MAX_LIFE), 1 => Just(MAX_LIFE + 1)];
    (epoch(), life).prop_map(|(epoch, life)| Fence { epoch, life })
}

fn op() -> impl Strategy<Value = Op> {
    let scope = 0..SCOPES.len();
    let owner = 0..OWNERS.len();
    let identity = 0..IDENTITIES.len();
    prop_oneof![
        3 => (scope.clone(), owner.clone()).prop_map(|(scope, owner)| Op::Claim { scope, owner }),
        2 => (scope.clone(), owner, epoch())
            .prop_map(|(scope, owner, from)| Op::TakeOver { scope, owner, from }),
        2 => (scope.clone(), epoch()).prop_map(|(scope, epoch)| Op::Release { scope, epoch }),
        5 => (scope.clone(), fence(), identity.clone(), any::<u8>())
            .prop_map(|(scope, fence, identity, value)| Op::Save { scope, fence, identity, value }),
        3 => (scope, fence(), identity.clone())
            .prop_map(|(scope, fence, identity)| Op::Fence { scope, fence, identity }),
        2 => identity.prop_map(|identity| Op::Load { identity }),
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
    let strategy = proptest::collection::vec(op(), 1..60);
    let result = runner.run(&strategy, |ops| {
        let kind = format!("{name}-{}", CASE.fetch_add(1, Ordering::Relaxed));
        let mut model = Model::default();
        for (i, op) in ops.iter().enumerate() {
            let expected = model.apply(op);
            let got = runtime.block_on(call(store, &kind, op));
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
