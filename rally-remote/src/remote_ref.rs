//! `ActorRef`s to actors on other nodes.

use std::sync::Arc;

use rally_actor::{
    Actor, ActorId, DeadLetterReason, DeadLetters, DeliveryError, Envelope, ExternalTarget,
    ReplyError, Terminated, TerminationSink, Undelivered,
};
use rally_wire::SystemMessage;

use crate::association::Association;
use crate::outbound::{PushError, RecipientKey};
use crate::registry::{MessageTable, PendingReply};

/// The transport behind an `ActorRef<A>` whose actor lives on another node.
pub(crate) struct RemoteRef<A: Actor> {
    pub(crate) id: ActorId,
    pub(crate) path: Arc<str>,
    pub(crate) name: String,
    pub(crate) association: Arc<Association>,
    pub(crate) lane: usize,
    pub(crate) table: Arc<MessageTable<A>>,
    pub(crate) dead_letters: DeadLetters,
}

impl<A: Actor> ExternalTarget<A> for RemoteRef<A> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn path(&self) -> &Arc<str> {
        &self.path
    }

    fn deliver(&self, envelope: Envelope<A>) -> Result<(), DeliveryError<A>> {
        let Some(outgoing) = self.table.outgoing(envelope.message_type()) else {
            let reason = format!(
                "{} is not registered for remoting in this actor's MessageTable",
                envelope.type_name()
            );
            return Err(DeliveryError {
                envelope,
                reason: Undelivered::Refused(reason),
            });
        };
        let wants_reply = envelope.is_reply_wanted();
        let request_id = if wants_reply {
            self.association.next_request_id()
        } else {
            0
        };
        let lane = &self.association.lanes[self.lane];
        let pushed = lane.push_message(
            RecipientKey {
                id: self.id.as_u64(),
                name: &self.name,
            },
            outgoing.manifest,
            request_id,
            |buf| (outgoing.encode)(envelope.message(), buf),
        );
        match pushed {
            Ok(()) => {
                if wants_reply {
                    self.association.register_request(
                        request_id,
                        PendingReply {
                            decode: outgoing.decode_reply,
                            reply: envelope.into_reply(),
                        },
                    );
                }
                Ok(())
            }
            Err(PushError::Full) => {
                // The documented overflow policy: drop the newest message to dead letters.
                self.dead_letters.record(
                    &self.path,
                    envelope.type_name(),
                    DeadLetterReason::OutboundFull,
                );
                drop(envelope.reject(ReplyError::Undeliverable(
                    "the outbound queue to the node is full".to_owned(),
                )));
                Ok(())
            }
            Err(error) => Err(DeliveryError {
                envelope,
                reason: Undelivered::Refused(error.to_string()),
            }),
        }
    }

    fn watch(&self, watcher: Arc<dyn TerminationSink>) {
        let watcher_key = watcher.watcher().as_u64().to_string();
        if !self.association.add_watch(&self.name, watcher.clone()) {
            watcher.notify(Terminated {
                id: self.id,
                path: self.path.clone(),
            });
            return;
        }
        let msg = SystemMessage::Watch {
            watchee: self.name.clone(),
            watcher: watcher_key,
        };
        if let Err(error) = self.association.control().push_system(&msg) {
            tracing::warn!(%error, target = %self.path, "could not send a remote watch");
        }
    }

    fn unwatch(&self, watcher: ActorId) {
        self.association.remove_watch(&self.name, watcher);
        let msg = SystemMessage::Unwatch {
            watchee: self.name.clone(),
            watcher: watcher.as_u64().to_string(),
        };
        let _ = self.association.control().push_system(&msg);
    }

    fn stop(&self) {
        let msg = SystemMessage::Stop {
            actor: self.name.clone(),
        };
        if let Err(error) = self.association.control().push_system(&msg) {
            tracing::warn!(%error, target = %self.path, "could not send a remote stop");
        }
    }
}
