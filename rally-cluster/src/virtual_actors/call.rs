//! A message on its way to an activation, with where its answer goes, erased over its type:
//! what the core moves around as an opaque call, and what the driver hands to a life, sends to
//! another member, or answers.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use rally_actor::sync::Mutex;
use std::time::Instant;

use bytes::BytesMut;
use rally_actor::{ActorRef, Envelope, Handler, ReplyError, ReplyTo, RequestContext};
use rally_remote::codec;
use rally_remote::{GrainAnswer, GrainOutcome, Handled, RemoteMessage};
use tokio::sync::oneshot;

use super::core::{CallMeta, LifeId};
use super::error::AskError;
use super::kind::VirtualActor;
use super::outcome::Refusal;
use super::transport::InboundReply;

/// A call as the core and the driver of kind `K` hold it.
pub(crate) type BoxCall<K> = Box<dyn Call<K>>;

/// A call of one kind, erased over its message type.
pub(crate) trait Call<K: VirtualActor>: Send {
    /// When its caller stops waiting; `None` for a tell.
    fn deadline(&self) -> Option<Instant>;
    /// Members it has been passed between.
    fn hops(&self) -> u8;
    /// Sets [`hops`](Self::hops).
    fn set_hops(&mut self, hops: u8);
    /// Whether the identity's previous owner handed it over.
    fn handed_over(&self) -> bool;
    /// Marks it handed over.
    fn set_handed_over(&mut self, handed_over: bool);
    /// It leaves its caller's member (to a life, or to another member): `false` if its caller,
    /// on this member, gave up while it was held here (then it must be dropped, unanswered).
    fn leave(&self) -> bool;
    /// A member it was sent to refused it: it is held on its caller's member again.
    fn back(&self);
    /// Hands it to a life; `done` fires once the life has handled it (its reply went out). A
    /// life that would not take it (it had stopped) gives it back.
    fn deliver(self: Box<Self>, actor: &ActorRef<K>, done: Done) -> Result<(), BoxCall<K>>;
    /// Answers it: not handled, for this reason.
    fn refuse(self: Box<Self>, refusal: Refusal);
    /// Its message's manifest.
    fn manifest(&self) -> &'static str;
    /// Writes its message (to send it to another member; it stays in the call).
    fn encode(&self, buf: &mut BytesMut) -> Result<(), String>;
    /// Another member's final answer for it.
    fn answer(self: Box<Self>, answer: GrainAnswer<'_>);
    /// The request context it carries, if any.
    fn context(&self) -> Option<&RequestContext>;
}

impl<K: VirtualActor> CallMeta for BoxCall<K> {
    fn deadline(&self) -> Option<Instant> {
        (**self).deadline()
    }
    fn hops(&self) -> u8 {
        (**self).hops()
    }
    fn set_hops(&mut self, hops: u8) {
        (**self).set_hops(hops);
    }
    fn handed_over(&self) -> bool {
        (**self).handed_over()
    }
}

/// Fires once a life has handled a call (or dropped it unanswered): the core then hands the
/// life its next call.
pub(crate) struct Done {
    to: Option<(Weak<dyn Completion>, Arc<str>, LifeId)>,
}

/// What a [`Done`] tells, and a life's state when the life is over.
pub(crate) trait Completion: Send + Sync {
    /// `life` of `identity` is free again.
    fn completed(&self, identity: &Arc<str>, life: LifeId);
    /// `life` of `identity` is over: its actor stopped and no save of it is under way.
    fn ended(&self, identity: &Arc<str>, life: LifeId);
}

impl Done {
    pub(crate) fn new(to: Weak<dyn Completion>, identity: Arc<str>, life: LifeId) -> Self {
        Self {
            to: Some((to, identity, life)),
        }
    }

    /// A done that tells nobody.
    pub(crate) fn defused(mut self) {
        self.to = None;
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some((to, identity, life)) = self.to.take()
            && let Some(to) = to.upgrade()
        {
            to.completed(&identity, life);
        }
    }
}

/// Where a call is, as its caller's member knows: held there, gone on, or abandoned by a caller
/// whose timeout passed while it was held.
const HERE: u8 = 0;
const LEFT: u8 = 1;
const ABANDONED: u8 = 2;

/// A caller's view of its call, shared with the call.
#[derive(Debug, Default)]
pub(crate) struct Held(AtomicU8);

impl Held {
    /// The caller's timeout passed: `true` if the call was still held on its member (so it was
    /// not handled, and is now dropped wherever it turns up).
    pub(crate) fn abandon(&self) -> bool {
        self.0
            .compare_exchange(HERE, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Where a call's answer goes.
pub(crate) enum Reply<R> {
    /// A tell: nowhere.
    Tell,
    /// A caller on this member, and whether the call is still held here.
    Local {
        to: oneshot::Sender<Result<R, AskError>>,
        held: Arc<Held>,
    },
    /// A member that sent it: the answer goes back encoded.
    Remote(InboundReply),
}

/// A call of message type `M`.
pub(crate) struct TypedCall<M: RemoteMessage> {
    pub(crate) msg: M,
    pub(crate) reply: Reply<M::Reply>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) hops: u8,
    pub(crate) handed_over: bool,
    pub(crate) kind: &'static str,
    /// The request context it carries to the activation, if any.
    pub(crate) context: Option<RequestContext>,
}

/// What the caller of an ask on this member waits on: its answer, and where the call is.
pub(crate) type Waiter<R> = (oneshot::Receiver<Result<R, AskError>>, Arc<Held>);

impl<M: RemoteMessage> TypedCall<M> {
    /// An ask from a caller on this member, and what the caller waits on.
    pub(crate) fn ask(kind: &'static str, msg: M, deadline: Instant) -> (Self, Waiter<M::Reply>) {
        let (to, answer) = oneshot::channel();
        let held = Arc::new(Held::default());
        let call = Self {
            msg,
            reply: Reply::Local {
                to,
                held: Arc::clone(&held),
            },
            deadline: Some(deadline),
            hops: 0,
            handed_over: false,
            kind,
            context: None,
        };
        (call, (answer, held))
    }

    /// A tell from this member.
    pub(crate) fn tell(kind: &'static str, msg: M) -> Self {
        Self {
            msg,
            reply: Reply::Tell,
            deadline: None,
            hops: 0,
            handed_over: false,
            kind,
            context: None,
        }
    }

    /// The same call carrying `context`.
    pub(crate) fn in_context(self, context: Option<RequestContext>) -> Self {
        Self { context, ..self }
    }
}

impl<R: serde::Serialize + Send + 'static> Reply<R> {
    /// The life's answer.
    fn handled(self, result: Result<R, ReplyError>, kind: &str) {
        match self {
            Self::Tell => {}
            Self::Local { to, .. } => {
                let _ = to.send(result.map_err(|error| life_error(error, kind)));
            }
            Self::Remote(reply) => match result {
                Ok(value) => reply.send(GrainOutcome::OK, |buf| {
                    codec::encode_into(&value, buf).map_err(|e| e.to_string())
                }),
                Err(ReplyError::Failed(why)) => reply.send_text(GrainOutcome::FAILED, &why),
                Err(ReplyError::OutcomeUnknown(why)) => {
                    reply.send_text(GrainOutcome::UNKNOWN, &why);
                }
                Err(error) => {
                    let (outcome, text) = life_refusal(&error).to_wire();
                    reply.send_text(outcome, &text);
                }
            },
        }
    }
}

/// What the actor runtime's answer for a delivered call means to a caller on this member.
fn life_error(error: ReplyError, kind: &str) -> AskError {
    match error {
        ReplyError::Failed(why) => AskError::Failed(why),
        ReplyError::OutcomeUnknown(why) => AskError::OutcomeUnknown(why),
        other => AskError::refused(life_refusal(&other), kind),
    }
}

/// The refusal behind an actor runtime's answer that says the life never handled the call.
fn life_refusal(error: &ReplyError) -> Refusal {
    match error {
        ReplyError::MailboxFull => Refusal::Overloaded,
        ReplyError::Rejected(why) => Refusal::Rejected(why.clone()),
        ReplyError::Undeliverable(why) => Refusal::Unreachable(why.clone()),
        _ => Refusal::Ended,
    }
}

impl<K, M> Call<K> for TypedCall<M>
where
    K: VirtualActor + Handler<M>,
    M: RemoteMessage,
{
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn hops(&self) -> u8 {
        self.hops
    }

    fn set_hops(&mut self, hops: u8) {
        self.hops = hops;
    }

    fn handed_over(&self) -> bool {
        self.handed_over
    }

    fn set_handed_over(&mut self, handed_over: bool) {
        self.handed_over = handed_over;
    }

    fn leave(&self) -> bool {
        match &self.reply {
            Reply::Local { held, .. } => {
                // Already gone on (a refusal brought it back only as `HERE`) or now leaving.
                held.0
                    .compare_exchange(HERE, LEFT, Ordering::AcqRel, Ordering::Acquire)
                    .map_or_else(|state| state == LEFT, |_| true)
            }
            Reply::Tell | Reply::Remote(_) => true,
        }
    }

    fn back(&self) {
        if let Reply::Local { held, .. } = &self.reply {
            let _ = held
                .0
                .compare_exchange(LEFT, HERE, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn deliver(self: Box<Self>, actor: &ActorRef<K>, done: Done) -> Result<(), BoxCall<K>> {
        let TypedCall {
            msg,
            reply,
            deadline,
            hops,
            handed_over,
            kind,
            context,
        } = *self;
        // The reply and the completion stay reachable here until the life takes the message:
        // a life that had stopped refuses it, and the call goes back whole.
        let slot = Arc::new(Mutex::new(Some((reply, done))));
        let on_reply = Arc::clone(&slot);
        let envelope = Envelope::new(
            msg,
            ReplyTo::callback(move |result: Result<M::Reply, ReplyError>| {
                let taken = on_reply.lock().take();
                if let Some((reply, done)) = taken {
                    reply.handled(result, kind);
                    drop(done);
                }
            }),
        )
        .in_context(context.clone());
        match actor.deliver(envelope) {
            Ok(()) => Ok(()),
            Err(refused) => {
                // The envelope comes back untouched: its reply was not called.
                let (msg, unused_reply) = refused.envelope.into_parts();
                drop(unused_reply);
                let taken = slot.lock().take();
                let (Some((reply, done)), Ok(msg)) = (taken, msg.downcast::<M>()) else {
                    return Ok(());
                };
                done.defused();
                Err(Box::new(TypedCall {
                    msg: *msg,
                    reply,
                    deadline,
                    hops,
                    handed_over,
                    kind,
                    context,
                }))
            }
        }
    }

    fn refuse(self: Box<Self>, refusal: Refusal) {
        match self.reply {
            Reply::Tell => {
                tracing::debug!(kind = self.kind, %refusal, "a tell was not handled");
            }
            Reply::Local { to, .. } => {
                let _ = to.send(Err(AskError::refused(refusal, self.kind)));
            }
            Reply::Remote(reply) => {
                let (outcome, text) = refusal.to_wire();
                reply.send_text(outcome, &text);
            }
        }
    }

    fn manifest(&self) -> &'static str {
        M::MANIFEST
    }

    fn context(&self) -> Option<&RequestContext> {
        self.context.as_ref()
    }

    fn encode(&self, buf: &mut BytesMut) -> Result<(), String> {
        codec::encode_into(&self.msg, buf).map_err(|e| format!("encoding {}: {e}", M::MANIFEST))
    }

    fn answer(self: Box<Self>, answer: GrainAnswer<'_>) {
        let kind = self.kind;
        match self.reply {
            Reply::Tell => {}
            Reply::Local { to, .. } => {
                let _ = to.send(typed_answer::<M>(answer, kind));
            }
            Reply::Remote(reply) => match answer {
                // Passed on as it came: the body is decoded only by the caller.
                GrainAnswer::Replied { outcome, body } => reply.send(outcome, |buf| {
                    buf.extend_from_slice(body);
                    Ok(())
                }),
                GrainAnswer::NotSent(why) => reply.send_text(GrainOutcome::UNREACHABLE, why),
                GrainAnswer::Unknown(why) => reply.send_text(GrainOutcome::UNKNOWN, why),
            },
        }
    }
}

/// A caller's result from another member's answer to an ask of `M`.
pub(crate) fn typed_answer<M: RemoteMessage>(
    answer: GrainAnswer<'_>,
    kind: &str,
) -> Result<M::Reply, AskError> {
    let text = |body: &[u8]| String::from_utf8_lossy(body).into_owned();
    match answer {
        GrainAnswer::Replied { outcome, body } => match outcome.handled() {
            Handled::Yes if outcome == GrainOutcome::OK => codec::decode::<M::Reply>(body)
                .map_err(|e| AskError::ReplyLost(format!("decoding the reply: {e}"))),
            Handled::Yes if outcome == GrainOutcome::FAILED => Err(AskError::Failed(text(body))),
            Handled::Yes => Err(AskError::ReplyLost(text(body))),
            Handled::No => Err(AskError::refused(Refusal::from_wire(outcome, body), kind)),
            Handled::Unknown => Err(AskError::OutcomeUnknown(text(body))),
        },
        GrainAnswer::NotSent(why) => Err(AskError::Unreachable(why.to_owned())),
        GrainAnswer::Unknown(why) => Err(AskError::OutcomeUnknown(why.to_owned())),
    }
}
