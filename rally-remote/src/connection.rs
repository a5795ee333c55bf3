//! Driving the sans-IO handshake of `rally-wire` over a stream, with a deadline.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use rally_wire::{
    ClientHandshake, FrameError, FrameKind, HANDSHAKE_MAX_FRAME, HandshakeConfig, HandshakeError,
    HandshakeEvent, Lane, NodeAddress, PREFACE_LEN, PeerInfo, ServerHandshake, split_frame,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::BoxStream;

/// Why a connection did not get past its handshake.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The stream failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The deadline passed.
    #[error("the handshake did not finish within {0:?}")]
    Timeout(Duration),
    /// The peer closed the stream.
    #[error("the peer closed the connection during the handshake")]
    Closed,
    /// The handshake failed (bad secret, wrong address, refused incarnation, bad bytes).
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// A frame was malformed.
    #[error("frame: {0}")]
    Frame(#[from] FrameError),
}

/// Runs the client side; returns who answered.
pub(crate) async fn client(
    stream: &mut BoxStream,
    config: HandshakeConfig,
    to: NodeAddress,
    lane: Lane,
    deadline: Duration,
) -> Result<PeerInfo, ConnectError> {
    let run = async {
        let mut handshake = ClientHandshake::new(config, to, lane, rand::random());
        let mut out = BytesMut::new();
        handshake.start(&mut out);
        stream.write_all(&out).await?;
        out.clear();
        let (peer, _) = exchange(stream, BytesMut::with_capacity(1024), |kind, body, out| {
            handshake.on_frame(kind, body, out)
        })
        .await?;
        Ok(peer)
    };
    tokio::time::timeout(deadline, run)
        .await
        .map_err(|_| ConnectError::Timeout(deadline))?
}

/// Runs the server side; returns the authenticated peer and any bytes read past the handshake.
pub(crate) async fn server(
    stream: &mut BoxStream,
    mut handshake: ServerHandshake,
    deadline: Duration,
) -> Result<(PeerInfo, BytesMut), ConnectError> {
    let run = async {
        let mut out = BytesMut::new();
        let mut preface = [0u8; PREFACE_LEN];
        stream.read_exact(&mut preface).await?;
        let checked = handshake.on_preface(&preface, &mut out);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        checked?;
        exchange(stream, BytesMut::with_capacity(1024), |kind, body, out| {
            handshake.on_frame(kind, body, out)
        })
        .await
    };
    tokio::time::timeout(deadline, run)
        .await
        .map_err(|_| ConnectError::Timeout(deadline))?
}

/// Feeds frames from `stream` to a handshake step function and writes what it produces, until
/// it reports `Done`; returns the peer and the bytes already read past the handshake. Frames
/// are bounded by [`HANDSHAKE_MAX_FRAME`], whatever the data-phase maximum: before it has
/// authenticated, a peer can make us hold a few KiB at most.
async fn exchange(
    stream: &mut BoxStream,
    mut buf: BytesMut,
    mut step: impl FnMut(FrameKind, &[u8], &mut BytesMut) -> Result<HandshakeEvent, HandshakeError>,
) -> Result<(PeerInfo, BytesMut), ConnectError> {
    let mut out = BytesMut::new();
    loop {
        // A TLS server answers a plain client's bytes with an alert: say so, not "bad frame".
        if rally_wire::is_tls_record(&buf) {
            return Err(HandshakeError::Preface(rally_wire::PrefaceError::Tls).into());
        }
        while let Some((kind, body, used)) = split_frame(&buf, HANDSHAKE_MAX_FRAME)? {
            let event = step(kind, body, &mut out);
            buf.advance(used);
            if !out.is_empty() {
                stream.write_all(&out).await?;
                out.clear();
            }
            if let HandshakeEvent::Done(peer) = event? {
                return Ok((peer, buf));
            }
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(ConnectError::Closed);
        }
    }
}
