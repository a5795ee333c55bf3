//! What is active: the identities of a kind running now, with their member, age and last
//! message, listed a page at a time on one member ([`VirtualActors::active`]) or across the
//! cluster ([`VirtualActors::active_in_cluster`]), which asks every member hosting the kind
//! through a well-known endpoint (`rally.grains.active`) on Rally's own connections.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rally_actor::{ActorResult, Context, Handler, Message};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage, RemoteNode};
use serde::{Deserialize, Serialize};

use super::core::CorePage;
use super::runtime::{Runtime, VirtualActors};
use super::transport::Transport;
use crate::member::MemberId;

/// The most identities one page may hold: a page of this size is about 100 KiB on the wire,
/// small enough for the control of a member's connection and its memory at once.
pub const MAX_ACTIVE_PAGE: usize = 1_000;

/// The name every member that runs virtual actors over Rally's connections answers listings
/// under.
pub(crate) const ENDPOINT: &str = "rally.grains.active";

/// One identity of a kind, active now.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::ActiveIdentity;
///
/// fn line(a: &ActiveIdentity) -> String {
///     format!("{} on {}: {:.0?} old, last message {:.0?} ago", a.identity, a.member, a.age, a.last_message)
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ActiveIdentity {
    /// Its kind.
    pub kind: String,
    /// Its identity.
    pub identity: String,
    /// The member it is active on (`rally://system@host:port#incarnation`).
    pub member: String,
    /// Since it was activated, to within a second.
    pub age: Duration,
    /// Since it was last handed a message or finished one (or was activated).
    pub last_message: Duration,
    /// Whether it is handling a message now.
    pub busy: bool,
    /// Messages waiting for it on its member.
    pub queued: usize,
}

/// Where a listing goes on: the member and its position there. Opaque; written and read as
/// text (`"17@rally://shop@10.0.0.1:2552#42"`), so that it can travel in a URL.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{ActiveCursor, ActiveError};
///
/// let cursor: ActiveCursor = "17@rally://shop@10.0.0.1:2552#42".parse().unwrap();
/// assert_eq!(cursor.to_string(), "17@rally://shop@10.0.0.1:2552#42");
/// assert!(matches!("seventeen".parse::<ActiveCursor>(), Err(ActiveError::InvalidCursor(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ActiveCursor {
    member: String,
    position: u32,
}

impl fmt::Display for ActiveCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.position, self.member)
    }
}

impl FromStr for ActiveCursor {
    type Err = ActiveError;

    fn from_str(text: &str) -> Result<Self, ActiveError> {
        let bad = || ActiveError::InvalidCursor(text.chars().take(200).collect());
        let (position, member) = text.split_once('@').ok_or_else(bad)?;
        let position = position.parse().map_err(|_| bad())?;
        if !member.starts_with("rally://") || !member.contains('#') {
            return Err(bad());
        }
        Ok(Self {
            member: member.to_owned(),
            position,
        })
    }
}

/// A page of a listing: the identities, where the next page starts (`None`: this was the
/// last), and the members that did not answer (their identities are missing from the listing).
///
/// # Example
///
/// See [`VirtualActors::active_in_cluster`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ActivePage {
    /// The identities, by member, then in the member's own order.
    pub identities: Vec<ActiveIdentity>,
    /// Give it to the next call to go on; `None` when the listing is complete.
    pub next: Option<ActiveCursor>,
    /// Members hosting the kind that did not answer in time, with why; the listing went on
    /// past them.
    pub skipped: Vec<(String, String)>,
}

/// Why a listing was refused.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::{ActiveError, MAX_ACTIVE_PAGE};
///
/// let error = ActiveError::InvalidLimit { limit: 0, max: MAX_ACTIVE_PAGE };
/// assert!(error.to_string().contains("between 1 and 1000"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ActiveError {
    /// The page size is 0 or above [`MAX_ACTIVE_PAGE`].
    #[error("a page holds between 1 and {max} identities, not {limit}")]
    InvalidLimit {
        /// The size asked for.
        limit: usize,
        /// [`MAX_ACTIVE_PAGE`].
        max: usize,
    },
    /// No member in this member's view declares the kind.
    #[error("no member hosts kind {kind:?}{}", suggestion.as_ref().map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    UnknownKind {
        /// The kind asked for.
        kind: String,
        /// A kind with a similar name that is hosted.
        suggestion: Option<String>,
    },
    /// This member does not host the kind (for a listing of this member alone).
    #[error("this member does not host kind {0:?}")]
    NotHostedHere(String),
    /// The cursor is not one a listing gave.
    #[error("not a listing cursor: {0:?}")]
    InvalidCursor(String),
    /// This member's virtual-actor runtime is not started.
    #[error("virtual actors are not started on this member")]
    NotStarted,
}

impl VirtualActors {
    /// At most `limit` identities of `kind` active on this member, from `cursor` on (`None`:
    /// from the start). Costs what the page holds, whatever the number of activations.
    ///
    /// # Errors
    ///
    /// [`ActiveError::InvalidLimit`] for 0 or more than [`MAX_ACTIVE_PAGE`];
    /// [`ActiveError::NotHostedHere`] for a kind this member does not host;
    /// [`ActiveError::InvalidCursor`] for a cursor of another member.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
    /// # use rally::cluster::{Cluster, ClusterConfig, MemberId};
    /// # use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
    /// # use rally::cluster::virtual_actors::{Activation, GrainMessages, GrainNetwork, VirtualActor, VirtualActors};
    /// # use rally::remote::{Incarnation, RemoteMessage};
    /// # use serde::{Deserialize, Serialize};
    /// # struct Cart;
    /// # impl Actor for Cart {}
    /// # impl VirtualActor for Cart {
    /// #     const KIND: &'static str = "cart";
    /// #     async fn activate(_: Activation) -> ActorResult<Self> { Ok(Cart) }
    /// #     fn messages(table: &mut GrainMessages<Self>) { table.add::<Ping>(); }
    /// # }
    /// # #[derive(Serialize, Deserialize)] struct Ping;
    /// # impl Message for Ping { type Reply = (); }
    /// # impl RemoteMessage for Ping { const MANIFEST: &'static str = "doc.Ping"; }
    /// # impl Handler<Ping> for Cart {
    /// #     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// # }
    /// # #[tokio::main] async fn main() {
    /// # let system = ActorSystem::new("doc");
    /// # let me = MemberId::new("rally://doc@mem:1".parse().unwrap(), Incarnation(1), 1).with_kinds(["cart"]);
    /// # let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
    /// let grains = VirtualActors::builder(&cluster, &system).kind::<Cart>().start_in_memory(&GrainNetwork::new()).unwrap();
    /// # cluster.wait_until_up(Duration::from_secs(10)).await.unwrap();
    /// for user in ["ada", "bob", "cy"] {
    ///     grains.get::<Cart>(user).unwrap().ask(Ping, Duration::from_secs(5)).await.unwrap();
    /// }
    /// let first = grains.active("cart", None, 2).unwrap();
    /// assert_eq!(first.identities.len(), 2);
    /// let rest = grains.active("cart", first.next.as_ref(), 2).unwrap();
    /// assert_eq!(rest.identities.len(), 1);
    /// assert!(rest.next.is_none());
    /// # }
    /// ```
    pub fn active(
        &self,
        kind: &str,
        cursor: Option<&ActiveCursor>,
        limit: usize,
    ) -> Result<ActivePage, ActiveError> {
        check_limit(limit)?;
        let runtime = &self.runtime;
        let me = runtime.local().to_string();
        let from = match cursor {
            None => 0,
            Some(c) if c.member == me => c.position,
            Some(c) => return Err(ActiveError::InvalidCursor(c.to_string())),
        };
        let page = runtime
            .active(kind, from, limit)
            .ok_or_else(|| ActiveError::NotHostedHere(kind.to_owned()))?;
        Ok(ActivePage {
            next: page.next.map(|position| ActiveCursor {
                member: me.clone(),
                position,
            }),
            identities: identities(kind, &me, page),
            skipped: Vec::new(),
        })
    }

    /// At most `limit` identities of `kind` active anywhere in the cluster, from `cursor` on
    /// (`None`: from the start): the members that host the kind in this member's view, in the
    /// order of their names, are asked for their pages in turn (this member directly, the
    /// others through their `rally.grains.active` endpoint), each within `timeout`. An
    /// identity active throughout a listing is listed once; one activated, moved or
    /// passivated meanwhile may be listed once, twice (before and after a move) or not at all.
    ///
    /// # Errors
    ///
    /// [`ActiveError::InvalidLimit`], [`ActiveError::InvalidCursor`], or
    /// [`ActiveError::UnknownKind`] when no member in the view declares `kind`. A member that
    /// does not answer is no error: it is named in [`ActivePage::skipped`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a listing changes nothing, and a dropped call leaves no state behind.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn run(grains: rally::cluster::virtual_actors::VirtualActors) {
    /// use std::time::Duration;
    ///
    /// let mut cursor = None;
    /// loop {
    ///     let page = grains.active_in_cluster("cart", cursor.as_ref(), 500, Duration::from_secs(2)).await.unwrap();
    ///     for cart in &page.identities {
    ///         println!("{} on {}, {:?} old", cart.identity, cart.member, cart.age);
    ///     }
    ///     match page.next {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn active_in_cluster(
        &self,
        kind: &str,
        cursor: Option<&ActiveCursor>,
        limit: usize,
        timeout: Duration,
    ) -> Result<ActivePage, ActiveError> {
        check_limit(limit)?;
        let runtime = Arc::clone(&self.runtime);
        let mut hosts: Vec<(String, MemberId)> = runtime
            .hosts(kind)
            .into_iter()
            .map(|m| (m.to_string(), m))
            .collect();
        if hosts.is_empty() && !runtime.hosts_locally(kind) {
            return Err(ActiveError::UnknownKind {
                kind: kind.to_owned(),
                suggestion: runtime.similar_kind(kind),
            });
        }
        hosts.sort_by(|a, b| a.0.cmp(&b.0));
        let (start_member, mut from) = match cursor {
            None => (String::new(), 0),
            Some(c) => (c.member.clone(), c.position),
        };
        let mut page = ActivePage::default();
        let mut remaining = limit;
        let me = runtime.local().clone();
        let pending: Vec<(String, MemberId)> = hosts
            .into_iter()
            .filter(|(name, _)| *name >= start_member)
            .collect();
        for (i, (name, member)) in pending.iter().enumerate() {
            if *name != start_member {
                from = 0;
            }
            let answer = if *member == me {
                runtime
                    .active(kind, from, remaining)
                    .ok_or_else(|| "this member does not host the kind now".to_owned())
            } else {
                ask_member(&runtime, member, kind, from, remaining, timeout).await
            };
            let member_page = match answer {
                Ok(p) => p,
                Err(why) => {
                    page.skipped.push((name.clone(), why));
                    continue;
                }
            };
            remaining -= member_page.entries.len().min(remaining);
            let next = member_page.next;
            page.identities.extend(identities(kind, name, member_page));
            if let Some(position) = next {
                page.next = Some(ActiveCursor {
                    member: name.clone(),
                    position,
                });
                return Ok(page);
            }
            if remaining == 0 {
                page.next = pending.get(i + 1).map(|(next, _)| ActiveCursor {
                    member: next.clone(),
                    position: 0,
                });
                return Ok(page);
            }
        }
        Ok(page)
    }
}

fn check_limit(limit: usize) -> Result<(), ActiveError> {
    if limit == 0 || limit > MAX_ACTIVE_PAGE {
        return Err(ActiveError::InvalidLimit {
            limit,
            max: MAX_ACTIVE_PAGE,
        });
    }
    Ok(())
}

fn identities(kind: &str, member: &str, page: CorePage) -> Vec<ActiveIdentity> {
    page.entries
        .into_iter()
        .map(|e| ActiveIdentity {
            kind: kind.to_owned(),
            identity: e.identity.to_string(),
            member: member.to_owned(),
            age: e.age,
            last_message: e.last_message,
            busy: e.busy,
            queued: e.queued,
        })
        .collect()
}

/// Asks `member`'s endpoint for a page.
async fn ask_member(
    runtime: &Runtime,
    member: &MemberId,
    kind: &str,
    from: u32,
    limit: usize,
    timeout: Duration,
) -> Result<CorePage, String> {
    let Transport::Remote { node, .. } = &runtime.shared.transport else {
        return Err("members in one process (an in-memory network) list only their own".into());
    };
    let endpoint = node.lookup::<Endpoint>(&member.address, ENDPOINT);
    let request = ListActive {
        kind: kind.to_owned(),
        from,
        limit: u32::try_from(limit).unwrap_or(u32::MAX),
    };
    match endpoint.ask(request, timeout).await {
        Ok(Ok(page)) => Ok(CorePage {
            next: page.next,
            entries: page
                .entries
                .into_iter()
                .map(|e| super::core::ActiveEntry {
                    identity: Arc::from(e.identity),
                    age: Duration::from_millis(e.age_ms),
                    last_message: Duration::from_millis(e.last_message_ms),
                    busy: e.busy,
                    queued: e.queued as usize,
                })
                .collect(),
        }),
        Ok(Err(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// Makes this member answer listings from other members (called when the runtime starts over
/// Rally's connections).
pub(crate) fn expose(node: &RemoteNode, runtime: &Arc<Runtime>) {
    let endpoint = Endpoint {
        runtime: Arc::downgrade(runtime),
    };
    match node.system().spawn(endpoint) {
        Ok(actor) => {
            if let Err(e) = node.expose(ENDPOINT, &actor) {
                tracing::warn!(error = %e, "exposing the virtual actors' listing endpoint");
                actor.stop();
            }
        }
        Err(e) => tracing::warn!(error = %e, "spawning the virtual actors' listing endpoint"),
    }
}

/// "A page of your active identities of `kind`, from position `from`."
#[derive(Serialize, Deserialize)]
struct ListActive {
    kind: String,
    from: u32,
    limit: u32,
}

#[derive(Serialize, Deserialize)]
struct WireEntry {
    identity: String,
    age_ms: u64,
    last_message_ms: u64,
    busy: bool,
    queued: u64,
}

#[derive(Serialize, Deserialize)]
struct WirePage {
    entries: Vec<WireEntry>,
    next: Option<u32>,
}

impl Message for ListActive {
    type Reply = Result<WirePage, String>;
}

impl RemoteMessage for ListActive {
    const MANIFEST: &'static str = "rally.grains.ListActive";
}

/// Answers [`ListActive`] on every member running virtual actors over Rally's connections.
struct Endpoint {
    runtime: Weak<Runtime>,
}

impl rally_actor::Actor for Endpoint {}

impl Handler<ListActive> for Endpoint {
    async fn handle(
        &mut self,
        msg: ListActive,
        _: &mut Context<Self>,
    ) -> ActorResult<Result<WirePage, String>> {
        let limit = msg.limit as usize;
        if limit == 0 || limit > MAX_ACTIVE_PAGE {
            return Ok(Err(format!(
                "a page holds between 1 and {MAX_ACTIVE_PAGE} identities"
            )));
        }
        let Some(runtime) = self.runtime.upgrade() else {
            return Ok(Err("virtual actors stopped on this member".into()));
        };
        let Some(page) = runtime.active(&msg.kind, msg.from, limit) else {
            return Ok(Err(format!(
                "this member does not host kind {:?}",
                msg.kind
            )));
        };
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Ok(Ok(WirePage {
            next: page.next,
            entries: page
                .entries
                .into_iter()
                .map(|e| WireEntry {
                    identity: e.identity.to_string(),
                    age_ms: millis(e.age),
                    last_message_ms: millis(e.last_message),
                    busy: e.busy,
                    queued: e.queued as u64,
                })
                .collect(),
        }))
    }
}

impl RemoteActor for Endpoint {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<ListActive>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_they_write_and_refuse_anything_else() {
        let cursor = ActiveCursor {
            member: "rally://shop@127.0.0.1:2552#7".into(),
            position: 42,
        };
        assert_eq!(cursor.to_string().parse::<ActiveCursor>(), Ok(cursor));
        for bad in [
            "",
            "42",
            "x@rally://a@b:1#2",
            "42@http://a#1",
            "42@rally://a@b:1",
        ] {
            assert!(
                matches!(
                    bad.parse::<ActiveCursor>(),
                    Err(ActiveError::InvalidCursor(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_page_size_of_zero_or_over_the_maximum_is_refused() {
        assert_eq!(
            check_limit(0),
            Err(ActiveError::InvalidLimit {
                limit: 0,
                max: MAX_ACTIVE_PAGE
            })
        );
        assert!(check_limit(MAX_ACTIVE_PAGE + 1).is_err());
        assert!(check_limit(1).is_ok() && check_limit(MAX_ACTIVE_PAGE).is_ok());
    }
}
