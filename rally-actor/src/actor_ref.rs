//! Typed handles to actors: [`ActorRef`], [`Recipient`], [`WeakActorRef`].
//!
//! An `ActorRef<A>` is the same type whether the actor runs in this process or on another node:
//! a transport (such as `rally-remote`) makes a ref to a remote actor by implementing
//! [`ExternalTarget`] and calling [`ActorRef::external`]. User code never changes.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::dead_letters::{DeadLetterReason, DeadLetters};
use crate::envelope::{ReplyError, ReplySink, ReplyTo};
use crate::mailbox::{EnqueueError, Mailbox, Overflow, SystemMsg};
use crate::watch::TerminationSink;
use crate::{Actor, AskError, Envelope, Handler, Message, SendError};

/// A process-unique actor identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub(crate) u64);

impl ActorId {
    /// The raw number (unique within one process).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Why a transport or mailbox did not take an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undelivered {
    /// The actor has stopped.
    Stopped,
    /// The bounded mailbox (or a transport's bounded queue) is full and refuses the message.
    Full,
    /// A transport refused the message, with the reason.
    Refused(String),
}

/// An envelope that could not be delivered, handed back with the reason.
pub struct DeliveryError<A: Actor> {
    /// The envelope, untouched.
    pub envelope: Envelope<A>,
    /// Why it was not delivered.
    pub reason: Undelivered,
}

impl<A: Actor> fmt::Debug for DeliveryError<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryError")
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

/// An actor reached through something other than a local mailbox (another node).
///
/// Implemented by transports; [`ActorRef::external`] wraps it so that user code sees an ordinary
/// `ActorRef<A>`.
pub trait ExternalTarget<A: Actor>: Send + Sync + 'static {
    /// The id this process uses for the target.
    fn id(&self) -> ActorId;
    /// The target's full path, e.g. `rally://bench@127.0.0.1:2552/user/echo`.
    fn path(&self) -> &Arc<str>;
    /// Takes the envelope for delivery, or hands it back.
    fn deliver(&self, envelope: Envelope<A>) -> Result<(), DeliveryError<A>>;
    /// Registers a watcher that receives `Terminated` once when the target stops or becomes
    /// unreachable.
    fn watch(&self, watcher: Arc<dyn TerminationSink>);
    /// Removes a watcher.
    fn unwatch(&self, watcher: crate::ActorId);
    /// Asks the target to stop.
    fn stop(&self);
    /// The call filters of the system it is sent through, which a send from code outside any
    /// actor passes (see [`EntryFilters`](crate::EntryFilters)); none by default.
    fn entry_filters(&self) -> Option<&crate::EntryFilters> {
        None
    }
}

/// A typed handle to an actor. Cheap to clone; equal when it points at the same actor.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
///
/// struct Double;
/// impl Actor for Double {}
/// struct N(u32);
/// impl Message for N { type Reply = u32; }
/// impl Handler<N> for Double {
///     async fn handle(&mut self, n: N, _: &mut Context<Self>) -> ActorResult<u32> { Ok(n.0 * 2) }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let double = system.spawn(Double).unwrap();
/// assert_eq!(double.ask(N(21), Duration::from_secs(1)).await, Ok(42));
/// system.shutdown().await.unwrap();
/// # }
/// ```
pub struct ActorRef<A: Actor> {
    backend: Backend<A>,
}

enum Backend<A: Actor> {
    Local(Arc<Mailbox<A>>, DeadLetters),
    External(Arc<dyn ExternalTarget<A>>),
}

impl<A: Actor> Clone for Backend<A> {
    fn clone(&self) -> Self {
        match self {
            Self::Local(mailbox, dead) => Self::Local(mailbox.clone(), dead.clone()),
            Self::External(target) => Self::External(target.clone()),
        }
    }
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
        }
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> Hash for ActorRef<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

impl<A: Actor> fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorRef({} {})", self.id(), self.path())
    }
}

impl<A: Actor> ActorRef<A> {
    pub(crate) fn local(mailbox: Arc<Mailbox<A>>, dead_letters: DeadLetters) -> Self {
        Self {
            backend: Backend::Local(mailbox, dead_letters),
        }
    }

    /// Wraps a transport's target as an ordinary `ActorRef`.
    pub fn external(target: Arc<dyn ExternalTarget<A>>) -> Self {
        Self {
            backend: Backend::External(target),
        }
    }

    /// The actor's id.
    pub fn id(&self) -> ActorId {
        match &self.backend {
            Backend::Local(mailbox, _) => mailbox.id,
            Backend::External(target) => target.id(),
        }
    }

    /// The actor's path: `/user/name` locally, with a node address for remote actors.
    pub fn path(&self) -> &Arc<str> {
        match &self.backend {
            Backend::Local(mailbox, _) => &mailbox.path,
            Backend::External(target) => target.path(),
        }
    }

    /// Whether the actor lives in this process.
    pub fn is_local(&self) -> bool {
        matches!(self.backend, Backend::Local(..))
    }

    /// Whether a local actor has stopped (always `false` for an external target, whose state
    /// is learnt by watching it).
    pub fn is_stopped(&self) -> bool {
        match &self.backend {
            Backend::Local(mailbox, _) => mailbox.is_closed(),
            Backend::External(_) => false,
        }
    }

    /// User messages waiting in a local actor's mailbox (`None` for an external target).
    pub fn mailbox_len(&self) -> Option<usize> {
        self.mailbox().map(|mailbox| mailbox.len())
    }

    /// User messages a local actor has not finished: those waiting in its mailbox plus the one
    /// it is handling, so an actor busy with a long message and an empty mailbox has a load
    /// of 1, not 0 (`None` for an external target). [`Routing::SmallestMailbox`](crate::Routing)
    /// routes by it.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorSystem};
    ///
    /// struct Idle;
    /// impl Actor for Idle {}
    /// # #[tokio::main] async fn main() {
    /// let idle = ActorSystem::new("doc").spawn(Idle).unwrap();
    /// assert_eq!(idle.load(), Some(0));
    /// # }
    /// ```
    pub fn load(&self) -> Option<usize> {
        self.mailbox().map(|mailbox| mailbox.load())
    }

    /// The bound of a local actor's mailbox (`None` when unbounded or external).
    pub fn mailbox_capacity(&self) -> Option<usize> {
        self.mailbox().and_then(|mailbox| mailbox.limit())
    }

    /// Sends a message without waiting; the reply, if any, is dropped.
    ///
    /// # Errors
    ///
    /// [`SendError::Stopped`] when the actor has stopped, [`SendError::Full`] when its bounded
    /// mailbox refuses the message, [`SendError::Refused`] when a transport refuses it. The
    /// message comes back in the error.
    pub fn tell<M>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        self.send_with(msg, ReplyTo::ignore())
    }

    /// Sends a message, waiting for room if the actor's bounded mailbox uses
    /// [`Overflow::Backpressure`]; otherwise the same as [`tell`](Self::tell).
    ///
    /// # Errors
    ///
    /// As for [`tell`](Self::tell).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits drops the message; it is never half-sent.
    pub async fn send<M>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        let envelope = self
            .envelope(msg, ReplyTo::ignore(), self.entry_filters())
            .map_err(|(msg, why)| SendError::Rejected(msg, why))?;
        self.deliver_waiting(envelope)
            .await
            .map_err(|error| undelivered(error))
    }

    /// Sends a message and waits at most `timeout` for the reply.
    ///
    /// # Errors
    ///
    /// [`AskError::InvalidTimeout`] for a zero timeout (nothing is sent), `Timeout`, `Stopped`,
    /// `Full`, `Failed` (the handler returned an error or panicked), `Undeliverable`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the reply; the message may still be handled.
    pub async fn ask<M>(&self, msg: M, timeout: Duration) -> Result<M::Reply, AskError>
    where
        M: Message,
        A: Handler<M>,
    {
        if timeout.is_zero() {
            return Err(AskError::InvalidTimeout);
        }
        let (reply, rx) = ReplyTo::channel();
        let envelope = self
            .envelope(msg, reply, self.entry_filters())
            .map_err(|(_, why)| AskError::Rejected(why))?;
        if let Err(error) = self.deliver_waiting(envelope).await {
            return Err(match error.reason {
                Undelivered::Stopped => AskError::Stopped,
                Undelivered::Full => AskError::Full,
                Undelivered::Refused(why) => AskError::Undeliverable(why),
            });
        }
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(AskError::Timeout(timeout)),
            // The reply destination was dropped unanswered (a handler that took it with
            // `reply_later` and let it go); a panic sends its message before unwinding.
            Ok(Err(_)) => Err(AskError::Failed(
                "the reply destination was dropped unanswered".to_owned(),
            )),
            Ok(Ok(reply)) => reply.map_err(AskError::from),
        }
    }

    /// Sends a message whose reply is delivered, as a message, to `reply_to` (typically the
    /// sending actor itself): the non-blocking request/response pattern between actors.
    ///
    /// # Errors
    ///
    /// As for [`tell`](Self::tell).
    pub fn request<M>(&self, msg: M, reply_to: &Recipient<M::Reply>) -> Result<(), SendError<M>>
    where
        M: Message,
        M::Reply: Message,
        A: Handler<M>,
    {
        self.send_with(msg, ReplyTo::sink(reply_to.target.clone()))
    }

    /// Sends a message with an explicit reply destination.
    ///
    /// # Errors
    ///
    /// As for [`tell`](Self::tell).
    pub fn send_with<M>(&self, msg: M, reply: ReplyTo<M::Reply>) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        let envelope = self
            .envelope(msg, reply, self.entry_filters())
            .map_err(|(msg, why)| SendError::Rejected(msg, why))?;
        self.deliver(envelope).map_err(undelivered)
    }

    /// The envelope of a message sent now: with the request context of the code running now,
    /// after its call filters' `on_send` (which may reject it: the message comes back with why);
    /// from code outside any actor, after `entry`'s.
    fn envelope<M>(
        &self,
        msg: M,
        reply: ReplyTo<M::Reply>,
        entry: Option<&crate::EntryFilters>,
    ) -> Result<Envelope<A>, (M, String)>
    where
        M: Message,
        A: Handler<M>,
    {
        let context = crate::filter::context_for_send(
            entry,
            || self.path(),
            None,
            std::any::type_name::<M>(),
        );
        match context {
            Ok(context) => Ok(Envelope::new(msg, reply).in_context(context)),
            Err(rejection) => Err((msg, rejection.into_reason())),
        }
    }

    /// The call filters of the system this actor is sent to through.
    pub(crate) fn entry_filters(&self) -> Option<&crate::EntryFilters> {
        match &self.backend {
            Backend::Local(mailbox, _) => Some(&mailbox.entry),
            Backend::External(target) => target.entry_filters(),
        }
    }

    /// Delivers a prepared envelope (used by transports and by `send_with`).
    ///
    /// A bounded mailbox with [`Overflow::DropNewest`] takes a message it has no room for and
    /// sends it to dead letters, so this returns `Ok` for it.
    ///
    /// # Errors
    ///
    /// The envelope comes back with [`Undelivered`] when the actor has stopped (also counted as a
    /// dead letter), its mailbox refuses it, or a transport refuses it.
    pub fn deliver(&self, envelope: Envelope<A>) -> Result<(), DeliveryError<A>> {
        match &self.backend {
            Backend::Local(mailbox, dead) => match mailbox.enqueue(envelope) {
                Ok(()) => Ok(()),
                Err(EnqueueError::Full(envelope)) if mailbox.overflow == Overflow::DropNewest => {
                    dead.record(
                        &mailbox.path,
                        envelope.type_name(),
                        DeadLetterReason::MailboxFull,
                    );
                    drop(envelope.reject(ReplyError::MailboxFull));
                    Ok(())
                }
                Err(EnqueueError::Full(envelope)) => Err(DeliveryError {
                    envelope,
                    reason: Undelivered::Full,
                }),
                Err(EnqueueError::Stopped(envelope)) => {
                    dead.record(
                        &mailbox.path,
                        envelope.type_name(),
                        DeadLetterReason::Stopped,
                    );
                    Err(DeliveryError {
                        envelope,
                        reason: Undelivered::Stopped,
                    })
                }
            },
            Backend::External(target) => target.deliver(envelope),
        }
    }

    /// Like [`deliver`](Self::deliver), but waits for room in a full bounded mailbox whose
    /// policy is [`Overflow::Backpressure`].
    async fn deliver_waiting(&self, envelope: Envelope<A>) -> Result<(), DeliveryError<A>> {
        match &self.backend {
            Backend::Local(mailbox, dead) if mailbox.overflow == Overflow::Backpressure => mailbox
                .enqueue_waiting(envelope)
                .await
                .map_err(|error| match error {
                    EnqueueError::Stopped(envelope) => {
                        dead.record(
                            &mailbox.path,
                            envelope.type_name(),
                            DeadLetterReason::Stopped,
                        );
                        DeliveryError {
                            envelope,
                            reason: Undelivered::Stopped,
                        }
                    }
                    EnqueueError::Full(envelope) => DeliveryError {
                        envelope,
                        reason: Undelivered::Full,
                    },
                }),
            _ => self.deliver(envelope),
        }
    }

    /// A handle that accepts only `M`, for code that should not know the actor's type.
    pub fn recipient<M>(&self) -> Recipient<M>
    where
        M: Message,
        A: Handler<M>,
    {
        Recipient {
            target: Arc::new(self.clone()),
        }
    }

    /// Asks the actor to stop: it finishes the message in hand, stops its children, runs
    /// `stopped`, and its remaining messages go to dead letters.
    pub fn stop(&self) {
        match &self.backend {
            // Already stopped is fine: stopping is idempotent.
            Backend::Local(mailbox, _) => drop(mailbox.system(SystemMsg::Stop)),
            Backend::External(target) => target.stop(),
        }
    }

    /// A handle that does not keep a local actor's mailbox alive.
    pub fn downgrade(&self) -> WeakActorRef<A> {
        WeakActorRef {
            backend: match &self.backend {
                Backend::Local(mailbox, dead) => {
                    WeakBackend::Local(Arc::downgrade(mailbox), dead.clone())
                }
                Backend::External(target) => WeakBackend::External(target.clone()),
            },
        }
    }

    pub(crate) fn mailbox(&self) -> Option<&Arc<Mailbox<A>>> {
        match &self.backend {
            Backend::Local(mailbox, _) => Some(mailbox),
            Backend::External(_) => None,
        }
    }

    /// Registers a watcher that is told once when this actor stops (at once if it already has).
    /// Actors use [`Context::watch`](crate::Context::watch); transports use this to watch on
    /// behalf of a remote actor.
    pub fn watch_with(&self, watcher: Arc<dyn TerminationSink>) {
        match &self.backend {
            Backend::Local(mailbox, _) => {
                if let Err(SystemMsg::Watch(watcher)) = mailbox.system(SystemMsg::Watch(watcher)) {
                    // Already dead: the watcher still hears about it, once.
                    // The reason is set as the mailbox closes.
                    let reason = mailbox
                        .stop_reason()
                        .unwrap_or(crate::TerminationReason::Unknown);
                    watcher.notify(crate::Terminated::new(
                        mailbox.id,
                        mailbox.path.clone(),
                        reason,
                    ));
                }
            }
            Backend::External(target) => target.watch(watcher),
        }
    }

    /// Removes a watcher registered with [`watch_with`](Self::watch_with).
    pub fn unwatch_with(&self, watcher: ActorId) {
        match &self.backend {
            Backend::Local(mailbox, _) => drop(mailbox.system(SystemMsg::Unwatch(watcher))),
            Backend::External(target) => target.unwatch(watcher),
        }
    }
}

/// Turns an undelivered envelope this module built back into the caller's message.
fn undelivered<A: Actor, M: Message>(error: DeliveryError<A>) -> SendError<M> {
    match error.reason {
        Undelivered::Stopped => {
            SendError::Stopped(take_message(error.envelope, ReplyError::Stopped))
        }
        Undelivered::Full => SendError::Full(take_message(error.envelope, ReplyError::MailboxFull)),
        Undelivered::Refused(why) => {
            let msg = take_message(error.envelope, ReplyError::Undeliverable(why.clone()));
            SendError::Refused(msg, why)
        }
    }
}

/// Takes the message back out of an envelope this module built, failing its reply destination.
fn take_message<A: Actor, M: Message>(envelope: Envelope<A>, error: ReplyError) -> M {
    *envelope
        .reject(error)
        .downcast::<M>()
        .expect("send_with built this envelope from an M")
}

/// A handle that does not keep a local actor alive; see [`ActorRef::downgrade`].
pub struct WeakActorRef<A: Actor> {
    backend: WeakBackend<A>,
}

enum WeakBackend<A: Actor> {
    Local(Weak<Mailbox<A>>, DeadLetters),
    External(Arc<dyn ExternalTarget<A>>),
}

impl<A: Actor> Clone for WeakActorRef<A> {
    fn clone(&self) -> Self {
        Self {
            backend: match &self.backend {
                WeakBackend::Local(weak, dead) => WeakBackend::Local(weak.clone(), dead.clone()),
                WeakBackend::External(target) => WeakBackend::External(target.clone()),
            },
        }
    }
}

impl<A: Actor> fmt::Debug for WeakActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeakActorRef")
    }
}

impl<A: Actor> WeakActorRef<A> {
    /// The strong handle, if the actor's mailbox still exists.
    pub fn upgrade(&self) -> Option<ActorRef<A>> {
        match &self.backend {
            WeakBackend::Local(weak, dead) => weak
                .upgrade()
                .map(|mailbox| ActorRef::local(mailbox, dead.clone())),
            WeakBackend::External(target) => Some(ActorRef::external(target.clone())),
        }
    }
}

/// A handle that accepts one message type, whatever the actor behind it.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Recipient};
///
/// #[derive(Clone)]
/// struct Log(String);
/// impl Message for Log { type Reply = (); }
/// struct Printer;
/// impl Actor for Printer {}
/// impl Handler<Log> for Printer {
///     async fn handle(&mut self, msg: Log, _: &mut Context<Self>) -> ActorResult<()> {
///         println!("{}", msg.0);
///         Ok(())
///     }
/// }
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let log: Recipient<Log> = system.spawn(Printer).unwrap().recipient();
/// log.tell(Log("hello".into())).unwrap();
/// # system.shutdown().await.unwrap();
/// # }
/// ```
pub struct Recipient<M: Message> {
    target: Arc<dyn RecipientTarget<M>>,
}

impl<M: Message> Clone for Recipient<M> {
    fn clone(&self) -> Self {
        Self {
            target: self.target.clone(),
        }
    }
}

impl<M: Message> fmt::Debug for Recipient<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recipient({})", self.target.target_id())
    }
}

impl<M: Message> Recipient<M> {
    /// The actor's id.
    pub fn id(&self) -> ActorId {
        self.target.target_id()
    }

    /// Sends without waiting; see [`ActorRef::tell`].
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::tell`].
    pub fn tell(&self, msg: M) -> Result<(), SendError<M>> {
        self.target.send_with(msg, ReplyTo::ignore())
    }

    /// Sends with an explicit reply destination; see [`ActorRef::send_with`].
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::tell`].
    pub fn send_with(&self, msg: M, reply: ReplyTo<M::Reply>) -> Result<(), SendError<M>> {
        self.target.send_with(msg, reply)
    }

    /// Sends and waits for the reply; see [`ActorRef::ask`].
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::ask`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the reply; the message may still be handled.
    pub async fn ask(&self, msg: M, timeout: Duration) -> Result<M::Reply, AskError> {
        self.target.ask_boxed(msg, timeout).await
    }
}

trait RecipientTarget<M: Message>: ReplySink<M> {
    fn target_id(&self) -> ActorId;
    fn send_with(&self, msg: M, reply: ReplyTo<M::Reply>) -> Result<(), SendError<M>>;
    fn ask_boxed(
        &self,
        msg: M,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'_, Result<M::Reply, AskError>>;
}

impl<A, M> RecipientTarget<M> for ActorRef<A>
where
    A: Handler<M>,
    M: Message,
{
    fn target_id(&self) -> ActorId {
        self.id()
    }

    fn send_with(&self, msg: M, reply: ReplyTo<M::Reply>) -> Result<(), SendError<M>> {
        ActorRef::send_with(self, msg, reply)
    }

    fn ask_boxed(
        &self,
        msg: M,
        timeout: Duration,
    ) -> futures_util::future::BoxFuture<'_, Result<M::Reply, AskError>> {
        Box::pin(self.ask(msg, timeout))
    }
}

impl<A, M> ReplySink<M> for ActorRef<A>
where
    A: Handler<M>,
    M: Message,
{
    fn send_reply(&self, reply: Result<M, ReplyError>) {
        match reply {
            Ok(msg) => {
                // A reply is not where a request enters: delivered by code outside any actor
                // (a transport, with a reply from another node) it passes no filter. A stopped
                // requester is counted as a dead letter by `deliver`.
                if let Ok(envelope) = self.envelope(msg, ReplyTo::ignore(), None) {
                    let _ = self.deliver(envelope);
                }
            }
            Err(error) => {
                tracing::debug!(target = %self.path(), %error, "a request got no reply");
            }
        }
    }
}
