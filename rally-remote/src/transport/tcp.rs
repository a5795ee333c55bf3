//! TCP, with Nagle's algorithm off: batching is done by the writer, not by the kernel's timer.

use std::io;

use futures_util::future::BoxFuture;
use tokio::net::{TcpListener, TcpStream};

use super::{BoxStream, Incoming, Listener, Transport};

/// Plain TCP.
///
/// # Example
///
/// ```
/// use rally::remote::transport::{TcpTransport, Transport};
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let listener = TcpTransport.bind("127.0.0.1", 0).await?;
/// let (_, port) = listener.local_addr()?;
/// assert_ne!(port, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpTransport;

impl Transport for TcpTransport {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let stream = TcpStream::connect((host, port)).await?;
            stream.set_nodelay(true)?;
            Ok(Box::pin(stream) as BoxStream)
        })
    }

    fn bind<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = TcpListener::bind((host, port)).await?;
            Ok(Box::new(TcpAcceptor {
                listener,
                host: host.to_owned(),
            }) as Box<dyn Listener>)
        })
    }
}

struct TcpAcceptor {
    listener: TcpListener,
    host: String,
}

impl Listener for TcpAcceptor {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Incoming, String)>> {
        Box::pin(async move {
            let (stream, peer) = self.listener.accept().await?;
            stream.set_nodelay(true)?;
            let ready: Incoming = Box::pin(async move { Ok(Box::pin(stream) as BoxStream) });
            Ok((ready, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<(String, u16)> {
        Ok((self.host.clone(), self.listener.local_addr()?.port()))
    }
}
