//! Byte streams between nodes: TCP for real use, in-memory pipes for deterministic tests.
//!
//! Every transport sits behind [`Transport`], so the association, reader and writer code is the
//! same over TCP, TLS or memory.

mod memory;
// tokio has no sockets in a `--cfg loom` build (the loom models need none).
#[cfg(not(loom))]
mod tcp;
#[cfg(not(loom))]
mod tls;

use std::io;
use std::pin::Pin;

use futures_util::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

pub use memory::MemoryTransport;
#[cfg(not(loom))]
pub use tcp::TcpTransport;
#[cfg(not(loom))]
pub use tls::{TlsError, TlsTransport};

/// A bidirectional byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A boxed stream, as transports hand them out.
pub type BoxStream = Pin<Box<dyn Stream>>;

/// An accepted connection still to be set up (e.g. its TLS handshake); the node awaits it in
/// the connection's own task, under the handshake deadline.
pub type Incoming = BoxFuture<'static, io::Result<BoxStream>>;

/// Accepts inbound streams.
pub trait Listener: Send + 'static {
    /// Waits for the next inbound connection; returns it with a printable peer address.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Incoming, String)>>;
    /// The host and port this listener is reachable at.
    fn local_addr(&self) -> io::Result<(String, u16)>;
}

/// Opens outbound streams and listeners.
pub trait Transport: Send + Sync + 'static {
    /// Connects to `host:port`.
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxStream>>;
    /// Listens on `host:port` (port 0 picks a free one).
    fn bind<'a>(&'a self, host: &'a str, port: u16)
    -> BoxFuture<'a, io::Result<Box<dyn Listener>>>;
}
