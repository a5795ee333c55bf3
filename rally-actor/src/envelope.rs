//! Type-erased messages in a mailbox, and where their replies go.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use crate::context::Deferred;
use crate::filter::{self, Incoming, Outcome};
use crate::request_context::{RequestContext, Scope};
use crate::supervision::Failure;
use crate::{Actor, ActorResult, Context, Handler, Message};

/// A message for actor `A`, with its reply destination, as it sits in a mailbox.
///
/// Users never build envelopes for local sends; transports (such as `rally-remote`) use
/// [`Envelope::new`] to deliver a decoded message with a custom [`ReplyTo`], and
/// [`Envelope::message`] / [`Envelope::into_parts`] to encode one for another node.
pub struct Envelope<A: Actor>(Box<dyn Erased<A>>);

impl<A: Actor> Envelope<A> {
    /// Wraps a message and the place its reply must go.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Envelope, Handler, Message, ReplyTo};
    ///
    /// struct Ping;
    /// impl Message for Ping { type Reply = (); }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<Ping> for Echo {
    ///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// }
    /// let envelope: Envelope<Echo> = Envelope::new(Ping, ReplyTo::ignore());
    /// assert!(envelope.message().is::<Ping>());
    /// ```
    pub fn new<M>(msg: M, reply: ReplyTo<M::Reply>) -> Self
    where
        M: Message,
        A: Handler<M>,
    {
        Self(Box::new(Typed {
            msg,
            reply,
            meta: None,
        }))
    }

    /// The same envelope carrying `context` (a transport sets the one a message came with):
    /// the handler reads it with [`Context::request_context`], and it follows the handler's
    /// sends. The time of this call is when the message arrived, for
    /// [`Incoming::waited`](crate::Incoming::waited). `None` leaves the envelope as it is.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Envelope, Handler, Message, ReplyTo, RequestContext};
    ///
    /// struct Ping;
    /// impl Message for Ping { type Reply = (); }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<Ping> for Echo {
    ///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// }
    /// let context = RequestContext::new().with_entry("tenant", "acme").unwrap();
    /// let envelope: Envelope<Echo> = Envelope::new(Ping, ReplyTo::ignore()).in_context(Some(context.clone()));
    /// assert_eq!(envelope.context(), Some(&context));
    /// ```
    pub fn in_context(mut self, context: Option<RequestContext>) -> Self {
        if let Some(context) = context {
            self.0.set_meta(Box::new(Meta {
                context,
                arrived: Instant::now(),
            }));
        }
        self
    }

    /// The request context the message carries, if any (a transport encodes it with the
    /// message).
    pub fn context(&self) -> Option<&RequestContext> {
        self.0.meta().map(|meta| &meta.context)
    }

    /// Like [`new`](Self::new), for a message that a transport carried from elsewhere:
    /// `origin` says from where (`rally-remote` puts the sending node's address), and the
    /// handler reads it with [`Context::origin`] while it handles this message.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rally::{Actor, ActorResult, ActorSystem, Context, Envelope, Handler, Message, ReplyTo};
    ///
    /// struct WhoSent;
    /// impl Message for WhoSent { type Reply = Option<String>; }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<WhoSent> for Echo {
    ///     async fn handle(&mut self, _: WhoSent, ctx: &mut Context<Self>) -> ActorResult<Option<String>> {
    ///         Ok(ctx.origin().and_then(|o| o.downcast_ref::<String>()).cloned())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let echo = system.spawn(Echo).unwrap();
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// let origin = Arc::new("node-b".to_owned());
    /// let envelope = Envelope::with_origin(WhoSent, ReplyTo::callback(move |r| { let _ = tx.send(r); }), origin);
    /// echo.deliver(envelope).unwrap();
    /// assert_eq!(rx.await.unwrap(), Ok(Some("node-b".to_owned())));
    /// // A local send has no origin.
    /// assert_eq!(echo.ask(WhoSent, std::time::Duration::from_secs(1)).await, Ok(None));
    /// # }
    /// ```
    pub fn with_origin<M>(msg: M, reply: ReplyTo<M::Reply>, origin: Origin) -> Self
    where
        M: Message,
        A: Handler<M>,
    {
        Self(Box::new(Originated {
            typed: Typed {
                msg,
                reply,
                meta: None,
            },
            origin,
        }))
    }

    /// The message, for a transport that encodes it by its type.
    pub fn message(&self) -> &(dyn Any + Send) {
        self.0.message()
    }

    /// The [`TypeId`] of the message inside.
    pub fn message_type(&self) -> TypeId {
        self.0.message().type_id()
    }

    /// The message type's name, for logs and dead letters.
    pub fn type_name(&self) -> &'static str {
        self.0.type_name()
    }

    /// Splits the envelope into the message and a reply destination that accepts the reply as
    /// `Box<dyn Any>` (a transport decodes a reply without naming its type).
    pub fn into_parts(self) -> (Box<dyn Any + Send>, ErasedReply) {
        self.0.into_parts()
    }

    /// Whether anyone waits for the reply (a transport sends none back otherwise).
    pub fn is_reply_wanted(&self) -> bool {
        self.0.is_reply_wanted()
    }

    /// Drops the message (after a transport encoded it) and keeps its reply destination.
    pub fn into_reply(self) -> ErasedReply {
        self.0.into_reply()
    }

    /// Tells the reply destination that the message will never be handled, and hands the message
    /// back as `Box<dyn Any>` (downcast it to get the original value).
    pub fn reject(self, error: ReplyError) -> Box<dyn Any + Send> {
        self.0.reject(error)
    }

    pub(crate) fn handle<'a>(
        self,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        self.0.handle(actor, ctx)
    }
}

impl<A: Actor> fmt::Debug for Envelope<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Envelope").field(&self.type_name()).finish()
    }
}

trait Erased<A: Actor>: Send {
    fn handle<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> BoxFuture<'a, Result<(), Failure>>;
    fn message(&self) -> &(dyn Any + Send);
    fn type_name(&self) -> &'static str;
    fn into_parts(self: Box<Self>) -> (Box<dyn Any + Send>, ErasedReply);
    fn is_reply_wanted(&self) -> bool;
    fn into_reply(self: Box<Self>) -> ErasedReply;
    fn reject(self: Box<Self>, error: ReplyError) -> Box<dyn Any + Send>;
    fn meta(&self) -> Option<&Meta>;
    fn set_meta(&mut self, meta: Box<Meta>);
}

struct Typed<M: Message> {
    msg: M,
    reply: ReplyTo<M::Reply>,
    /// Only for a message sent in a request context: one pointer otherwise.
    meta: Option<Box<Meta>>,
}

/// What a message sent in a request context carries besides itself.
struct Meta {
    context: RequestContext,
    /// When it was sent (or decoded from another node).
    arrived: Instant,
}

/// Where a message came from, as the transport that carried it says (see
/// [`Envelope::with_origin`] and [`Context::origin`]).
pub type Origin = Arc<dyn Any + Send + Sync>;

/// A message with the origin a transport gave it.
struct Originated<M: Message> {
    typed: Typed<M>,
    origin: Origin,
}

impl<A, M> Erased<A> for Originated<M>
where
    A: Handler<M>,
    M: Message,
{
    fn handle<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        let Originated { typed, origin } = *self;
        match typed.meta {
            None if !filters_see_every_message(ctx) => {
                handle_typed(typed.msg, typed.reply, Some(origin), actor, ctx)
            }
            meta => handle_filtered(typed.msg, typed.reply, Some(origin), meta, actor, ctx),
        }
    }

    fn message(&self) -> &(dyn Any + Send) {
        &self.typed.msg
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<M>()
    }

    fn into_parts(self: Box<Self>) -> (Box<dyn Any + Send>, ErasedReply) {
        <Typed<M> as Erased<A>>::into_parts(Box::new(self.typed))
    }

    fn is_reply_wanted(&self) -> bool {
        self.typed.reply.is_wanted()
    }

    fn into_reply(self: Box<Self>) -> ErasedReply {
        ErasedReply(Box::new(self.typed.reply))
    }

    fn reject(self: Box<Self>, error: ReplyError) -> Box<dyn Any + Send> {
        <Typed<M> as Erased<A>>::reject(Box::new(self.typed), error)
    }

    fn meta(&self) -> Option<&Meta> {
        self.typed.meta.as_deref()
    }

    fn set_meta(&mut self, meta: Box<Meta>) {
        self.typed.meta = Some(meta);
    }
}

/// Whether a message without a request context must pass the actor's filters: when it has
/// some and one of them sees every message (see [`Sees`](crate::Sees)). Otherwise it takes the
/// plain path; the actor's task runs in its filters' scope, so its sends still pass them.
fn filters_see_every_message<A: Actor>(ctx: &Context<A>) -> bool {
    ctx.filters()
        .is_some_and(|chain| chain.sees_every_message())
}

/// Runs the handler of `M` on `msg`, with `origin` readable through [`Context::origin`] while
/// it runs, and sends the reply (or the failure) to `reply`.
///
/// The one place a handled message's panic is caught: the handler and the reply's delivery
/// (a transport's reply callback runs user code, such as a reply type's `Serialize`) run inside
/// one guard, and a panic becomes the asker's `Failed` reply and the actor's [`Failure`].
fn handle_typed<'a, A, M>(
    msg: M,
    reply: ReplyTo<M::Reply>,
    origin: Option<Origin>,
    actor: &'a mut A,
    ctx: &'a mut Context<A>,
) -> BoxFuture<'a, Result<(), Failure>>
where
    A: Handler<M>,
    M: Message,
{
    Box::pin(run_typed(msg, reply, origin, actor, ctx))
}

/// [`handle_typed`]'s future, unboxed: [`handle_filtered`] runs it inside its own box.
async fn run_typed<A, M>(
    msg: M,
    reply: ReplyTo<M::Reply>,
    origin: Option<Origin>,
    actor: &mut A,
    ctx: &mut Context<A>,
) -> Result<(), Failure>
where
    A: Handler<M>,
    M: Message,
{
    ctx.origin = origin;
    // The handler may take the reply with `Context::reply_later`. The slot is a box the
    // context keeps per reply type, so a handled message allocates nothing for it.
    let mut slot = ctx.reply_slot::<M::Reply>();
    *slot
        .downcast_mut::<Option<ReplyTo<M::Reply>>>()
        .expect("reply_slot hands out a slot of this reply type") = Some(reply);
    let mut previous = ctx.current_reply.replace(slot);
    let handled = crate::panic::catch(handle_and_reply(msg, actor, &mut *ctx, &mut previous)).await;
    if let Err(panic) = &handled {
        ctx.origin = None;
        // `None` when the panic came after the reply was taken (while it was sent).
        if let Some(reply) = take_reply::<A, M>(ctx, previous.take()) {
            let failed = Err(ReplyError::Failed(format!("panicked: {panic}")));
            if let Err(again) = crate::panic::catch_now(|| reply.send(failed)) {
                tracing::warn!(panic = %again, "a reply destination panicked");
            }
        }
    }
    Failure::of(handled)
}

/// [`handle_typed`] for a message that carries a request context or comes to an actor with a
/// call filter that sees every message: the filters' `before`, the handler in the message's
/// [`Scope`] (so that its sends carry the context and pass the filters' `on_send`), then their
/// `after`. Apart from `handle_typed` so that a plain message's boxed future stays as small as
/// it was.
fn handle_filtered<'a, A, M>(
    msg: M,
    reply: ReplyTo<M::Reply>,
    origin: Option<Origin>,
    meta: Option<Box<Meta>>,
    actor: &'a mut A,
    ctx: &'a mut Context<A>,
) -> BoxFuture<'a, Result<(), Failure>>
where
    A: Handler<M>,
    M: Message,
{
    Box::pin(async move {
        let (context, waited) = match meta {
            Some(meta) => (Some(meta.context), Some(meta.arrived.elapsed())),
            None => (None, None),
        };
        let message_type = std::any::type_name::<M>();
        let (kept, context) = match ctx.filters() {
            Some(chain) => {
                let mut call = incoming(ctx, message_type, context, waited);
                match filter::before(chain, &mut call) {
                    Ok(kept) => (kept, call.context),
                    Err(rejection) => {
                        if !reply.is_wanted() {
                            ctx.system().dead_letters().record(
                                ctx.myself().path(),
                                message_type,
                                crate::DeadLetterReason::Rejected,
                            );
                        }
                        reply.send(Err(ReplyError::Rejected(rejection.into_reason())));
                        return Ok(());
                    }
                }
            }
            None => (Vec::new(), context),
        };
        let scope = Scope {
            context: context.clone(),
            filters: ctx.filters().cloned(),
        };
        let handled = scope
            .run(run_typed(msg, reply, origin, actor, &mut *ctx))
            .await;
        if let Some(chain) = ctx.filters() {
            let outcome = match &handled {
                Ok(()) => Outcome::Ok,
                Err(failure) if failure.panicked => Outcome::Panicked(&failure.message),
                Err(failure) => Outcome::Failed(&failure.message),
            };
            filter::after(
                chain,
                &incoming(ctx, message_type, context, waited),
                outcome,
                kept,
            );
        }
        handled
    })
}

/// What the filters see of a message to the actor of `ctx`: borrowed from the context, once
/// before the handler and again after it (the handler has the context in between).
fn incoming<'c, A: Actor>(
    ctx: &'c Context<A>,
    message_type: &'static str,
    context: Option<RequestContext>,
    waited: Option<std::time::Duration>,
) -> Incoming<'c> {
    Incoming {
        actor: ctx.myself().path(),
        id: ctx.id(),
        message_type,
        context,
        waited,
        grain: ctx.grain().map(|(kind, identity)| (*kind, &**identity)),
    }
}

/// The handler's run, then the reply: everything [`handle_typed`] guards.
async fn handle_and_reply<A, M>(
    msg: M,
    actor: &mut A,
    ctx: &mut Context<A>,
    previous: &mut Option<Box<dyn Any + Send>>,
) -> ActorResult<()>
where
    A: Handler<M>,
    M: Message,
{
    let result = actor.handle(msg, ctx).await;
    let reply = take_reply::<A, M>(ctx, previous.take());
    let origin = ctx.origin.take();
    if let Some(stashed) = ctx.take_stash_request() {
        let reply = reply.unwrap_or_else(ReplyTo::ignore);
        let context = ctx.request_context();
        return match (stashed.downcast::<M>(), origin) {
            (Ok(msg), Some(origin)) => {
                ctx.push_stashed(Envelope::with_origin(*msg, reply, origin).in_context(context));
                Ok(())
            }
            (Ok(msg), None) => {
                ctx.push_stashed(Envelope::new(*msg, reply).in_context(context));
                Ok(())
            }
            (Err(_), _) => {
                Err("Context::stash was given a value that is not the message being handled".into())
            }
        };
    }
    match (result, reply) {
        (Ok(value), Some(reply)) => {
            reply.send(Ok(value));
            Ok(())
        }
        (Err(error), Some(reply)) if error.is::<Deferred>() => {
            let why = "the handler deferred its reply without taking it (Context::reply_later)";
            reply.send(Err(ReplyError::Failed(why.to_owned())));
            Err(why.into())
        }
        (Err(error), Some(reply)) => {
            reply.send(Err(ReplyError::Failed(error.to_string())));
            Err(error)
        }
        // The handler took the reply: whatever it returned is not the answer.
        (Ok(_), None) => Ok(()),
        (Err(error), None) if error.is::<Deferred>() => Ok(()),
        (Err(error), None) => Err(error),
    }
}

impl<A, M> Erased<A> for Typed<M>
where
    A: Handler<M>,
    M: Message,
{
    fn handle<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        let Typed { msg, reply, meta } = *self;
        match meta {
            None if !filters_see_every_message(ctx) => handle_typed(msg, reply, None, actor, ctx),
            meta => handle_filtered(msg, reply, None, meta, actor, ctx),
        }
    }

    fn message(&self) -> &(dyn Any + Send) {
        &self.msg
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<M>()
    }

    fn into_parts(self: Box<Self>) -> (Box<dyn Any + Send>, ErasedReply) {
        let Typed { msg, reply, .. } = *self;
        (Box::new(msg), ErasedReply(Box::new(reply)))
    }

    fn is_reply_wanted(&self) -> bool {
        self.reply.is_wanted()
    }

    fn into_reply(self: Box<Self>) -> ErasedReply {
        ErasedReply(Box::new(self.reply))
    }

    fn reject(self: Box<Self>, error: ReplyError) -> Box<dyn Any + Send> {
        let Typed { msg, reply, .. } = *self;
        reply.send(Err(error));
        Box::new(msg)
    }

    fn meta(&self) -> Option<&Meta> {
        self.meta.as_deref()
    }

    fn set_meta(&mut self, meta: Box<Meta>) {
        self.meta = Some(meta);
    }
}

/// Takes back the reply destination a handler did not claim, restoring what was there before
/// (a handler's message handled inside another's, which the runtime never does, stays sound).
fn take_reply<A: Actor, M: Message>(
    ctx: &mut Context<A>,
    previous: Option<Box<dyn Any + Send>>,
) -> Option<ReplyTo<M::Reply>> {
    let mut slot = std::mem::replace(&mut ctx.current_reply, previous)?;
    let reply = slot
        .downcast_mut::<Option<ReplyTo<M::Reply>>>()
        .expect("the slot holds the reply destination put there for this message")
        .take();
    ctx.return_reply_slot(slot);
    reply
}

/// Why a reply never came from the handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// The actor stopped before it handled the message.
    #[error("the actor stopped before handling the message")]
    Stopped,
    /// The actor's bounded mailbox was full.
    #[error("the actor's mailbox is full")]
    MailboxFull,
    /// The handler failed (returned an error or panicked).
    #[error("the handler failed: {0}")]
    Failed(String),
    /// The message was never handed to the target (for example, a transport refused it, or
    /// the node was down before the message left): it was not and will not be handled.
    #[error("the message could not be delivered: {0}")]
    Undeliverable(String),
    /// The message left for another node, but the link failed before a reply came: it may or
    /// may not have been handled (it will not be handled twice).
    #[error("the message was sent but its outcome is unknown: {0}")]
    OutcomeUnknown(String),
    /// A call filter rejected the message before its handler: it was not handled.
    #[error("the message was rejected: {0}")]
    Rejected(String),
}

/// Receives a reply on behalf of someone; implemented by [`Recipient`](crate::Recipient) targets
/// and by transports that carry replies to other nodes.
pub trait ReplySink<R>: Send + Sync + 'static {
    /// Delivers the reply (or the reason there is none).
    fn send_reply(&self, reply: Result<R, ReplyError>);
}

/// Where the reply to one message goes.
pub struct ReplyTo<R>(ReplyInner<R>);

enum ReplyInner<R> {
    Ignore,
    Ask(oneshot::Sender<Result<R, ReplyError>>),
    Sink(Arc<dyn ReplySink<R>>),
    Callback(Box<dyn FnOnce(Result<R, ReplyError>) + Send>),
}

impl<R: Send + 'static> ReplyTo<R> {
    /// The reply is dropped (what `tell` uses).
    ///
    /// # Example
    ///
    /// ```
    /// let reply = rally::ReplyTo::<u32>::ignore();
    /// reply.send(Ok(1));
    /// ```
    pub fn ignore() -> Self {
        Self(ReplyInner::Ignore)
    }

    /// The reply goes to a shared sink, such as another actor's [`Recipient`](crate::Recipient).
    pub fn sink(sink: Arc<dyn ReplySink<R>>) -> Self {
        Self(ReplyInner::Sink(sink))
    }

    /// The reply is handed to a closure, once.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = rally::ReplyTo::callback(|r: Result<u32, _>| assert_eq!(r, Ok(7)));
    /// reply.send(Ok(7));
    /// ```
    pub fn callback(f: impl FnOnce(Result<R, ReplyError>) + Send + 'static) -> Self {
        Self(ReplyInner::Callback(Box::new(f)))
    }

    /// The reply arrives on the returned receiver: what [`ActorRef::ask`](crate::ActorRef::ask)
    /// waits on, for code that sends with [`ActorRef::send_with`](crate::ActorRef::send_with)
    /// at once (so messages leave in the order they were sent) and waits for the reply
    /// elsewhere. Dropping the receiver marks the reply [abandoned](Self::is_abandoned), so a
    /// transport frees what it kept for it.
    ///
    /// # Example
    ///
    /// ```
    /// let (reply, answer) = rally::ReplyTo::<u32>::channel();
    /// reply.send(Ok(7));
    /// assert_eq!(answer.blocking_recv(), Ok(Ok(7)));
    /// ```
    pub fn channel() -> (Self, oneshot::Receiver<Result<R, ReplyError>>) {
        let (tx, rx) = oneshot::channel();
        (Self(ReplyInner::Ask(tx)), rx)
    }

    /// Whether anyone waits for the reply (a transport skips sending one back when not).
    pub fn is_wanted(&self) -> bool {
        !matches!(self.0, ReplyInner::Ignore)
    }

    /// Whether an `ask` waiting for this reply has given up (timed out or was cancelled): a
    /// transport that keeps a slot for the reply may free it.
    ///
    /// # Example
    ///
    /// ```
    /// let reply = rally::ReplyTo::<u32>::ignore();
    /// assert!(!reply.is_abandoned());
    /// ```
    pub fn is_abandoned(&self) -> bool {
        match &self.0 {
            ReplyInner::Ask(tx) => tx.is_closed(),
            _ => false,
        }
    }

    /// Delivers the reply.
    pub fn send(self, reply: Result<R, ReplyError>) {
        match self.0 {
            ReplyInner::Ignore => {}
            ReplyInner::Ask(tx) => {
                // The asker may have timed out and gone; then nobody wants the reply.
                let _ = tx.send(reply);
            }
            ReplyInner::Sink(sink) => sink.send_reply(reply),
            ReplyInner::Callback(f) => f(reply),
        }
    }
}

/// A reply destination whose type is known only at run time; see [`Envelope::into_parts`].
pub struct ErasedReply(Box<dyn ErasedReplyTo>);

impl ErasedReply {
    /// Whether anyone waits for the reply.
    pub fn is_wanted(&self) -> bool {
        self.0.is_wanted()
    }

    /// Whether the `ask` waiting for this reply has given up (see [`ReplyTo::is_abandoned`]).
    pub fn is_abandoned(&self) -> bool {
        self.0.is_abandoned()
    }

    /// Delivers a reply given as `Box<dyn Any>`; a value of the wrong type is reported to the
    /// waiting side as [`ReplyError::Undeliverable`].
    pub fn send(self, reply: Result<Box<dyn Any + Send>, ReplyError>) {
        self.0.send_any(reply);
    }

    /// The typed destination inside, if it takes replies of type `R` (else `self` back): a
    /// transport that decodes the reply as `R` sends it with no box.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Envelope, Handler, Message, ReplyTo};
    ///
    /// struct Ping;
    /// impl Message for Ping { type Reply = u32; }
    /// struct Pong;
    /// impl Actor for Pong {}
    /// impl Handler<Ping> for Pong {
    ///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<u32> { Ok(1) }
    /// }
    ///
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let envelope: Envelope<Pong> =
    ///     Envelope::new(Ping, ReplyTo::callback(move |reply| tx.send(reply).unwrap()));
    /// let erased = envelope.into_reply();
    /// let erased = erased.downcast::<String>().unwrap_err(); // not a String destination
    /// erased.downcast::<u32>().ok().unwrap().send(Ok(7));
    /// assert_eq!(rx.recv().unwrap(), Ok(7));
    /// ```
    pub fn downcast<R: Send + 'static>(self) -> Result<ReplyTo<R>, Self> {
        if self.0.reply_type() == std::any::TypeId::of::<R>() {
            let any = self.0.into_any();
            Ok(*any
                .downcast::<ReplyTo<R>>()
                .expect("reply_type is the TypeId of the R in ReplyTo<R>"))
        } else {
            Err(self)
        }
    }
}

trait ErasedReplyTo: Send {
    fn is_wanted(&self) -> bool;
    fn is_abandoned(&self) -> bool;
    fn send_any(self: Box<Self>, reply: Result<Box<dyn Any + Send>, ReplyError>);
    /// The `R` of the `ReplyTo<R>` inside.
    fn reply_type(&self) -> TypeId;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<R: Send + 'static> ErasedReplyTo for ReplyTo<R> {
    fn is_wanted(&self) -> bool {
        ReplyTo::is_wanted(self)
    }

    fn is_abandoned(&self) -> bool {
        ReplyTo::is_abandoned(self)
    }

    fn send_any(self: Box<Self>, reply: Result<Box<dyn Any + Send>, ReplyError>) {
        let typed = match reply {
            Ok(any) => match any.downcast::<R>() {
                Ok(value) => Ok(*value),
                Err(_) => Err(ReplyError::Undeliverable(format!(
                    "reply is not a {}",
                    std::any::type_name::<R>()
                ))),
            },
            Err(error) => Err(error),
        };
        (*self).send(typed);
    }

    fn reply_type(&self) -> TypeId {
        TypeId::of::<R>()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl<R> std::fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            ReplyInner::Ignore => "ignored",
            ReplyInner::Ask(_) => "ask",
            ReplyInner::Sink(_) => "sink",
            ReplyInner::Callback(_) => "callback",
        };
        f.debug_tuple("ReplyTo").field(&kind).finish()
    }
}

impl std::fmt::Debug for ErasedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ErasedReply")
            .field(&if self.is_wanted() {
                "wanted"
            } else {
                "ignored"
            })
            .finish()
    }
}
