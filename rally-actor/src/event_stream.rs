//! Publish/subscribe by message type, within one actor system.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use crate::sync::RwLock;
use crate::{ActorId, Message, Recipient, SendError};

/// The system's event bus: actors subscribe to a message type; `publish` sends a clone of the
/// event to every subscriber of that type.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
///
/// #[derive(Clone)]
/// struct Tick;
/// impl Message for Tick { type Reply = (); }
/// struct Listener;
/// impl Actor for Listener {}
/// impl Handler<Tick> for Listener {
///     async fn handle(&mut self, _: Tick, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
/// }
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let listener = system.spawn(Listener).unwrap();
/// system.event_stream().subscribe(listener.recipient::<Tick>());
/// assert_eq!(system.event_stream().publish(Tick), 1);
/// # system.shutdown().await.unwrap();
/// # }
/// ```
#[derive(Clone, Default)]
pub struct EventStream {
    subscribers: Arc<RwLock<Subscribers>>,
}

/// Per event type, its subscribers (each a `Recipient<E>` of that type).
type Subscribers = HashMap<TypeId, Vec<Box<dyn Any + Send + Sync>>>;

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl EventStream {
    /// Subscribes a recipient to events of type `E` (once; a second subscription of the same
    /// actor is ignored).
    pub fn subscribe<E: Message<Reply = ()> + Clone>(&self, recipient: Recipient<E>) {
        let mut map = self.subscribers.write();
        let list = map.entry(TypeId::of::<E>()).or_default();
        let known = list.iter().any(|s| {
            s.downcast_ref::<Recipient<E>>()
                .is_some_and(|r| r.id() == recipient.id())
        });
        if !known {
            list.push(Box::new(recipient));
        }
    }

    /// Removes an actor's subscription to `E`.
    pub fn unsubscribe<E: Message<Reply = ()> + Clone>(&self, actor: ActorId) {
        let mut map = self.subscribers.write();
        if let Some(list) = map.get_mut(&TypeId::of::<E>()) {
            list.retain(|s| {
                s.downcast_ref::<Recipient<E>>()
                    .is_none_or(|r| r.id() != actor)
            });
        }
    }

    /// Whether anyone listens to `E`.
    pub fn has_subscribers<E: 'static>(&self) -> bool {
        let map = self.subscribers.read();
        map.get(&TypeId::of::<E>())
            .is_some_and(|list| !list.is_empty())
    }

    /// Sends a clone of `event` to every subscriber of its type; returns how many took it.
    /// Subscribers that have stopped are removed.
    pub fn publish<E: Message<Reply = ()> + Clone>(&self, event: E) -> usize {
        let recipients: Vec<Recipient<E>> = {
            let map = self.subscribers.read();
            match map.get(&TypeId::of::<E>()) {
                Some(list) => list
                    .iter()
                    .filter_map(|s| s.downcast_ref::<Recipient<E>>().cloned())
                    .collect(),
                None => return 0,
            }
        };
        let mut delivered = 0;
        for recipient in recipients {
            match recipient.tell(event.clone()) {
                Ok(()) => delivered += 1,
                Err(SendError::Stopped(_)) => self.unsubscribe::<E>(recipient.id()),
                Err(_) => {}
            }
        }
        delivered
    }
}
