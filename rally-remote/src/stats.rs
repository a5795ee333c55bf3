//! Figures a node reports about its remoting.

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
}
