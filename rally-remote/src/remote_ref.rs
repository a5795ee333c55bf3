//! `ActorRef`s to actors on other nodes.

use std::sync::Arc;

use rally_actor::{
    Actor, ActorId, DeadLetterReason, DeadLetters, DeliveryError, EntryFilters, Envelope,
    ExternalTarget, ReplyError, Terminated, TerminationReason, TerminationSink, Undelivered,
};
use rally_wire::{RecipientKey, SystemMessage};

use crate::association::Association;
use crate::outbound::PushError;
use crate::registry::{MessageTable, PendingReply};

/// The transport behind an `ActorRef<A>` whose actor lives on another node. It belongs to the
/// peer's life (`generation`) it was resolved against: once that life ends, messages to it are
/// dead letters and asks fail as undeliverable, whoever listens at the address next.
pub(crate) struct RemoteRef<A: Actor> {
    pub(crate) id: ActorId,
    pub(crate) path: Arc<str>,
    pub(crate) name: String,
    pub(crate) association: Arc<Association>,
    pub(crate) generation: u64,
    pub(crate) lane: usize,
    pub(crate) table: Arc<MessageTable<A>>,
    pub(crate) dead_letters: DeadLetters,
    /// The local system's call filters, which a send from code outside any actor passes.
    pub(crate) entry: EntryFilters,
}

impl<A: Actor> RemoteRef<A> {
    /// Drops the message to dead letters; an ask waiting for it hears `error`.
    fn dead_letter(&self, envelope: Envelope<A>, reason: DeadLetterReason, error: ReplyError) {
        self.dead_letters
            .record(&self.path, envelope.type_name(), reason);
        drop(envelope.reject(error));
    }
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
        if let Some(reason) = self.association.refused_fast() {
            self.dead_letter(
                envelope,
                DeadLetterReason::Unreachable,
                ReplyError::Undeliverable(reason.clone()),
            );
            return Ok(());
        }
        let wants_reply = envelope.is_reply_wanted();
        let request_id = if wants_reply {
            self.association.next_request_id()
        } else {
            0
        };
        let lane = &self.association.lanes[self.lane];
        let pushed = lane.push_message(
            self.generation,
            RecipientKey {
                id: self.id.as_u64(),
                name: &self.name,
            },
            outgoing.manifest,
            request_id,
            envelope.context(),
            |buf| (outgoing.encode)(envelope.message(), buf),
        );
        match pushed {
            Ok(sequence) => {
                if wants_reply {
                    self.association.register_request(
                        request_id,
                        PendingReply::Actor {
                            complete: outgoing.complete,
                            reply: envelope.into_reply(),
                        },
                        self.lane,
                        sequence,
                        self.generation,
                    );
                }
                Ok(())
            }
            Err(PushError::Full) => {
                // The documented overflow policy: drop the newest message to dead letters.
                self.dead_letter(
                    envelope,
                    DeadLetterReason::OutboundFull,
                    ReplyError::Undeliverable("the outbound queue to the node is full".to_owned()),
                );
                Ok(())
            }
            Err(PushError::PeerDown) => {
                let why = format!(
                    "{} was resolved against an incarnation of {} that is down",
                    self.path, self.association.remote
                );
                self.dead_letter(
                    envelope,
                    DeadLetterReason::Unreachable,
                    ReplyError::Undeliverable(why),
                );
                Ok(())
            }
            Err(error) => {
                // Refused here (too large, failed to encode, closed): the caller hears why,
                // and the dead letters count it.
                self.dead_letters.record(
                    &self.path,
                    envelope.type_name(),
                    DeadLetterReason::Unreachable,
                );
                Err(DeliveryError {
                    envelope,
                    reason: Undelivered::Refused(error.to_string()),
                })
            }
        }
    }

    fn watch(&self, watcher: Arc<dyn TerminationSink>) {
        if self.association.generation() != self.generation {
            watcher.notify(Terminated::new(
                self.id,
                self.path.clone(),
                TerminationReason::NodeDown,
            ));
            return;
        }
        let watcher_key = watcher.watcher().as_u64().to_string();
        self.association.add_watch(&self.name, watcher);
        let msg = SystemMessage::Watch {
            watchee: self.name.clone(),
            watcher: watcher_key,
        };
        if let Err(error) = self
            .association
            .control()
            .push_system(self.generation, &msg)
        {
            tracing::warn!(%error, target = %self.path, "could not send a remote watch");
        }
    }

    fn unwatch(&self, watcher: ActorId) {
        self.association.remove_watch(&self.name, watcher);
        let msg = SystemMessage::Unwatch {
            watchee: self.name.clone(),
            watcher: watcher.as_u64().to_string(),
        };
        let _ = self
            .association
            .control()
            .push_system(self.generation, &msg);
    }

    fn stop(&self) {
        let msg = SystemMessage::Stop {
            actor: self.name.clone(),
        };
        if let Err(error) = self
            .association
            .control()
            .push_system(self.generation, &msg)
        {
            tracing::warn!(%error, target = %self.path, "could not send a remote stop");
        }
    }

    fn entry_filters(&self) -> Option<&EntryFilters> {
        Some(&self.entry)
    }
}
