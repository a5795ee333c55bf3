//! Figures a node reports about its remoting.

use rally_actor::monitor::Figure;

/// A snapshot of a node's remoting counters (totals since start).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Peers this node has an association with.
    pub associations: usize,
    /// Messages queued for sending, replies included.
    pub messages_sent: u64,
    /// Of those, replies to other nodes' requests.
    pub replies_sent: u64,
    /// Socket writes that sent bytes (each carries every frame its lane had queued).
    pub writes: u64,
    /// Of those, made by a sending thread itself rather than by the lane's writer task: the
    /// batch an inbound read's actors queued, written by the thread on which the last of
    /// them ran, or a lone frame from a thread outside the runtime.
    pub sender_writes: u64,
    /// Times a lane's writer task was woken from waiting. Batches an inbound read's actors
    /// queue are written by a sender and wake nobody; the rest wake the writer task at most
    /// once per batch. Per message, this is the cross-thread cost of the write path.
    pub writer_wakeups: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Messages dropped on the way out (full lane, lost connection).
    pub outbound_dropped: u64,
    /// Requests waiting for a reply.
    pub pending_requests: usize,
    /// Frames received.
    pub frames_received: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Read system calls that returned data.
    pub reads: u64,
    /// Inbound messages dropped: manifest not registered for the target.
    pub unknown_manifest: u64,
    /// Inbound messages dropped: payload failed to decode.
    pub decode_failed: u64,
    /// Inbound messages dropped: no actor exposed under that name.
    pub unknown_recipient: u64,
    /// Inbound messages the target actor did not take (stopped, full).
    pub undelivered: u64,
    /// Connections closed for breaking the protocol after authenticating.
    pub protocol_errors: u64,
    /// Handshakes that failed: inbound ones, and outbound ones refused for good (another
    /// secret, version or address; a quarantined incarnation).
    pub handshake_failures: u64,
    /// Inbound connections refused at once because too many others had not authenticated yet
    /// (`RemoteConfig::max_unauthenticated_connections`).
    pub connections_refused: u64,
}

impl RemoteStats {
    /// Messages per write system call on the way out: the batching factor.
    pub fn messages_per_write(&self) -> f64 {
        if self.writes == 0 {
            0.0
        } else {
            self.messages_sent as f64 / self.writes as f64
        }
    }

    /// Writer wake-ups per message sent.
    ///
    /// # Example
    ///
    /// ```
    /// let stats = rally::remote::RemoteStats {
    ///     messages_sent: 1_000,
    ///     writer_wakeups: 10,
    ///     ..Default::default()
    /// };
    /// assert_eq!(stats.wakeups_per_message(), 0.01);
    /// ```
    pub fn wakeups_per_message(&self) -> f64 {
        if self.messages_sent == 0 {
            0.0
        } else {
            self.writer_wakeups as f64 / self.messages_sent as f64
        }
    }

    /// The figures of a node at `node` (its address) for the actor system's monitor, so that
    /// the metrics endpoint of `rally-metrics` (`/metrics`, `/report`) exports them without
    /// depending on this crate: `rally_remote_*`, each with the label `node`. Names and meaning
    /// are listed in `docs/tuning.md`.
    pub(crate) fn figures(&self, node: &str, out: &mut Vec<Figure>) {
        let gauges = [
            (
                "rally_remote_associations",
                "Peers this node has an association with.",
                self.associations,
            ),
            (
                "rally_remote_pending_requests",
                "Asks sent to other nodes waiting for their reply.",
                self.pending_requests,
            ),
        ];
        for (name, help, value) in gauges {
            out.push(Figure::gauge(name, help, value as f64).label("node", node));
        }
        let counters = [
            (
                "rally_remote_messages_sent_total",
                "Messages queued for other nodes, replies included.",
                self.messages_sent,
            ),
            (
                "rally_remote_replies_sent_total",
                "Of those, replies to other nodes' asks.",
                self.replies_sent,
            ),
            (
                "rally_remote_writes_total",
                "Socket writes that sent bytes (messages sent per write is the batching).",
                self.writes,
            ),
            (
                "rally_remote_sender_writes_total",
                "Of those, made by a sending thread rather than by the lane's writer task.",
                self.sender_writes,
            ),
            (
                "rally_remote_writer_wakeups_total",
                "Times a lane's writer task was woken.",
                self.writer_wakeups,
            ),
            (
                "rally_remote_bytes_written_total",
                "Bytes written to other nodes.",
                self.bytes_written,
            ),
            (
                "rally_remote_outbound_dropped_total",
                "Messages dropped on the way out (a full lane, a lost connection).",
                self.outbound_dropped,
            ),
            (
                "rally_remote_frames_received_total",
                "Frames received from other nodes.",
                self.frames_received,
            ),
            (
                "rally_remote_bytes_read_total",
                "Bytes read from other nodes.",
                self.bytes_read,
            ),
            (
                "rally_remote_reads_total",
                "Socket reads that returned data.",
                self.reads,
            ),
            (
                "rally_remote_protocol_errors_total",
                "Connections closed for breaking the protocol after authenticating.",
                self.protocol_errors,
            ),
            (
                "rally_remote_handshake_failures_total",
                "Handshakes that failed (another secret, version or address; a quarantined \
                 incarnation).",
                self.handshake_failures,
            ),
            (
                "rally_remote_connections_refused_total",
                "Inbound connections refused at once: too many had not authenticated yet.",
                self.connections_refused,
            ),
        ];
        for (name, help, value) in counters {
            out.push(Figure::counter(name, help, value).label("node", node));
        }
        let dropped = [
            ("unknown-manifest", self.unknown_manifest),
            ("decode-failed", self.decode_failed),
            ("unknown-recipient", self.unknown_recipient),
            ("undelivered", self.undelivered),
        ];
        for (reason, value) in dropped {
            out.push(
                Figure::counter(
                    "rally_remote_inbound_dropped_total",
                    "Inbound messages dropped, by reason.",
                    value,
                )
                .label("node", node)
                .label("reason", reason),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field is exported once, under the node's label: a field added to `RemoteStats`
    /// without a figure fails here (the struct literal names them all).
    #[test]
    fn every_figure_carries_its_field_and_the_node() {
        let stats = RemoteStats {
            associations: 1,
            messages_sent: 2,
            replies_sent: 3,
            writes: 4,
            sender_writes: 5,
            writer_wakeups: 6,
            bytes_written: 7,
            outbound_dropped: 8,
            pending_requests: 9,
            frames_received: 10,
            bytes_read: 11,
            reads: 12,
            unknown_manifest: 13,
            decode_failed: 14,
            unknown_recipient: 15,
            undelivered: 16,
            protocol_errors: 17,
            handshake_failures: 18,
            connections_refused: 19,
        };
        let mut figures = Vec::new();
        stats.figures("rally://a@h:1", &mut figures);
        let mut values: Vec<u64> = figures.iter().map(|f| f.value as u64).collect();
        values.sort_unstable();
        assert_eq!(values, (1..=19).collect::<Vec<_>>(), "{figures:?}");
        assert!(
            figures
                .iter()
                .all(|f| f.labels.first() == Some(&("node", "rally://a@h:1".to_owned()))),
            "{figures:?}"
        );
        let undelivered = figures
            .iter()
            .find(|f| f.labels.contains(&("reason", "undelivered".to_owned())))
            .expect("by reason");
        assert_eq!(undelivered.value, 16.0);
    }
}
