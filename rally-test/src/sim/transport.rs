//! The simulated network as Rally sees it: [`SimTransport`] and its streams, which carry
//! bytes over turmoil's TCP between simulated hosts, and the open connections a fault can break.

use super::*;

/// Rally's [`Transport`] on the simulated network: the node's host name is its address.
///
/// Use it only inside a [`HostSimulation`]'s host (a host's software and the tasks it spawns).
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use rally::ActorSystem;
/// use rally::remote::RemoteNode;
/// use rally::sim::{self, SimTransport, HostSimulation};
///
/// let mut simulation = HostSimulation::new(1);
/// simulation.host("a", || async {
///     let system = ActorSystem::new("demo");
///     let node = RemoteNode::start_with(&system, sim::node_config("a"), Arc::new(SimTransport))
///         .await
///         .unwrap();
///     assert_eq!(node.address().host, "a");
///     (system, node)
/// });
/// simulation.run_for(std::time::Duration::from_millis(10)).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTransport;

impl Transport for SimTransport {
    fn connect<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<BoxStream>> + Send + 'a>> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok(Box::pin(SimStream::new(stream)?) as BoxStream)
        })
    }

    fn bind<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Box<dyn Listener>>> + Send + 'a>> {
        Box::pin(async move {
            // A simulated host accepts on all its addresses; it is reached by its name.
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
            let port = listener.local_addr()?.port();
            Ok(Box::new(SimListener {
                listener,
                host: host.to_owned(),
                port,
            }) as Box<dyn Listener>)
        })
    }
}

pub(super) struct SimListener {
    pub(super) listener: turmoil::net::TcpListener,
    pub(super) host: String,
    pub(super) port: u16,
}

impl Listener for SimListener {
    fn accept(
        &mut self,
    ) -> Pin<Box<dyn Future<Output = io::Result<(Incoming, String)>> + Send + '_>> {
        Box::pin(async move {
            let (stream, peer) = self.listener.accept().await?;
            let stream = SimStream::new(stream)?;
            let incoming: Incoming = Box::pin(async move { Ok(Box::pin(stream) as BoxStream) });
            Ok((incoming, peer.to_string()))
        })
    }

    fn local_addr(&self) -> io::Result<(String, u16)> {
        Ok((self.host.clone(), self.port))
    }
}

/// The connections of one simulation between two hosts, so that a test can break them
/// ([`HostSimulation::drop_connections`]) as a lost TCP connection breaks: both ends get an I/O
/// error, and the software reconnects if it wants to.
#[derive(Default)]
pub(super) struct Connections {
    pub(super) live: Mutex<Vec<(IpAddr, IpAddr, Weak<Connection>)>>,
}

impl Connections {
    /// Registers a connection between `a` and `b`.
    pub(super) fn add(&self, a: IpAddr, b: IpAddr, connection: &Arc<Connection>) {
        let mut live = self.live.lock();
        live.retain(|(_, _, c)| c.strong_count() > 0);
        live.push((a, b, Arc::downgrade(connection)));
    }

    /// Breaks every open connection between `a` and `b` (either way); returns how many.
    pub(super) fn break_between(&self, a: IpAddr, b: IpAddr) -> usize {
        let mut live = self.live.lock();
        let mut broken = 0;
        live.retain(|(x, y, connection)| {
            let Some(connection) = connection.upgrade() else {
                return false;
            };
            if (*x, *y) == (a, b) || (*x, *y) == (b, a) {
                // Each end of a connection is registered: count a connection once.
                if connection.break_now() && *x == a {
                    broken += 1;
                }
                return false;
            }
            true
        });
        broken
    }
}

/// One end of a simulated connection: broken or not, and who waits on it.
#[derive(Default)]
pub(super) struct Connection {
    pub(super) broken: AtomicBool,
    pub(super) waiting: Mutex<[Option<Waker>; 2]>,
}

impl Connection {
    /// Marks the connection broken and wakes whoever waits on it; false if it already was.
    pub(super) fn break_now(&self) -> bool {
        if self.broken.swap(true, Ordering::SeqCst) {
            return false;
        }
        let waiting = std::mem::take(&mut *self.waiting.lock());
        for waker in waiting.into_iter().flatten() {
            waker.wake();
        }
        true
    }

    pub(super) fn check(&self) -> io::Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the simulation broke this connection",
            ))
        } else {
            Ok(())
        }
    }

    /// Remembers who waits to read (`0`) or write (`1`), to wake it on a break.
    pub(super) fn wait(&self, side: usize, cx: &Context<'_>) {
        let mut waiting = self.waiting.lock();
        match &waiting[side] {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => waiting[side] = Some(cx.waker().clone()),
        }
    }
}

thread_local! {
    /// The connections of the simulation whose step runs on this thread (turmoil runs every
    /// host on the thread that steps the simulation).
    pub(super) static CONNECTIONS: RefCell<Option<Arc<Connections>>> = const { RefCell::new(None) };
}

/// A simulated TCP stream that the simulation can break.
pub(super) struct SimStream {
    pub(super) stream: turmoil::net::TcpStream,
    pub(super) connection: Arc<Connection>,
}

impl SimStream {
    pub(super) fn new(stream: turmoil::net::TcpStream) -> io::Result<Self> {
        let connection = Arc::new(Connection::default());
        let (local, peer) = (stream.local_addr()?.ip(), stream.peer_addr()?.ip());
        CONNECTIONS.with(|connections| {
            if let Some(connections) = &*connections.borrow() {
                connections.add(local, peer, &connection);
            }
        });
        Ok(Self { stream, connection })
    }

    pub(super) fn poll<T>(
        &mut self,
        side: usize,
        cx: &mut Context<'_>,
        op: impl FnOnce(Pin<&mut turmoil::net::TcpStream>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        self.connection.check()?;
        let polled = op(Pin::new(&mut self.stream), cx);
        if polled.is_pending() {
            self.connection.wait(side, cx);
            // A break between the check and the wait would be missed otherwise.
            self.connection.check()?;
        }
        polled
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll(0, cx, |stream, cx| stream.poll_read(cx, buf))
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll(1, cx, |stream, cx| stream.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll(1, cx, |stream, cx| stream.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing a broken connection succeeds: there is nothing left to close.
        if self.connection.check().is_err() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
