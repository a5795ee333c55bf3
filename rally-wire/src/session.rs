//! The data phase of a connection between two nodes, sans-I/O: what `rally-remote` drives
//! over sockets and tests drive directly, with time passed in.
//!
//! - [`OutboundEncoder`]: frames into one buffer per lane, all-or-nothing per push, with the
//!   compression tables and a sequence number per message (what was handed to the transport).
//! - [`InboundDecoder`]: frames out of large reads, names resolved, a bound on each frame.
//! - [`RequestTable`]: requests waiting for replies; freed by the reply, by the asker giving
//!   up, or by the peer going down, with what is known of the outcome.
//! - [`Liveness`]: which incarnation of a peer is current; down is final for an incarnation.

mod inbound;
mod liveness;
mod outbound;
mod requests;

pub use inbound::{InboundDecoder, InboundError, InboundFrame, MAX_TABLE_ENTRIES};
pub use liveness::{Liveness, Observed};
pub use outbound::{
    Batch, EncodeError, EncodeReply, ManifestKey, OutboundEncoder, RecipientKey, ReplyQueued,
};
pub use requests::{MAX_EARLY_REPLIES, Outcome, RequestTable, Waiting};

#[cfg(test)]
mod tests {
    //! Two sessions driven against each other over a simulated link that splits, delays and
    //! drops (a drop is a lost connection: both sides start their tables again).

    use std::time::{Duration, Instant};

    use bytes::BytesMut;
    use proptest::prelude::*;

    use super::*;

    const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
    const MANIFESTS: [&str; 2] = ["m.One", "m.Two"];

    #[derive(Debug, Clone)]
    enum Step {
        Send {
            to: usize,
            manifest: usize,
            value: u16,
        },
        /// The writer takes what is queued and the link carries it in `chunks` pieces.
        Flush { chunks: usize },
        /// The connection breaks after delivering `delivered` of the bytes in flight.
        Break { delivered: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0..3usize, 0..2usize, any::<u16>())
                .prop_map(|(to, manifest, value)| Step::Send { to, manifest, value }),
            2 => (1..8usize).prop_map(|chunks| Step::Flush { chunks }),
            1 => (0..64usize).prop_map(|delivered| Step::Break { delivered }),
        ]
    }

    proptest! {
        /// Whatever the splitting and the breaks: every message arrives at most once, in the
        /// order sent per recipient, with its name and manifest right, and the receiver never
        /// reports a protocol error.
        #[test]
        fn messages_arrive_at_most_once_in_order_over_a_breaking_link(
            steps in proptest::collection::vec(step(), 1..200)
        ) {
            let mut encoder = OutboundEncoder::new(1 << 16);
            let mut decoder = InboundDecoder::new(1 << 16, Duration::from_secs(10));
            let mut link = BytesMut::new();
            let mut received: Vec<(String, String, u16)> = Vec::new();
            let mut sent = Vec::new();
            let mut now = Instant::now();
            for step in steps {
                now += Duration::from_millis(1);
                match step {
                    Step::Send { to, manifest, value } => {
                        encoder
                            .push_message(
                                RecipientKey { id: to as u64, name: NAMES[to] },
                                ManifestKey { id: manifest, name: MANIFESTS[manifest] },
                                0,
                                None,
                                |buf| { buf.extend_from_slice(&value.to_le_bytes()); Ok(()) },
                            )
                            .unwrap();
                        sent.push((NAMES[to].to_owned(), MANIFESTS[manifest].to_owned(), value));
                    }
                    Step::Flush { chunks } => {
                        let mut wire = BytesMut::new();
                        encoder.take(&mut wire);
                        let piece = wire.len().div_ceil(chunks).max(1);
                        for chunk in wire.chunks(piece) {
                            link.extend_from_slice(chunk);
                            let used = decoder
                                .decode(&link, now, |frame| {
                                    if let InboundFrame::Message { recipient, manifest, payload, .. } = frame {
                                        let value = u16::from_le_bytes(payload.try_into().unwrap());
                                        received.push((recipient.to_owned(), manifest.to_owned(), value));
                                    }
                                })
                                .unwrap();
                            let _ = link.split_to(used);
                        }
                    }
                    Step::Break { delivered } => {
                        // Part of the bytes in flight got through; the rest are lost.
                        let keep = delivered.min(link.len());
                        link.truncate(keep);
                        let _ = decoder.decode(&link, now, |frame| {
                            if let InboundFrame::Message { recipient, manifest, payload, .. } = frame {
                                let value = u16::from_le_bytes(payload.try_into().unwrap());
                                received.push((recipient.to_owned(), manifest.to_owned(), value));
                            }
                        }).unwrap();
                        link.clear();
                        encoder.reset_after_disconnect();
                        decoder = InboundDecoder::new(1 << 16, Duration::from_secs(10));
                    }
                }
            }
            // At most once and in order: `received` is a subsequence of `sent`.
            let mut cursor = sent.iter();
            for message in &received {
                prop_assert!(cursor.any(|s| s == message), "{message:?} out of order or duplicated");
            }
        }
    }
}
