//! In-memory streams between nodes of one process, for deterministic tests.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use super::{BoxStream, Incoming, Listener, Transport};
use rally_actor::sync::Mutex;

/// Buffer size of each in-memory pipe.
const PIPE_BYTES: usize = 256 * 1024;

/// A network in one process: listeners register under `host:port`, connects reach them
/// through `tokio::io::duplex` pipes. Clone it to share one network between nodes.
///
/// # Example
///
/// ```
/// use rally::remote::transport::{MemoryTransport, Transport};
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let net = MemoryTransport::default();
/// let mut listener = net.bind("node-b", 1).await?;
/// let _client = net.connect("node-b", 1).await?;
/// let (incoming, _peer) = listener.accept().await?;
/// let _server = incoming.await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryTransport {
    listeners: Arc<Mutex<Listeners>>,
}

/// `host:port` → the accept queue of the listener there.
type Listeners = HashMap<(String, u16), mpsc::UnboundedSender<BoxStream>>;

impl Transport for MemoryTransport {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let listeners = self.listeners.lock();
            let accept = listeners.get(&(host.to_owned(), port)).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("nothing listens on {host}:{port}"),
                )
            })?;
            let (client, server) = tokio::io::duplex(PIPE_BYTES);
            accept.send(Box::pin(server)).map_err(|_| {
                io::Error::new(io::ErrorKind::ConnectionRefused, "the listener is closed")
            })?;
            Ok(Box::pin(client) as BoxStream)
        })
    }

    fn bind<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let mut listeners = self.listeners.lock();
            let port = if port == 0 {
                40_000 + listeners.len() as u16
            } else {
                port
            };
            let key = (host.to_owned(), port);
            if listeners.get(&key).is_some_and(|tx| !tx.is_closed()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{host}:{port} is taken"),
                ));
            }
            let (tx, rx) = mpsc::unbounded_channel();
            listeners.insert(key, tx);
            Ok(Box::new(MemoryListener {
                incoming: rx,
                host: host.to_owned(),
                port,
            }) as Box<dyn Listener>)
        })
    }
}

struct MemoryListener {
    incoming: mpsc::UnboundedReceiver<BoxStream>,
    host: String,
    port: u16,
}

impl Listener for MemoryListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Incoming, String)>> {
        Box::pin(async move {
            let stream = self.incoming.recv().await.ok_or_else(|| {
                io::Error::new(io::ErrorKind::BrokenPipe, "memory network dropped")
            })?;
            let ready: Incoming = Box::pin(async move { Ok(stream) });
            Ok((ready, "memory".to_owned()))
        })
    }

    fn local_addr(&self) -> io::Result<(String, u16)> {
        Ok((self.host.clone(), self.port))
    }
}
