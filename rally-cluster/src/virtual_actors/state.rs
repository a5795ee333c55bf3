//! Typed persistent state of a virtual actor: loaded when the identity activates, written
//! through the state store under the life's fence, and the idempotency keys of the last
//! operations with their replies, so that a request sent again is answered, not applied again.

use std::collections::VecDeque;
use std::fmt;
use std::ops::{Deref, DerefMut};

use rally_state::StoreError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::kind::Activation;

/// The envelope's format, written in every saved state: a reader refuses a format it does not
/// know instead of guessing.
const ENVELOPE_VERSION: u32 = 1;

/// How many idempotency keys a [`State`] remembers by default: the last 100 keyed operations
/// of an identity. A retried request arrives within seconds of its first attempt, while a
/// handful of others may have reached the identity meanwhile; each remembered key is saved
/// with the state on every write, so the window is kept small.
pub const DEFAULT_KEY_WINDOW: usize = 100;

/// The longest idempotency key accepted, in bytes (a UUID is 36).
pub const MAX_KEY_BYTES: usize = 256;

/// The state of one virtual actor, typed: `T` as the store last had it when the identity
/// activated ([`load`](Self::load); `T::default()` if it was never saved), changed in memory
/// through `Deref`/`DerefMut`, and made durable by [`write`](Self::write), which returns only
/// once the store holds it under this life's fence. A write from a life that is no longer the
/// identity's current one is refused by the store: two activations never both write.
///
/// **Reply only after the write.** A handler whose reply promises that a change is kept
/// (a deposit acknowledged, an order accepted) calls `write().await?` before it replies: a
/// member killed right after the reply leaves the change in the store. What is only in memory
/// (changed, not yet written) is lost with the process; the deactivation hook
/// ([`Actor::stopped`](rally_actor::Actor::stopped)) does not run when a process is killed.
///
/// **Exactly once.** [`apply_once`](Self::apply_once) applies a change for an idempotency key
/// the state has not seen, writes the state with the key and the reply, and answers a key it
/// has seen with the reply it gave then, without applying it again. The keys of the last
/// [`DEFAULT_KEY_WINDOW`] keyed operations are remembered
/// ([`with_key_window`](Self::with_key_window) sets another bound). With
/// [`GrainRef::ask_until_definite`](super::GrainRef::ask_until_definite), which sends the same
/// message (and key) again until it has an answer, an operation is applied exactly once across
/// timeouts, lost connections and failovers.
///
/// **Encoding.** The state is saved as JSON in a versioned envelope
/// (`{"rally_state":1,"value":…,"keys":[…]}`), readable with any SQLite or PostgreSQL client.
/// Fields added to `T` later read old states if they are `#[serde(default)]`.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
/// use rally::cluster::virtual_actors::{Activation, GrainMessages, State, VirtualActor};
/// use rally::remote::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct Account { balance: u64 }
///
/// struct Bank { account: State<Account> }
/// impl Actor for Bank {}
/// impl VirtualActor for Bank {
///     const KIND: &'static str = "account";
///     async fn activate(activation: Activation) -> ActorResult<Self> {
///         Ok(Bank { account: State::load(&activation).await? })
///     }
///     fn messages(table: &mut GrainMessages<Self>) {
///         table.add::<Deposit>();
///     }
/// }
///
/// /// Adds to the balance once per key; replies with the balance after it.
/// #[derive(Clone, Serialize, Deserialize)]
/// struct Deposit { key: String, amount: u64 }
/// impl Message for Deposit { type Reply = u64; }
/// impl RemoteMessage for Deposit { const MANIFEST: &'static str = "bank.Deposit"; }
/// impl Handler<Deposit> for Bank {
///     async fn handle(&mut self, msg: Deposit, _: &mut Context<Self>) -> ActorResult<u64> {
///         // Written to the store (with the key) before the reply leaves.
///         let balance = self.account.apply_once(&msg.key, |account| {
///             account.balance += msg.amount;
///             account.balance
///         }).await?;
///         Ok(balance)
///     }
/// }
/// ```
pub struct State<T> {
    activation: Activation,
    value: T,
    keys: VecDeque<Remembered>,
    window: usize,
    /// A write failed in the backend and the reload after it failed too: the store may hold
    /// a state this handle does not. The next keyed operation reloads first.
    uncertain: bool,
}

/// Why a typed state was not loaded or written.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::StateError;
///
/// let error = StateError::Format("expected a number".into());
/// assert!(error.to_string().contains("expected a number"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The store refused or failed ([`StoreError::StaleEpoch`]: this life is no longer the
    /// identity's current one, nothing was written).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The saved bytes are not a state envelope this version of Rally reads as `T` (saved
    /// with [`Activation::save`] as raw bytes, by a newer envelope format, or for another
    /// type), or the state could not be encoded.
    #[error("state format: {0}")]
    Format(String),
    /// An empty idempotency key or one longer than [`MAX_KEY_BYTES`].
    #[error("invalid idempotency key: {0}")]
    InvalidKey(String),
}

/// One remembered keyed operation and its reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    key: String,
    reply: serde_json::Value,
}

/// The envelope as written.
#[derive(Serialize)]
struct EnvelopeOut<'a, T> {
    rally_state: u32,
    value: &'a T,
    keys: &'a VecDeque<Remembered>,
}

/// The envelope's version alone, read before the rest.
#[derive(Deserialize)]
struct Version {
    rally_state: u32,
}

/// The envelope as read.
#[derive(Deserialize)]
struct EnvelopeIn<T> {
    value: T,
    #[serde(default)]
    keys: VecDeque<Remembered>,
}

impl<T> State<T>
where
    T: Serialize + DeserializeOwned + Default + Send,
{
    /// The identity's state as the store holds it (`T::default()` if it was never saved).
    /// Call it in [`VirtualActor::activate`](super::VirtualActor::activate).
    ///
    /// # Errors
    ///
    /// [`StateError::Store`] if the store failed, [`StateError::Format`] if the saved bytes
    /// are not a state envelope of `T`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a load changes nothing.
    pub async fn load(activation: &Activation) -> Result<Self, StateError> {
        let (value, keys) = decode(activation.load().await?.as_deref())?;
        Ok(Self {
            activation: activation.clone(),
            value,
            keys,
            window: DEFAULT_KEY_WINDOW,
            uncertain: false,
        })
    }

    /// Remembers the keys of the last `window` keyed operations (at least 1) instead of
    /// [`DEFAULT_KEY_WINDOW`]. A key forgotten is applied again if it comes back.
    #[must_use]
    pub fn with_key_window(mut self, window: usize) -> Self {
        self.window = window.max(1);
        self.trim();
        self
    }

    /// Writes the state as it is in memory; returns once the store holds it under this
    /// life's fence.
    ///
    /// If the write fails, the state in memory goes back to what the store holds (it is read
    /// again), so the activation never goes on from a change the store does not have.
    ///
    /// # Errors
    ///
    /// [`StateError::Store`]: [`StoreError::StaleEpoch`] if this life is no longer the
    /// identity's current one (nothing written), [`StoreError::Backend`] if the store failed
    /// (the write may or may not have applied). [`StateError::Format`] if `T` could not be
    /// encoded.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a write dropped midway may or may not have reached the store, and the
    /// state in memory is left as it was changed.
    pub async fn write(&mut self) -> Result<(), StateError> {
        let bytes = encode(&self.value, &self.keys)?;
        match self.activation.save(&bytes).await {
            Ok(()) => {
                self.uncertain = false;
                Ok(())
            }
            Err(e) => {
                self.reload().await;
                Err(StateError::Store(e))
            }
        }
    }

    /// Applies `change` once per idempotency `key`: for a key this state has not seen
    /// (among the last keyed operations it remembers), runs `change`, writes the state with
    /// the key and the reply, and returns the reply once the store has it; for a key it has
    /// seen, returns the reply it gave then and changes nothing.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write) (the change is then undone in memory, and the key not
    /// remembered unless the store has it); [`StateError::InvalidKey`] for an empty key or one
    /// longer than [`MAX_KEY_BYTES`]; [`StateError::Format`] if a remembered reply does not
    /// decode as `R`.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn apply_once<R>(
        &mut self,
        key: &str,
        change: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StateError>
    where
        R: Serialize + DeserializeOwned,
    {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(StateError::InvalidKey(format!(
                "a key must be 1..={MAX_KEY_BYTES} bytes, got {}",
                key.len()
            )));
        }
        if self.uncertain {
            let (value, keys) = decode(self.activation.load().await?.as_deref())?;
            (self.value, self.keys, self.uncertain) = (value, keys, false);
        }
        if let Some(seen) = self.keys.iter().find(|r| r.key == key) {
            return serde_json::from_value(seen.reply.clone())
                .map_err(|e| StateError::Format(format!("the reply remembered for {key:?}: {e}")));
        }
        let reply = change(&mut self.value);
        let remembered = serde_json::to_value(&reply)
            .map_err(|e| StateError::Format(format!("encoding the reply: {e}")))?;
        self.keys.push_back(Remembered {
            key: key.to_owned(),
            reply: remembered,
        });
        self.trim();
        self.write().await?;
        Ok(reply)
    }

    /// Whether `key` is among the keys this state remembers (its operation was applied and
    /// written).
    pub fn has_applied(&self, key: &str) -> bool {
        self.keys.iter().any(|r| r.key == key)
    }

    /// The activation this state belongs to.
    pub fn activation(&self) -> &Activation {
        &self.activation
    }

    /// Reads the store's state again after a failed write; if that fails too, keeps the state
    /// in memory and marks it uncertain.
    async fn reload(&mut self) {
        match self.activation.load().await {
            Ok(bytes) => match decode(bytes.as_deref()) {
                Ok((value, keys)) => {
                    (self.value, self.keys, self.uncertain) = (value, keys, false);
                }
                Err(_) => self.uncertain = true,
            },
            Err(_) => self.uncertain = true,
        }
    }

    fn trim(&mut self) {
        while self.keys.len() > self.window {
            self.keys.pop_front();
        }
    }
}

impl<T> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for State<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("identity", &self.activation.identity())
            .field("value", &self.value)
            .field("keys", &self.keys.len())
            .field("window", &self.window)
            .finish()
    }
}

/// The envelope's bytes for `value` and `keys`.
fn encode<T: Serialize>(value: &T, keys: &VecDeque<Remembered>) -> Result<Vec<u8>, StateError> {
    serde_json::to_vec(&EnvelopeOut {
        rally_state: ENVELOPE_VERSION,
        value,
        keys,
    })
    .map_err(|e| StateError::Format(format!("encoding the state: {e}")))
}

/// The value and keys in saved bytes (`T::default()` and none for an identity never saved).
fn decode<T: DeserializeOwned + Default>(
    bytes: Option<&[u8]>,
) -> Result<(T, VecDeque<Remembered>), StateError> {
    let Some(bytes) = bytes else {
        return Ok((T::default(), VecDeque::new()));
    };
    let version: Version = serde_json::from_slice(bytes).map_err(|e| {
        StateError::Format(format!(
            "not a state envelope (saved as raw bytes with Activation::save?): {e}"
        ))
    })?;
    if version.rally_state != ENVELOPE_VERSION {
        return Err(StateError::Format(format!(
            "envelope version {} (this Rally reads version {ENVELOPE_VERSION})",
            version.rally_state
        )));
    }
    let envelope: EnvelopeIn<T> = serde_json::from_slice(bytes)
        .map_err(|e| StateError::Format(format!("decoding the state: {e}")))?;
    Ok((envelope.value, envelope.keys))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rally_state::{Claim, Fence, MemoryStore, StateStore};

    use super::super::kind::LifeState;
    use super::*;

    /// A life of identity `id` under the lease of scope `#1` (claimed if need be).
    async fn life(store: &Arc<MemoryStore>, life: u64) -> Activation {
        let epoch = match store.claim("account", "#1", "m").await.unwrap() {
            Claim::Granted(epoch) => epoch,
            other => panic!("{other:?}"),
        };
        let store: Arc<dyn StateStore> = Arc::clone(store) as Arc<dyn StateStore>;
        Activation::new(
            "account",
            Arc::from("m"),
            Arc::from("id"),
            Arc::from("#1"),
            Fence { epoch, life },
            store,
            Arc::new(LifeState::unwatched(
                rally_actor::ActorSystem::new("test").next_id(),
            )),
        )
    }

    fn deposit(account: &mut Account) -> u64 {
        account.balance += 10;
        account.balance
    }

    #[tokio::test]
    async fn a_key_is_applied_once_and_answered_with_its_first_reply_by_later_lives_too() {
        let store = Arc::new(MemoryStore::new());
        let first = life(&store, 0).await;
        let mut state = State::<Account>::load(&first).await.unwrap();
        assert_eq!(state.apply_once("k1", deposit).await, Ok(10));
        assert_eq!(state.apply_once("k2", deposit).await, Ok(20));
        assert_eq!(
            state.apply_once("k1", deposit).await,
            Ok(10),
            "seen: its reply"
        );
        assert_eq!(state.balance, 20);
        // The next life reads the balance and the keys from the store.
        let next = life(&store, 1).await;
        let mut again = State::<Account>::load(&next).await.unwrap();
        assert_eq!(again.balance, 20);
        assert!(again.has_applied("k1") && again.has_applied("k2"));
        assert_eq!(again.apply_once("k2", deposit).await, Ok(20));
        assert_eq!(again.apply_once("k3", deposit).await, Ok(30));
    }

    #[tokio::test]
    async fn a_refused_write_leaves_the_state_as_the_store_has_it() {
        let store = Arc::new(MemoryStore::new());
        let old = life(&store, 0).await;
        let mut stale = State::<Account>::load(&old).await.unwrap();
        assert_eq!(stale.apply_once("k1", deposit).await, Ok(10));
        // A later life of the identity is fenced in: the old one may no longer write.
        let next = life(&store, 1).await;
        store
            .fence("account", "#1", next.fence(), "id")
            .await
            .unwrap();
        let refused = stale.apply_once("k2", deposit).await;
        assert!(
            matches!(
                refused,
                Err(StateError::Store(StoreError::StaleEpoch { .. }))
            ),
            "{refused:?}"
        );
        assert_eq!(stale.balance, 10, "the refused deposit is undone in memory");
        assert!(!stale.has_applied("k2"));
        stale.balance = 99;
        assert!(stale.write().await.is_err());
        assert_eq!(stale.balance, 10, "a refused plain write too");
        let current = State::<Account>::load(&next).await.unwrap();
        assert_eq!(current.balance, 10);
    }

    #[tokio::test]
    async fn only_the_last_keys_of_the_window_are_remembered() {
        let store = Arc::new(MemoryStore::new());
        let activation = life(&store, 0).await;
        let mut state = State::<Account>::load(&activation)
            .await
            .unwrap()
            .with_key_window(2);
        for key in ["a", "b", "c"] {
            state.apply_once(key, deposit).await.unwrap();
        }
        assert!(!state.has_applied("a") && state.has_applied("b") && state.has_applied("c"));
        assert_eq!(
            state.apply_once("a", deposit).await,
            Ok(40),
            "forgotten: applied again"
        );
        let long = "x".repeat(MAX_KEY_BYTES + 1);
        for key in ["", long.as_str()] {
            assert!(matches!(
                state.apply_once(key, deposit).await,
                Err(StateError::InvalidKey(_))
            ));
        }
        assert_eq!(state.balance, 40);
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Account {
        balance: u64,
    }

    #[test]
    fn a_state_round_trips_through_its_envelope() {
        let keys = VecDeque::from([Remembered {
            key: "k1".into(),
            reply: serde_json::json!(5),
        }]);
        let bytes = encode(&Account { balance: 5 }, &keys).unwrap();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"rally_state":1,"value":{"balance":5},"keys":[{"key":"k1","reply":5}]}"#
        );
        let (value, keys): (Account, _) = decode(Some(&bytes)).unwrap();
        assert_eq!(value, Account { balance: 5 });
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn an_identity_never_saved_starts_from_the_default() {
        let (value, keys): (Account, _) = decode(None).unwrap();
        assert_eq!(value, Account::default());
        assert!(keys.is_empty());
    }

    #[test]
    fn raw_bytes_another_version_or_another_type_are_refused_with_the_cause() {
        let raw = decode::<Account>(Some(&7u64.to_le_bytes())).unwrap_err();
        assert!(raw.to_string().contains("raw bytes"), "{raw}");
        let newer =
            decode::<Account>(Some(br#"{"rally_state":2,"value":{"balance":1}}"#)).unwrap_err();
        assert!(newer.to_string().contains("envelope version 2"), "{newer}");
        let other = decode::<Account>(Some(br#"{"rally_state":1,"value":"x"}"#)).unwrap_err();
        assert!(matches!(other, StateError::Format(_)), "{other}");
    }

    #[test]
    fn a_field_added_with_a_default_reads_an_older_state() {
        #[derive(Default, Deserialize)]
        struct AccountV2 {
            balance: u64,
            #[serde(default)]
            overdraft: u64,
        }
        let (value, _): (AccountV2, _) = decode(Some(
            br#"{"rally_state":1,"value":{"balance":3},"keys":[]}"#,
        ))
        .unwrap();
        assert_eq!((value.balance, value.overdraft), (3, 0));
    }
}
