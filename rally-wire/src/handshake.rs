//! The connection handshake, sans-IO: feed frames in, get frames out.
//!
//! ```text
//! client                                   server
//!   preface, Hello{from, cluster, to, lane, max, Nc} ->
//!                                       <-  Challenge{from, max, Ns, MACs}
//!   Proof{MACc} | Reject{bad proof}     ->
//!                                       <-  Accept | Reject{reason}
//! MACs = HMAC-SHA256(secret, "rally-server-v1" | Nc | Ns | client | server | cluster)
//! MACc = HMAC-SHA256(secret, "rally-client-v1" | Ns | Nc | client | server | cluster)
//! ```
//!
//! Both sides prove they hold the shared secret without sending it; fresh nonces on both sides
//! stop replays. A server refuses a client that names another cluster before any proof
//! (`Reject{WrongCluster}` carries the server's cluster name, so both sides can name both).
//! Deadlines are the caller's: the remote layer bounds the whole exchange.

use bytes::{BufMut, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::codec::{DecodeError, Reader, put_str, put_varint};
use crate::frame::{
    FrameKind, PREFACE_LEN, PrefaceError, begin_frame, check_preface, encode_preface, finish_frame,
};
use crate::ids::{Incarnation, Lane, NodeAddress, UniqueAddress};

type HmacSha256 = Hmac<Sha256>;

/// Longest system or host name in a handshake.
const MAX_NAME_LEN: usize = 255;

/// Largest frame accepted before a peer has authenticated, whatever the data-phase maximum:
/// the largest handshake frame (a Hello with two 255-byte names each way) is under 1,200
/// bytes, so an unauthenticated peer can make a node buffer at most this much per connection.
pub const HANDSHAKE_MAX_FRAME: u32 = 4 * 1024;

/// The smallest data-phase maximum a peer may announce: every control frame fits.
const MIN_PEER_MAX_FRAME: u32 = 1024;

/// This node's side of handshakes. `Debug` shows the secret's length, never its bytes.
#[derive(Clone)]
pub struct HandshakeConfig {
    /// Who we are.
    pub local: UniqueAddress,
    /// The shared cluster secret.
    pub secret: Vec<u8>,
    /// The name of the cluster this node belongs to: nodes of different clusters refuse each
    /// other ([`HandshakeError::WrongCluster`]). At most 255 bytes.
    pub cluster: String,
    /// Largest data-phase frame we accept; announced to the peer, which then refuses larger
    /// messages at its end.
    pub max_frame_len: u32,
}

impl std::fmt::Debug for HandshakeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandshakeConfig")
            .field("local", &self.local)
            .field(
                "secret",
                &format_args!("<{} bytes, not shown>", self.secret.len()),
            )
            .field("cluster", &self.cluster)
            .field("max_frame_len", &self.max_frame_len)
            .finish()
    }
}

/// Who is on the other side of a finished handshake, and for which lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's address and incarnation.
    pub peer: UniqueAddress,
    /// The lane the connection serves.
    pub lane: Lane,
    /// The largest data-phase frame the peer accepts.
    pub max_frame_len: u32,
}

/// What a handshake step produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Keep going (frames to send, if any, are in `out`).
    Continue,
    /// Authenticated.
    Done(PeerInfo),
}

/// Why the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RejectReason {
    /// The client's proof was wrong (wrong secret).
    BadProof = 1,
    /// The client called another node.
    WrongAddress = 2,
    /// The client's incarnation is quarantined.
    Quarantined = 3,
    /// The client speaks another protocol version.
    UnsupportedVersion = 4,
    /// The client broke the handshake protocol.
    Protocol = 5,
    /// The client belongs to another cluster (the Reject carries the server's cluster name).
    WrongCluster = 6,
}

impl std::fmt::Display for RejectReason {
    /// The reason in words, as the refused client's error shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BadProof => "this node's proof is wrong (different secret?)",
            Self::WrongAddress => "the server is not the node this one called",
            Self::Quarantined => "this node's incarnation is quarantined there",
            Self::UnsupportedVersion => {
                "this node speaks a protocol version the server does not support"
            }
            Self::Protocol => "this node broke the handshake protocol",
            Self::WrongCluster => "this node belongs to another cluster",
        })
    }
}

impl RejectReason {
    fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::BadProof,
            2 => Self::WrongAddress,
            3 => Self::Quarantined,
            4 => Self::UnsupportedVersion,
            5 => Self::Protocol,
            6 => Self::WrongCluster,
            _ => return None,
        })
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The preface was wrong.
    #[error("preface: {0}")]
    Preface(#[from] PrefaceError),
    /// A frame body was malformed.
    #[error("decode: {0}")]
    Decode(#[from] DecodeError),
    /// A frame came at the wrong time.
    #[error("unexpected {kind:?} frame while {state}")]
    UnexpectedFrame {
        /// What the state machine was doing.
        state: &'static str,
        /// The frame's kind.
        kind: FrameKind,
    },
    /// The server does not know the secret.
    #[error("the server's proof is wrong (different secret?)")]
    BadServerProof,
    /// The client does not know the secret.
    #[error("the client's proof is wrong (different secret?)")]
    BadClientProof,
    /// The other side is not who was called.
    #[error("expected {expected}, found {found}")]
    WrongAddress {
        /// Whom we meant.
        expected: NodeAddress,
        /// Who it is.
        found: NodeAddress,
    },
    /// The server refused us.
    #[error("rejected by the server: {0}")]
    Rejected(RejectReason),
    /// The client's incarnation is quarantined here.
    #[error("{0} is quarantined")]
    Quarantined(NodeAddress),
    /// The client could not verify our proof and hung up (different secret).
    #[error("the client refused our proof (different secret?)")]
    ClientRefusedProof,
    /// The two nodes belong to clusters of different names: they refuse each other.
    #[error(
        "the peer belongs to cluster {peer:?}, this node to cluster {local:?}: nodes of different clusters refuse each other"
    )]
    WrongCluster {
        /// This node's cluster name.
        local: String,
        /// The peer's cluster name.
        peer: String,
    },
}

impl HandshakeError {
    /// Whether retrying cannot help until someone changes a configuration or restarts a
    /// process: a secret, a version, a cluster name or an address that differs, or a
    /// quarantined incarnation.
    ///
    /// # Example
    ///
    /// ```
    /// use rally_wire::{HandshakeError, RejectReason};
    ///
    /// assert!(HandshakeError::BadServerProof.is_permanent());
    /// assert!(HandshakeError::Rejected(RejectReason::Quarantined).is_permanent());
    /// assert!(!HandshakeError::Rejected(RejectReason::Protocol).is_permanent());
    /// ```
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::BadServerProof
            | Self::BadClientProof
            | Self::ClientRefusedProof
            | Self::WrongAddress { .. }
            | Self::WrongCluster { .. }
            | Self::Quarantined(_) => true,
            Self::Preface(PrefaceError::UnsupportedVersion { .. } | PrefaceError::Tls) => true,
            Self::Rejected(reason) => !matches!(reason, RejectReason::Protocol),
            _ => false,
        }
    }
}

fn put_unique(out: &mut BytesMut, id: &UniqueAddress) {
    put_str(out, &id.address.system);
    put_str(out, &id.address.host);
    put_varint(out, u64::from(id.address.port));
    out.put_u64(id.incarnation.0);
}

fn read_address(reader: &mut Reader<'_>) -> Result<NodeAddress, DecodeError> {
    let system = reader.str("system", MAX_NAME_LEN)?.to_owned();
    let host = reader.str("host", MAX_NAME_LEN)?.to_owned();
    let port = reader.varint()?;
    let port = u16::try_from(port).map_err(|_| DecodeError::OutOfRange {
        field: "port",
        value: port,
    })?;
    Ok(NodeAddress { system, host, port })
}

fn read_max_frame(reader: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let max = reader.varint_u32("max frame")?;
    if max < MIN_PEER_MAX_FRAME {
        return Err(DecodeError::OutOfRange {
            field: "max frame",
            value: u64::from(max),
        });
    }
    Ok(max)
}

fn read_unique(reader: &mut Reader<'_>) -> Result<UniqueAddress, DecodeError> {
    let address = read_address(reader)?;
    let incarnation = Incarnation(u64::from_be_bytes(reader.array()?));
    Ok(UniqueAddress {
        address,
        incarnation,
    })
}

/// The MAC over both nonces, both identities and the cluster name (which both sides checked
/// to be the same), under the shared secret.
fn mac(
    config: &HandshakeConfig,
    label: &[u8],
    first: &[u8; 32],
    second: &[u8; 32],
    client: &UniqueAddress,
    server: &UniqueAddress,
) -> HmacSha256 {
    let mut mac =
        HmacSha256::new_from_slice(&config.secret).expect("HMAC accepts keys of any length");
    let mut ids = BytesMut::new();
    put_unique(&mut ids, client);
    put_unique(&mut ids, server);
    put_str(&mut ids, &config.cluster);
    mac.update(label);
    mac.update(first);
    mac.update(second);
    mac.update(&ids);
    mac
}

fn frame(out: &mut BytesMut, kind: FrameKind, body: impl FnOnce(&mut BytesMut)) {
    let mark = begin_frame(out, kind);
    body(out);
    finish_frame(out, mark, u32::MAX).expect("handshake frames are a few hundred bytes");
}

fn reject(out: &mut BytesMut, reason: RejectReason) {
    frame(out, FrameKind::Reject, |out| out.put_u8(reason as u8));
}

/// A `Reject{WrongCluster}` names the server's cluster, so the client can name both.
fn reject_wrong_cluster(out: &mut BytesMut, cluster: &str) {
    frame(out, FrameKind::Reject, |out| {
        out.put_u8(RejectReason::WrongCluster as u8);
        put_str(out, cluster);
    });
}

/// The error a Reject frame means for the side that receives it (`local_cluster`: its own
/// cluster name, to name both in [`HandshakeError::WrongCluster`]).
fn read_reject(body: &[u8], local_cluster: &str) -> HandshakeError {
    let mut reader = Reader::new(body);
    match reader.u8() {
        Ok(byte) => match RejectReason::from_u8(byte) {
            Some(RejectReason::WrongCluster) => match reader.str("cluster", MAX_NAME_LEN) {
                Ok(peer) => HandshakeError::WrongCluster {
                    local: local_cluster.to_owned(),
                    peer: peer.to_owned(),
                },
                Err(e) => HandshakeError::Decode(e),
            },
            Some(reason) => HandshakeError::Rejected(reason),
            None => HandshakeError::Decode(DecodeError::UnknownValue {
                field: "reject reason",
                value: byte,
            }),
        },
        Err(e) => HandshakeError::Decode(e),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    New,
    AwaitChallenge,
    AwaitAccept,
    Done,
}

/// The calling side.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally_wire::*;
///
/// let id = |port| UniqueAddress {
///     address: NodeAddress { system: "s".into(), host: "h".into(), port },
///     incarnation: Incarnation(port.into()),
/// };
/// let config = |port| HandshakeConfig {
///     local: id(port), secret: b"k".to_vec(), cluster: "shop".into(), max_frame_len: 1 << 20,
/// };
/// let mut client = ClientHandshake::new(config(1), id(2).address, Lane::Control, [1; 32]);
/// let mut server = ServerHandshake::new(config(2), [2; 32]);
/// let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
/// client.start(&mut to_server);
/// server.on_preface(to_server[..PREFACE_LEN].try_into().unwrap(), &mut to_client).unwrap();
/// let mut pending = to_server.split_off(PREFACE_LEN);
/// let mut done = (None, None);
/// while done.0.is_none() || done.1.is_none() {
///     while let Some((kind, body, used)) = split_frame(&pending, 1 << 20).unwrap() {
///         if let HandshakeEvent::Done(peer) = server.on_frame(kind, body, &mut to_client).unwrap() { done.1 = Some(peer); }
///         let _ = pending.split_to(used);
///     }
///     let mut back = to_client.split();
///     while let Some((kind, body, used)) = split_frame(&back, 1 << 20).unwrap() {
///         if let HandshakeEvent::Done(peer) = client.on_frame(kind, body, &mut pending).unwrap() { done.0 = Some(peer); }
///         let _ = back.split_to(used);
///     }
/// }
/// assert_eq!(done.0.unwrap().peer, id(2));
/// assert_eq!(done.1.unwrap().peer, id(1));
/// ```
#[derive(Debug)]
pub struct ClientHandshake {
    config: HandshakeConfig,
    to: NodeAddress,
    lane: Lane,
    nonce: [u8; 32],
    state: ClientState,
    server: Option<(UniqueAddress, u32)>,
}

impl ClientHandshake {
    /// A handshake calling `to` for `lane`, with a fresh random `nonce`.
    pub fn new(config: HandshakeConfig, to: NodeAddress, lane: Lane, nonce: [u8; 32]) -> Self {
        Self {
            config,
            to,
            lane,
            nonce,
            state: ClientState::New,
            server: None,
        }
    }

    /// Writes the preface and the Hello.
    pub fn start(&mut self, out: &mut BytesMut) {
        encode_preface(out);
        frame(out, FrameKind::Hello, |out| {
            put_unique(out, &self.config.local);
            put_str(out, &self.config.cluster);
            put_str(out, &self.to.system);
            put_str(out, &self.to.host);
            put_varint(out, u64::from(self.to.port));
            out.put_u8(self.lane.to_u8());
            put_varint(out, u64::from(self.config.max_frame_len));
            out.put_slice(&self.nonce);
        });
        self.state = ClientState::AwaitChallenge;
    }

    /// Feeds one frame from the server.
    ///
    /// # Errors
    ///
    /// [`HandshakeError`] for a wrong server, a bad proof, a rejection or malformed frames.
    pub fn on_frame(
        &mut self,
        kind: FrameKind,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<HandshakeEvent, HandshakeError> {
        match (self.state, kind) {
            (_, FrameKind::Reject) => Err(read_reject(body, &self.config.cluster)),
            (ClientState::AwaitChallenge, FrameKind::Challenge) => {
                let mut reader = Reader::new(body);
                let server = read_unique(&mut reader)?;
                let server_max = read_max_frame(&mut reader)?;
                let server_nonce: [u8; 32] = reader.array()?;
                let server_mac: [u8; 32] = reader.array()?;
                reader.finish()?;
                if server.address != self.to {
                    return Err(HandshakeError::WrongAddress {
                        expected: self.to.clone(),
                        found: server.address,
                    });
                }
                let expected = mac(
                    &self.config,
                    b"rally-server-v1",
                    &self.nonce,
                    &server_nonce,
                    &self.config.local,
                    &server,
                );
                if expected.verify_slice(&server_mac).is_err() {
                    // Tell the server why we hang up, so both sides name the cause.
                    reject(out, RejectReason::BadProof);
                    return Err(HandshakeError::BadServerProof);
                }
                let proof = mac(
                    &self.config,
                    b"rally-client-v1",
                    &server_nonce,
                    &self.nonce,
                    &self.config.local,
                    &server,
                )
                .finalize()
                .into_bytes();
                frame(out, FrameKind::Proof, |out| out.put_slice(&proof));
                self.server = Some((server, server_max));
                self.state = ClientState::AwaitAccept;
                Ok(HandshakeEvent::Continue)
            }
            (ClientState::AwaitAccept, FrameKind::Accept) => {
                Reader::new(body).finish()?;
                self.state = ClientState::Done;
                let (peer, max_frame_len) = self
                    .server
                    .clone()
                    .expect("the challenge stored the server's identity");
                Ok(HandshakeEvent::Done(PeerInfo {
                    peer,
                    lane: self.lane,
                    max_frame_len,
                }))
            }
            (state, kind) => Err(HandshakeError::UnexpectedFrame {
                state: client_state_name(state),
                kind,
            }),
        }
    }
}

fn client_state_name(state: ClientState) -> &'static str {
    match state {
        ClientState::New => "not started",
        ClientState::AwaitChallenge => "awaiting the challenge",
        ClientState::AwaitAccept => "awaiting acceptance",
        ClientState::Done => "done",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    AwaitPreface,
    AwaitHello,
    AwaitProof,
    Done,
}

/// Decides which peers are refused (quarantined incarnations).
type RefusedFn = Box<dyn Fn(&UniqueAddress) -> bool + Send>;

/// The answering side.
pub struct ServerHandshake {
    config: HandshakeConfig,
    nonce: [u8; 32],
    state: ServerState,
    client: Option<(UniqueAddress, Lane, u32, [u8; 32])>,
    refused: RefusedFn,
}

impl std::fmt::Debug for ServerHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandshake")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ServerHandshake {
    /// A handshake answering with a fresh random `nonce`.
    pub fn new(config: HandshakeConfig, nonce: [u8; 32]) -> Self {
        Self {
            config,
            nonce,
            state: ServerState::AwaitPreface,
            client: None,
            refused: Box::new(|_| false),
        }
    }

    /// Refuses clients for which `refused` is true (their incarnation is quarantined).
    pub fn set_refused(&mut self, refused: impl Fn(&UniqueAddress) -> bool + Send + 'static) {
        self.refused = Box::new(refused);
    }

    /// Checks the preface. On a version mismatch it writes a Reject first; on a TLS
    /// ClientHello, this node's own preface, which a TLS client reads as "not TLS" at once
    /// rather than waiting for an answer that never comes.
    ///
    /// # Errors
    ///
    /// [`HandshakeError::Preface`].
    pub fn on_preface(
        &mut self,
        preface: &[u8; PREFACE_LEN],
        out: &mut BytesMut,
    ) -> Result<(), HandshakeError> {
        if self.state != ServerState::AwaitPreface {
            return Err(HandshakeError::UnexpectedFrame {
                state: "past the preface",
                kind: FrameKind::Hello,
            });
        }
        if let Err(error) = check_preface(preface) {
            match error {
                PrefaceError::UnsupportedVersion { .. } => {
                    reject(out, RejectReason::UnsupportedVersion);
                }
                PrefaceError::Tls => encode_preface(out),
                _ => {}
            }
            return Err(error.into());
        }
        self.state = ServerState::AwaitHello;
        Ok(())
    }

    /// Feeds one frame from the client.
    ///
    /// # Errors
    ///
    /// [`HandshakeError`] for a bad proof, a wrong address, a quarantined client or malformed
    /// frames (a Reject is written into `out` where the client should learn why).
    pub fn on_frame(
        &mut self,
        kind: FrameKind,
        body: &[u8],
        out: &mut BytesMut,
    ) -> Result<HandshakeEvent, HandshakeError> {
        match (self.state, kind) {
            (ServerState::AwaitHello, FrameKind::Hello) => {
                let parsed = (|| {
                    let mut reader = Reader::new(body);
                    let client = read_unique(&mut reader)?;
                    let cluster = reader.str("cluster", MAX_NAME_LEN)?.to_owned();
                    let to = read_address(&mut reader)?;
                    let lane_byte = reader.u8()?;
                    let lane = Lane::from_u8(lane_byte).ok_or(DecodeError::UnknownValue {
                        field: "lane",
                        value: lane_byte,
                    })?;
                    let max = read_max_frame(&mut reader)?;
                    let nonce: [u8; 32] = reader.array()?;
                    reader.finish()?;
                    Ok::<_, DecodeError>((client, cluster, to, lane, max, nonce))
                })();
                let (client, cluster, to, lane, client_max, client_nonce) = match parsed {
                    Ok(hello) => hello,
                    Err(error) => {
                        reject(out, RejectReason::Protocol);
                        return Err(error.into());
                    }
                };
                if to != self.config.local.address {
                    reject(out, RejectReason::WrongAddress);
                    return Err(HandshakeError::WrongAddress {
                        expected: self.config.local.address.clone(),
                        found: to,
                    });
                }
                if cluster != self.config.cluster {
                    reject_wrong_cluster(out, &self.config.cluster);
                    return Err(HandshakeError::WrongCluster {
                        local: self.config.cluster.clone(),
                        peer: cluster,
                    });
                }
                if (self.refused)(&client) {
                    reject(out, RejectReason::Quarantined);
                    return Err(HandshakeError::Quarantined(client.address));
                }
                let server_mac = mac(
                    &self.config,
                    b"rally-server-v1",
                    &client_nonce,
                    &self.nonce,
                    &client,
                    &self.config.local,
                )
                .finalize()
                .into_bytes();
                frame(out, FrameKind::Challenge, |out| {
                    put_unique(out, &self.config.local);
                    put_varint(out, u64::from(self.config.max_frame_len));
                    out.put_slice(&self.nonce);
                    out.put_slice(&server_mac);
                });
                self.client = Some((client, lane, client_max, client_nonce));
                self.state = ServerState::AwaitProof;
                Ok(HandshakeEvent::Continue)
            }
            (ServerState::AwaitProof, FrameKind::Proof) => {
                let (client, lane, client_max, client_nonce) =
                    self.client.clone().expect("the hello stored the client");
                let mut reader = Reader::new(body);
                let proof: [u8; 32] = match reader.array().and_then(|p| reader.finish().map(|()| p))
                {
                    Ok(proof) => proof,
                    Err(error) => {
                        reject(out, RejectReason::Protocol);
                        return Err(error.into());
                    }
                };
                let expected = mac(
                    &self.config,
                    b"rally-client-v1",
                    &self.nonce,
                    &client_nonce,
                    &client,
                    &self.config.local,
                );
                if expected.verify_slice(&proof).is_err() {
                    reject(out, RejectReason::BadProof);
                    return Err(HandshakeError::BadClientProof);
                }
                frame(out, FrameKind::Accept, |_| {});
                self.state = ServerState::Done;
                Ok(HandshakeEvent::Done(PeerInfo {
                    peer: client,
                    lane,
                    max_frame_len: client_max,
                }))
            }
            (ServerState::AwaitProof, FrameKind::Reject) => {
                match read_reject(body, &self.config.cluster) {
                    // The client found our proof wrong: the secrets differ.
                    HandshakeError::Rejected(RejectReason::BadProof) => {
                        Err(HandshakeError::ClientRefusedProof)
                    }
                    other => Err(other),
                }
            }
            (state, kind) => {
                reject(out, RejectReason::Protocol);
                Err(HandshakeError::UnexpectedFrame {
                    state: server_state_name(state),
                    kind,
                })
            }
        }
    }
}

fn server_state_name(state: ServerState) -> &'static str {
    match state {
        ServerState::AwaitPreface => "awaiting the preface",
        ServerState::AwaitHello => "awaiting the hello",
        ServerState::AwaitProof => "awaiting the proof",
        ServerState::Done => "done",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{MAGIC, split_frame};

    fn id(port: u16) -> UniqueAddress {
        UniqueAddress {
            address: NodeAddress {
                system: "s".into(),
                host: "h".into(),
                port,
            },
            incarnation: Incarnation(u64::from(port) * 7),
        }
    }

    fn config(port: u16, secret: &[u8]) -> HandshakeConfig {
        HandshakeConfig {
            local: id(port),
            secret: secret.to_vec(),
            cluster: "c".into(),
            max_frame_len: 1 << 20,
        }
    }

    /// Runs a whole exchange; returns each side's result.
    fn exchange(
        mut client: ClientHandshake,
        mut server: ServerHandshake,
    ) -> (
        Result<PeerInfo, HandshakeError>,
        Option<Result<PeerInfo, HandshakeError>>,
    ) {
        let mut to_server = BytesMut::new();
        let mut to_client = BytesMut::new();
        client.start(&mut to_server);
        let preface: [u8; PREFACE_LEN] = to_server[..PREFACE_LEN].try_into().unwrap();
        let mut pending = to_server.split_off(PREFACE_LEN);
        if let Err(e) = server.on_preface(&preface, &mut to_client) {
            return (
                Err(HandshakeError::Rejected(RejectReason::UnsupportedVersion)),
                Some(Err(e)),
            );
        }
        let (mut c, mut s) = (None, None);
        for _ in 0..4 {
            while let Some((kind, body, used)) = split_frame(&pending, 1 << 20).unwrap() {
                match server.on_frame(kind, body, &mut to_client) {
                    Ok(HandshakeEvent::Done(p)) => s = Some(Ok(p)),
                    Ok(HandshakeEvent::Continue) => {}
                    Err(e) => s = Some(Err(e)),
                }
                let _ = pending.split_to(used);
            }
            let mut back = to_client.split();
            while let Some((kind, body, used)) = split_frame(&back, 1 << 20).unwrap() {
                match client.on_frame(kind, body, &mut pending) {
                    Ok(HandshakeEvent::Done(p)) => c = Some(Ok(p)),
                    Ok(HandshakeEvent::Continue) => {}
                    Err(e) => c = Some(Err(e)),
                }
                let _ = back.split_to(used);
            }
        }
        (c.expect("the client always finishes"), s)
    }

    #[test]
    fn same_secret_authenticates_both_ways() {
        let (c, s) = exchange(
            ClientHandshake::new(config(1, b"k"), id(2).address, Lane::Ordinary(0), [1; 32]),
            ServerHandshake::new(config(2, b"k"), [2; 32]),
        );
        assert_eq!(
            c.unwrap(),
            PeerInfo {
                peer: id(2),
                lane: Lane::Ordinary(0),
                max_frame_len: 1 << 20,
            }
        );
        assert_eq!(
            s.unwrap().unwrap(),
            PeerInfo {
                peer: id(1),
                lane: Lane::Ordinary(0),
                max_frame_len: 1 << 20,
            }
        );
    }

    #[test]
    fn wrong_secret_is_caught_by_the_client_first() {
        let (c, s) = exchange(
            ClientHandshake::new(config(1, b"a"), id(2).address, Lane::Control, [1; 32]),
            ServerHandshake::new(config(2, b"b"), [2; 32]),
        );
        assert_eq!(c.unwrap_err(), HandshakeError::BadServerProof);
        // The client says why it hangs up, so the server names the cause too.
        assert_eq!(s.unwrap().unwrap_err(), HandshakeError::ClientRefusedProof);
    }

    #[test]
    fn a_client_without_the_secret_is_rejected() {
        // A client that skips verification and sends a forged proof.
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        let mut client =
            ClientHandshake::new(config(1, b"k"), id(2).address, Lane::Control, [1; 32]);
        let mut wire = BytesMut::new();
        client.start(&mut wire);
        let mut out = BytesMut::new();
        server
            .on_preface(wire[..6].try_into().unwrap(), &mut out)
            .unwrap();
        let (kind, body, _) = split_frame(&wire[6..], 1 << 20).unwrap().unwrap();
        server.on_frame(kind, body, &mut out).unwrap();
        let mut forged = BytesMut::new();
        frame(&mut forged, FrameKind::Proof, |o| o.put_slice(&[0; 32]));
        let (kind, body, _) = split_frame(&forged, 1 << 20).unwrap().unwrap();
        let mut reply = BytesMut::new();
        assert_eq!(
            server.on_frame(kind, body, &mut reply),
            Err(HandshakeError::BadClientProof)
        );
        let (kind, body, _) = split_frame(&reply, 1 << 20).unwrap().unwrap();
        assert_eq!(kind, FrameKind::Reject);
        assert_eq!(
            read_reject(body, "c"),
            HandshakeError::Rejected(RejectReason::BadProof)
        );
    }

    #[test]
    fn another_cluster_name_is_refused_and_both_sides_name_both_clusters() {
        let mut client_config = config(1, b"k");
        client_config.cluster = "orders".into();
        let mut server_config = config(2, b"k");
        server_config.cluster = "billing".into();
        let (c, s) = exchange(
            ClientHandshake::new(client_config, id(2).address, Lane::Control, [1; 32]),
            ServerHandshake::new(server_config, [2; 32]),
        );
        let c = c.unwrap_err();
        assert_eq!(
            c,
            HandshakeError::WrongCluster {
                local: "orders".into(),
                peer: "billing".into()
            }
        );
        assert!(c.is_permanent(), "retrying cannot change a cluster name");
        assert_eq!(
            s.unwrap().unwrap_err(),
            HandshakeError::WrongCluster {
                local: "billing".into(),
                peer: "orders".into()
            }
        );
        // Even with another secret, the cluster name is what the error names: it is checked
        // before any proof, and the secret never shows.
        let mut other = config(1, b"other secret");
        other.cluster = "orders".into();
        let (c, _) = exchange(
            ClientHandshake::new(other, id(2).address, Lane::Control, [1; 32]),
            ServerHandshake::new(config(2, b"k"), [2; 32]),
        );
        let message = c.unwrap_err().to_string();
        assert!(
            message.contains("\"orders\"") && message.contains("\"c\""),
            "{message}"
        );
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let client = ClientHandshake::new(
            config(1, b"hunter2-secret"),
            id(2).address,
            Lane::Control,
            [1; 32],
        );
        let shown = format!("{client:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("14 bytes, not shown"), "{shown}");
        // Nor as the bytes' numbers (derived Debug of a Vec<u8> would print them).
        assert!(!shown.contains("104, 117"), "{shown}");
    }

    #[test]
    fn a_wrong_cluster_reject_without_the_name_is_a_decode_error() {
        assert!(matches!(
            read_reject(&[RejectReason::WrongCluster as u8], "c"),
            HandshakeError::Decode(_)
        ));
    }

    #[test]
    fn wrong_address_and_quarantine_are_rejected_with_a_reason() {
        let (c, s) = exchange(
            ClientHandshake::new(config(1, b"k"), id(9).address, Lane::Control, [1; 32]),
            ServerHandshake::new(config(2, b"k"), [2; 32]),
        );
        assert_eq!(
            c.unwrap_err(),
            HandshakeError::Rejected(RejectReason::WrongAddress)
        );
        assert!(matches!(
            s.unwrap().unwrap_err(),
            HandshakeError::WrongAddress { .. }
        ));

        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        server.set_refused(|peer| peer.incarnation == Incarnation(7));
        let (c, s) = exchange(
            ClientHandshake::new(config(1, b"k"), id(2).address, Lane::Control, [1; 32]),
            server,
        );
        assert_eq!(
            c.unwrap_err(),
            HandshakeError::Rejected(RejectReason::Quarantined)
        );
        assert!(matches!(
            s.unwrap().unwrap_err(),
            HandshakeError::Quarantined(_)
        ));
    }

    #[test]
    fn a_refused_client_reads_the_reason_in_words() {
        assert_eq!(
            HandshakeError::Rejected(RejectReason::UnsupportedVersion).to_string(),
            "rejected by the server: this node speaks a protocol version the server does not support"
        );
        assert_eq!(
            HandshakeError::Rejected(RejectReason::BadProof).to_string(),
            "rejected by the server: this node's proof is wrong (different secret?)"
        );
    }

    #[test]
    fn bad_prefaces_and_out_of_order_frames_fail() {
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        let mut out = BytesMut::new();
        assert!(matches!(
            server.on_preface(b"GET / ", &mut out),
            Err(HandshakeError::Preface(PrefaceError::WrongMagic { .. }))
        ));
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        assert!(matches!(
            server.on_preface(b"RALY\x00\x09", &mut out),
            Err(HandshakeError::Preface(
                PrefaceError::UnsupportedVersion { .. }
            ))
        ));
        assert!(
            !out.is_empty(),
            "a version mismatch is answered with a Reject"
        );
        // A TLS ClientHello is answered with this node's preface (a TLS client reads "not
        // TLS" at once); it is permanent, as a secret that differs is.
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        let mut out = BytesMut::new();
        let error = server
            .on_preface(&[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01], &mut out)
            .unwrap_err();
        assert_eq!(error, HandshakeError::Preface(PrefaceError::Tls));
        assert!(error.is_permanent());
        assert_eq!(&out[..4], MAGIC);
        assert!(
            !HandshakeError::Preface(PrefaceError::WrongMagic { found: *b"GET " }).is_permanent()
        );
        let mut out = BytesMut::new();
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        server.on_preface(b"RALY\x00\x05", &mut out).unwrap();
        assert!(matches!(
            server.on_frame(FrameKind::Proof, &[0; 32], &mut out),
            Err(HandshakeError::UnexpectedFrame { .. })
        ));
        let mut server = ServerHandshake::new(config(2, b"k"), [2; 32]);
        server.on_preface(b"RALY\x00\x05", &mut out).unwrap();
        assert!(matches!(
            server.on_frame(FrameKind::Hello, &[3, b'a'], &mut out),
            Err(HandshakeError::Decode(_))
        ));
    }
}
