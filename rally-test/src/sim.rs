//! Many Rally nodes in one process, on simulated time and a simulated network.
//!
//! Each node runs on its own simulated host of a [`turmoil`](https://docs.rs/turmoil)
//! simulation: its own single-thread tokio runtime with a paused clock, and a network whose
//! links the test can cut, heal and slow down. Nodes talk over [`SimTransport`], Rally's
//! [`Transport`] on the simulated TCP, so the remoting, membership and singleton code that runs
//! is the code that runs in production. Every random choice of the network (latencies, the order
//! hosts run in) comes from the seed, and so do the membership protocol's when members join
//! with [`join`]: a seed replays a run, event for event (see "Replay" in `docs/testing.md`).
//!
//! - [`HostSimulation`]: the hosts and the network; [`run_for`](HostSimulation::run_for),
//!   [`run_until`](HostSimulation::run_until), [`partition`](HostSimulation::partition) /
//!   [`heal`](HostSimulation::heal), [`delay`](HostSimulation::delay),
//!   [`drop_connections`](HostSimulation::drop_connections) and
//!   [`start_random_faults`](HostSimulation::start_random_faults), [`crash`](HostSimulation::crash) /
//!   [`restart`](HostSimulation::restart).
//! - [`node_config`] and [`start_node`]: a [`RemoteNode`] on the simulated network;
//!   [`join`]: a cluster member whose gossip draws its random choices from the seed.
//! - [`SimLog`]: a log of what happened where, stamped with simulated time, to check
//!   properties ("never two at once") after the run.
//!
//! # Example
//!
//! Three cluster members; one is crashed and the others see it down.
//!
//! ```
//! use std::time::Duration;
//! use rally::ActorSystem;
//! use rally::cluster::{ClusterConfig, MemberEvent};
//! use rally::sim::{self, SimLog, HostSimulation};
//!
//! let mut simulation = HostSimulation::new(7);
//! let log = SimLog::new();
//! for name in ["a", "b", "c"] {
//!     let log = log.clone();
//!     simulation.host(name, move || {
//!         let log = log.clone();
//!         async move {
//!             let system = ActorSystem::new("shop");
//!             let node = sim::start_node(&system, sim::node_config(name)).await.unwrap();
//!             let mut config = ClusterConfig::builder();
//!             config.seed(sim::address("shop", "a")).stable_after(Duration::from_secs(1));
//!             let cluster = sim::join(&system, &node, config.build().unwrap()).unwrap();
//!             let mut events = cluster.events();
//!             tokio::spawn(async move {
//!                 while let Some(event) = events.next().await {
//!                     if let MemberEvent::Down(member) = event {
//!                         log.record(format!("{name} saw {} down", member.address.host));
//!                     }
//!                 }
//!             });
//!             (system, node, cluster) // kept alive as long as the host runs
//!         }
//!     });
//! }
//! simulation.run_for(Duration::from_secs(5)).unwrap();
//! simulation.crash("c").unwrap();
//! let downed = |log: &SimLog<String>| {
//!     log.entries().iter().filter(|e| e.entry.ends_with("saw c down")).count()
//! };
//! let took = simulation.run_until(Duration::from_secs(30), || downed(&log) == 2).unwrap();
//! assert!(took < Duration::from_secs(10), "downed {took:?} after the crash");
//! ```

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rally_actor::ActorSystem;
use rally_actor::sync::Mutex;
use rally_cluster::provider::GossipProvider;
use rally_cluster::{Cluster, ClusterConfig, JoinError};
use rally_remote::transport::{BoxStream, Incoming, Listener, Transport};
use rally_remote::{NodeAddress, NodeStartError, RemoteConfig, RemoteNode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The port every simulated node listens on (each host has its own address, so one port
/// serves all).
pub const PORT: u16 = 2552;

/// The secret [`node_config`] gives every node: the simulation is one cluster.
pub const SECRET: &[u8] = b"rally simulation";

/// How often hosts run between network deliveries: the resolution of simulated time. One
/// millisecond keeps latencies of a few milliseconds meaningful; a run of a minute is then
/// 60 000 steps per host, well under a second of real time for a handful of idle nodes.
const DEFAULT_TICK: Duration = Duration::from_millis(1);

/// Latency of a link, drawn between these bounds from the seed: a LAN, so a probe's
/// round trip stays far below membership's probe timeouts unless a test slows a link down.
const DEFAULT_MIN_LATENCY: Duration = Duration::from_millis(1);
const DEFAULT_MAX_LATENCY: Duration = Duration::from_millis(5);

/// A simulation never runs longer than this (simulated time) unless told: a bound so a test
/// that waits for something that never happens fails instead of running on.
const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(3600);

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

struct SimListener {
    listener: turmoil::net::TcpListener,
    host: String,
    port: u16,
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
struct Connections {
    live: Mutex<Vec<(IpAddr, IpAddr, Weak<Connection>)>>,
}

impl Connections {
    /// Registers a connection between `a` and `b`.
    fn add(&self, a: IpAddr, b: IpAddr, connection: &Arc<Connection>) {
        let mut live = self.live.lock();
        live.retain(|(_, _, c)| c.strong_count() > 0);
        live.push((a, b, Arc::downgrade(connection)));
    }

    /// Breaks every open connection between `a` and `b` (either way); returns how many.
    fn break_between(&self, a: IpAddr, b: IpAddr) -> usize {
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
struct Connection {
    broken: AtomicBool,
    waiting: Mutex<[Option<Waker>; 2]>,
}

impl Connection {
    /// Marks the connection broken and wakes whoever waits on it; false if it already was.
    fn break_now(&self) -> bool {
        if self.broken.swap(true, Ordering::SeqCst) {
            return false;
        }
        let waiting = std::mem::take(&mut *self.waiting.lock());
        for waker in waiting.into_iter().flatten() {
            waker.wake();
        }
        true
    }

    fn check(&self) -> io::Result<()> {
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
    fn wait(&self, side: usize, cx: &Context<'_>) {
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
    static CONNECTIONS: RefCell<Option<Arc<Connections>>> = const { RefCell::new(None) };
}

/// A simulated TCP stream that the simulation can break.
struct SimStream {
    stream: turmoil::net::TcpStream,
    connection: Arc<Connection>,
}

impl SimStream {
    fn new(stream: turmoil::net::TcpStream) -> io::Result<Self> {
        let connection = Arc::new(Connection::default());
        let (local, peer) = (stream.local_addr()?.ip(), stream.peer_addr()?.ip());
        CONNECTIONS.with(|connections| {
            if let Some(connections) = &*connections.borrow() {
                connections.add(local, peer, &connection);
            }
        });
        Ok(Self { stream, connection })
    }

    fn poll<T>(
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

/// The remoting settings of a simulated node on host `host`: [`PORT`], [`SECRET`], and the
/// transport's own failure detector as in production.
///
/// The remoting heartbeats, their phi-accrual failure detector and the frame deadlines read
/// the runtime's clock, which is simulated here: the detector's verdicts join membership's
/// own probes in one reachability view, as on real networks.
///
/// # Example
///
/// ```
/// let config = rally::sim::node_config("a");
/// assert_eq!((config.host.as_str(), config.port), ("a", rally::sim::PORT));
/// ```
pub fn node_config(host: &str) -> RemoteConfig {
    RemoteConfig::builder()
        .listen(host, PORT)
        .secret(SECRET.to_vec())
        .build()
        .unwrap()
}

/// The address of the node that [`node_config`]`(host)` gives, in actor system `system`.
///
/// # Example
///
/// ```
/// assert_eq!(rally::sim::address("shop", "a").to_string(), "rally://shop@a:2552");
/// ```
pub fn address(system: &str, host: &str) -> NodeAddress {
    NodeAddress {
        system: system.to_owned(),
        host: host.to_owned(),
        port: PORT,
    }
}

/// Starts a [`RemoteNode`] of `system` on the simulated network ([`SimTransport`]).
///
/// # Errors
///
/// As [`RemoteNode::start_with`]: [`NodeStartError::Bind`] if the port is taken on this host.
///
/// # Panics
///
/// Outside a [`HostSimulation`]'s host.
///
/// # Cancel safety
///
/// As [`RemoteNode::start_with`]: dropped before it returns, nothing is left running.
///
/// # Example
///
/// ```
/// use rally::ActorSystem;
/// use rally::sim::{self, HostSimulation};
///
/// let mut simulation = HostSimulation::new(1);
/// simulation.host("a", || async {
///     let system = ActorSystem::new("demo");
///     let node = sim::start_node(&system, sim::node_config("a")).await.unwrap();
///     (system, node)
/// });
/// simulation.run_for(std::time::Duration::from_millis(10)).unwrap();
/// ```
pub async fn start_node(
    system: &ActorSystem,
    config: RemoteConfig,
) -> Result<RemoteNode, NodeStartError> {
    RemoteNode::start_with(system, config, Arc::new(SimTransport)).await
}

/// Why a simulation step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A host's software failed (a panic in its main future, for example).
    #[error("the simulation failed: {0}")]
    Failed(String),
    /// [`HostSimulation::run_until`]'s condition did not hold within its limit.
    #[error("the condition did not hold within {0:?} of simulated time")]
    Timeout(Duration),
    /// No host of that name was added with [`HostSimulation::host`].
    #[error("no simulated host named {0:?}")]
    UnknownHost(String),
    /// [`RandomFaults`] out of range: a zero interval, or a probability outside 0–1.
    #[error("invalid random faults: {0}")]
    InvalidFaults(&'static str),
}

/// Settings of a [`HostSimulation`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::sim::HostSimulation;
///
/// let simulation = HostSimulation::builder(42)
///     .latency(Duration::from_millis(2), Duration::from_millis(20))
///     .tick(Duration::from_millis(1))
///     .build();
/// assert_eq!(simulation.seed(), 42);
/// ```
#[derive(Debug, Clone)]
pub struct SimBuilder {
    seed: u64,
    tick: Duration,
    min_latency: Duration,
    max_latency: Duration,
    max_duration: Duration,
}

impl SimBuilder {
    /// Link latency: each message takes between `min` and `max`, drawn from the seed
    /// (default 1–5 ms).
    pub fn latency(&mut self, min: Duration, max: Duration) -> &mut Self {
        self.min_latency = min;
        self.max_latency = max.max(min);
        self
    }

    /// The resolution of simulated time (default 1 ms).
    pub fn tick(&mut self, tick: Duration) -> &mut Self {
        self.tick = tick;
        self
    }

    /// The longest a simulation may run, in simulated time (default one hour).
    pub fn max_duration(&mut self, max: Duration) -> &mut Self {
        self.max_duration = max;
        self
    }

    /// The simulation, with no hosts yet.
    pub fn build(&self) -> HostSimulation {
        let sim = turmoil::Builder::new()
            .rng_seed(self.seed)
            .tick_duration(self.tick)
            .min_message_latency(self.min_latency)
            .max_message_latency(self.max_latency)
            .simulation_duration(self.max_duration)
            // A fixed start date: the simulated wall clock is part of the replay.
            .epoch(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .build();
        HostSimulation {
            sim,
            seed: self.seed,
            hosts: Vec::new(),
            latency: (self.min_latency, self.max_latency),
            connections: Arc::default(),
            random: None,
            faults: Vec::new(),
            rng: mix(self.seed, "random faults"),
        }
    }
}

/// Simulated hosts, each running a Rally node (or anything else on tokio), on one network
/// and one simulated clock. Nothing runs until [`run_for`](Self::run_for) or
/// [`run_until`](Self::run_until).
///
/// # Example
///
/// See [the module](self).
pub struct HostSimulation {
    sim: turmoil::Sim<'static>,
    seed: u64,
    hosts: Vec<String>,
    /// The links' latency bounds from the builder, restored after a random delay spike.
    latency: (Duration, Duration),
    connections: Arc<Connections>,
    random: Option<Random>,
    faults: Vec<Logged<Fault>>,
    /// The random faults' generator (SplitMix64), seeded from the simulation's seed.
    rng: u64,
}

/// The random faults running, and what they changed that must be undone.
struct Random {
    faults: RandomFaults,
    next_at: Duration,
    spiked: Vec<(String, String)>,
}

/// Faults drawn from the seed, for [`HostSimulation::start_random_faults`]: every `interval` of
/// simulated time, each link between two hosts has its connections broken with
/// `break_probability`, and is slowed to `spike` latency (both ways, for that interval) with
/// `spike_probability`.
///
/// This is how packet loss looks to a TCP user: the simulated TCP, like a real one, never
/// loses bytes inside a connection (turmoil's does not retransmit, so a lost segment would
/// stall the stream forever instead); a connection breaks (both ends get an I/O error, the
/// remoting reconnects) or stalls while segments are retransmitted.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::sim::RandomFaults;
///
/// let faults = RandomFaults::every(Duration::from_millis(500))
///     .breaks(0.05)
///     .delay_spikes(0.02, Duration::from_millis(120));
/// assert_eq!(faults.break_probability, 0.05);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RandomFaults {
    /// How often the dice are thrown for each link.
    pub interval: Duration,
    /// The probability that a link's connections are broken at each throw.
    pub break_probability: f64,
    /// The probability that a link is slowed down for the next interval at each throw.
    pub spike_probability: f64,
    /// The latency of a slowed-down link.
    pub spike: Duration,
}

impl RandomFaults {
    /// No faults yet, thrown every `interval`; add them with [`breaks`](Self::breaks) and
    /// [`delay_spikes`](Self::delay_spikes).
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            break_probability: 0.0,
            spike_probability: 0.0,
            spike: Duration::ZERO,
        }
    }

    /// Breaks each link's connections with `probability` at each throw.
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    #[must_use]
    pub fn breaks(mut self, probability: f64) -> Self {
        self.break_probability = probability;
        self
    }

    /// Slows each link down to `latency` for an interval with `probability` at each throw.
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    #[must_use]
    pub fn delay_spikes(mut self, probability: f64, latency: Duration) -> Self {
        self.spike_probability = probability;
        self.spike = latency;
        self
    }

    fn validate(&self) -> Result<(), SimError> {
        if self.interval.is_zero() {
            return Err(SimError::InvalidFaults("the interval is zero"));
        }
        for p in [self.break_probability, self.spike_probability] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SimError::InvalidFaults("a probability is not within 0–1"));
            }
        }
        Ok(())
    }
}

/// A fault the simulation caused, as [`HostSimulation::faults`] lists it.
///
/// # Example
///
/// See [`HostSimulation::drop_connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The connections between hosts `a` and `b` were broken (`connections` were open).
    Broke {
        /// One host.
        a: String,
        /// The other.
        b: String,
        /// How many connections were open between them and broke.
        connections: usize,
    },
    /// The link between `a` and `b` was slowed down to `latency` for an interval.
    Spike {
        /// One host.
        a: String,
        /// The other.
        b: String,
        /// The latency of every message on the link during the spike.
        latency: Duration,
    },
}

impl std::fmt::Debug for HostSimulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSimulation")
            .field("seed", &self.seed)
            .field("hosts", &self.hosts)
            .field("elapsed", &self.sim.elapsed())
            .finish()
    }
}

impl HostSimulation {
    /// A simulation with the default settings, its random choices drawn from `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(rally::sim::HostSimulation::new(3).seed(), 3);
    /// ```
    pub fn new(seed: u64) -> Self {
        Self::builder(seed).build()
    }

    /// Settings for a simulation seeded with `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let simulation = rally::sim::HostSimulation::builder(3).max_duration(Duration::from_secs(60)).build();
    /// ```
    pub fn builder(seed: u64) -> SimBuilder {
        SimBuilder {
            seed,
            tick: DEFAULT_TICK,
            min_latency: DEFAULT_MIN_LATENCY,
            max_latency: DEFAULT_MAX_LATENCY,
            max_duration: DEFAULT_MAX_DURATION,
        }
    }

    /// The seed this simulation draws from.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(rally::sim::HostSimulation::new(9).seed(), 9);
    /// ```
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds host `name` running `software`, which starts at the next step. The value the
    /// software's future returns (the actor system, node, cluster, refs…) is kept until the
    /// host crashes; [`restart`](Self::restart) calls `software` again, as a process restart
    /// runs `main` again.
    ///
    /// The software runs on the host's own single-thread runtime: spawn with `tokio::spawn`
    /// or `tokio::task::spawn_local`; its timers run on simulated time.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async { ActorSystem::new("demo") });
    /// ```
    pub fn host<F, Fut, T>(&mut self, name: &str, software: F)
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = T> + 'static,
        T: 'static,
    {
        self.hosts.push(name.to_owned());
        let base = mix(self.seed, name);
        let lives = std::cell::Cell::new(0u64);
        self.sim.host(name, move || {
            // Each life of the host (each restart) draws from its own seed.
            let seed = mix(base, &lives.replace(lives.get() + 1).to_string());
            let started = HOST_SEED.scope(seed, software());
            async move {
                let _kept = started.await;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }

    /// Simulated time since the start.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.run_for(Duration::from_millis(20)).unwrap();
    /// assert!(simulation.elapsed() >= Duration::from_millis(20));
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.sim.elapsed()
    }

    /// Runs every host for `duration` of simulated time.
    ///
    /// # Errors
    ///
    /// [`SimError::Failed`] if a host's software failed or the simulation ran past its
    /// maximum duration.
    ///
    /// # Example
    ///
    /// See [the module](self).
    pub fn run_for(&mut self, duration: Duration) -> Result<(), SimError> {
        let until = self.sim.elapsed() + duration;
        while self.sim.elapsed() < until {
            self.step()?;
        }
        Ok(())
    }

    /// Runs until `done` returns true (checked after every step); returns the simulated time
    /// that took.
    ///
    /// # Errors
    ///
    /// [`SimError::Timeout`] if `done` is still false after `limit`; [`SimError::Failed`] as
    /// [`run_for`](Self::run_for).
    ///
    /// # Example
    ///
    /// See [the module](self).
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Result<Duration, SimError> {
        let start = self.sim.elapsed();
        while !done() {
            if self.sim.elapsed() - start >= limit {
                return Err(SimError::Timeout(limit));
            }
            self.step()?;
        }
        Ok(self.sim.elapsed() - start)
    }

    fn step(&mut self) -> Result<(), SimError> {
        self.throw_random_faults();
        let previous = CONNECTIONS.with(|c| c.replace(Some(Arc::clone(&self.connections))));
        let stepped = self.sim.step();
        CONNECTIONS.with(|c| c.replace(previous));
        stepped
            .map(drop)
            .map_err(|e| SimError::Failed(e.to_string()))
    }

    /// Breaks every open connection between a host of `a` and a host of `b`, as a lost TCP
    /// connection breaks: both ends get an I/O error at once (what was in flight is lost), and
    /// the software reconnects if it wants to (Rally's remoting does, and re-sends nothing).
    /// Returns how many connections broke. New connections between them work at once.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::sim::{Fault, HostSimulation, SimTransport};
    /// use rally::remote::transport::Transport;
    ///
    /// let mut simulation = HostSimulation::new(1);
    /// simulation.host("server", || async {
    ///     let mut listener = SimTransport.bind("server", 2552).await.unwrap();
    ///     let (incoming, _) = listener.accept().await.unwrap();
    ///     let stream = incoming.await.unwrap();
    ///     (listener, stream)
    /// });
    /// simulation.host("client", || async { SimTransport.connect("server", 2552).await.unwrap() });
    /// simulation.run_for(Duration::from_millis(50)).unwrap();
    /// assert_eq!(simulation.drop_connections(&["client"], &["server"]).unwrap(), 1);
    /// assert!(matches!(simulation.faults()[0].entry, Fault::Broke { connections: 1, .. }));
    /// ```
    pub fn drop_connections(&mut self, a: &[&str], b: &[&str]) -> Result<usize, SimError> {
        for name in a.iter().chain(b) {
            self.known(name)?;
        }
        let mut broken = 0;
        for x in a {
            for y in b {
                if x != y {
                    broken += self.break_link(x, y);
                }
            }
        }
        Ok(broken)
    }

    fn break_link(&mut self, a: &str, b: &str) -> usize {
        let connections = self
            .connections
            .break_between(self.sim.lookup(a), self.sim.lookup(b));
        self.faults.push(Logged {
            at: self.sim.elapsed(),
            entry: Fault::Broke {
                a: a.to_owned(),
                b: b.to_owned(),
                connections,
            },
        });
        connections
    }

    /// Turns on faults drawn from the seed (see [`RandomFaults`]), from the next step on,
    /// until [`stop_random_faults`](Self::stop_random_faults). The same seed throws the same
    /// faults at the same instants; [`faults`](Self::faults) lists them.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidFaults`] for a zero interval or a probability outside 0–1 (nothing
    /// changes).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::sim::{RandomFaults, HostSimulation};
    ///
    /// let mut simulation = HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.host("b", || async {});
    /// let faults = RandomFaults::every(Duration::from_millis(100)).delay_spikes(0.5, Duration::from_millis(50));
    /// simulation.start_random_faults(faults).unwrap();
    /// simulation.run_for(Duration::from_secs(2)).unwrap();
    /// simulation.stop_random_faults();
    /// assert!(!simulation.faults().is_empty());
    /// assert!(simulation.start_random_faults(RandomFaults::every(Duration::ZERO)).is_err());
    /// ```
    pub fn start_random_faults(&mut self, faults: RandomFaults) -> Result<(), SimError> {
        faults.validate()?;
        self.stop_random_faults();
        self.random = Some(Random {
            faults,
            next_at: self.sim.elapsed(),
            spiked: Vec::new(),
        });
        Ok(())
    }

    /// Turns random faults off; links slowed down by a spike get their usual latency back.
    ///
    /// # Example
    ///
    /// See [`start_random_faults`](Self::start_random_faults).
    pub fn stop_random_faults(&mut self) {
        if let Some(random) = self.random.take() {
            self.restore(&random.spiked);
        }
    }

    /// Every fault the simulation caused so far ([`drop_connections`](Self::drop_connections)
    /// and random faults), stamped with simulated time.
    ///
    /// # Example
    ///
    /// See [`drop_connections`](Self::drop_connections).
    pub fn faults(&self) -> &[Logged<Fault>] {
        &self.faults
    }

    fn restore(&self, links: &[(String, String)]) {
        let (min, max) = self.latency;
        for (a, b) in links {
            self.sim.set_link_latency(a.as_str(), b.as_str(), min);
            self.sim
                .set_link_max_message_latency(a.as_str(), b.as_str(), max);
        }
    }

    /// A number in 0–1 from the random faults' generator (SplitMix64).
    fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn throw_random_faults(&mut self) {
        let now = self.sim.elapsed();
        let Some(random) = &mut self.random else {
            return;
        };
        if now < random.next_at {
            return;
        }
        random.next_at = now + random.faults.interval;
        let faults = random.faults.clone();
        let spiked = std::mem::take(&mut random.spiked);
        self.restore(&spiked);
        let hosts = self.hosts.clone();
        let mut spikes = Vec::new();
        for (i, a) in hosts.iter().enumerate() {
            for b in &hosts[i + 1..] {
                if self.draw() < faults.break_probability {
                    self.break_link(a, b);
                }
                if self.draw() < faults.spike_probability {
                    self.sim
                        .set_link_latency(a.as_str(), b.as_str(), faults.spike);
                    self.faults.push(Logged {
                        at: now,
                        entry: Fault::Spike {
                            a: a.clone(),
                            b: b.clone(),
                            latency: faults.spike,
                        },
                    });
                    spikes.push((a.clone(), b.clone()));
                }
            }
        }
        if let Some(random) = &mut self.random {
            random.spiked = spikes;
        }
    }

    /// Cuts every link between a host of `a` and a host of `b`, both ways, as a firewall that
    /// drops packets would: connections stay open, nothing gets through, and what was sent
    /// arrives after [`heal`](Self::heal), as TCP's retransmissions would deliver it.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// for name in ["a", "b", "c"] {
    ///     simulation.host(name, || async {});
    /// }
    /// simulation.partition(&["a"], &["b", "c"]).unwrap();
    /// simulation.heal(&["a"], &["b", "c"]).unwrap();
    /// assert!(simulation.partition(&["a"], &["x"]).is_err());
    /// ```
    pub fn partition(&mut self, a: &[&str], b: &[&str]) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.hold(a, b))
    }

    /// Heals what [`partition`](Self::partition) cut between `a` and `b`: held messages
    /// are delivered.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// See [`partition`](Self::partition).
    pub fn heal(&mut self, a: &[&str], b: &[&str]) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.release(a, b))
    }

    /// Sets the latency of every link between `a` and `b` to exactly `latency`.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.host("b", || async {});
    /// simulation.delay(&["a"], &["b"], Duration::from_millis(300)).unwrap();
    /// ```
    pub fn delay(&mut self, a: &[&str], b: &[&str], latency: Duration) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.set_link_latency(a, b, latency))
    }

    /// Crashes host `name`: its software and every task it spawned stop at once, its
    /// connections break, nothing runs there until [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.crash("a").unwrap();
    /// simulation.restart("a").unwrap();
    /// ```
    pub fn crash(&mut self, name: &str) -> Result<(), SimError> {
        self.known(name)?;
        self.sim.crash(name);
        Ok(())
    }

    /// Starts host `name`'s software again (a fresh process: a new actor system and node,
    /// so a new incarnation), after a [`crash`](Self::crash) or in place of a running one.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// See [`crash`](Self::crash).
    pub fn restart(&mut self, name: &str) -> Result<(), SimError> {
        self.known(name)?;
        self.sim.bounce(name);
        Ok(())
    }

    fn known(&self, name: &str) -> Result<(), SimError> {
        if self.hosts.iter().any(|h| h == name) {
            Ok(())
        } else {
            Err(SimError::UnknownHost(name.to_owned()))
        }
    }

    fn pairs(
        &mut self,
        a: &[&str],
        b: &[&str],
        mut each: impl FnMut(&turmoil::Sim<'static>, &str, &str),
    ) -> Result<(), SimError> {
        for name in a.iter().chain(b) {
            self.known(name)?;
        }
        for x in a {
            for y in b {
                if x != y {
                    each(&self.sim, x, y);
                }
            }
        }
        Ok(())
    }
}

tokio::task_local! {
    /// The seed of the host's current life, while its software's main future runs.
    static HOST_SEED: u64;
}

/// Mixes `text` into `seed` (FNV-1a over the text, then SplitMix64's finalizer): distinct
/// hosts and lives get unrelated seeds.
fn mix(seed: u64, text: &str) -> u64 {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A seed for the random choices of this life of this host, derived from the simulation's
/// seed, the host's name and how many times it started: for anything in the host's software
/// that draws random numbers and must replay. `None` outside a host's software future (in a
/// task it spawned, for example: read it first and pass it on).
///
/// # Example
///
/// ```
/// use rally::sim::{self, SimLog, HostSimulation};
///
/// let log = SimLog::new();
/// let mut simulation = HostSimulation::new(5);
/// let on_host = log.clone();
/// simulation.host("a", move || {
///     let log = on_host.clone();
///     async move { log.record(sim::host_seed()) }
/// });
/// simulation.run_for(std::time::Duration::from_millis(5)).unwrap();
/// assert!(log.entries()[0].entry.is_some());
/// assert_eq!(sim::host_seed(), None);
/// ```
pub fn host_seed() -> Option<u64> {
    HOST_SEED.try_with(|seed| *seed).ok()
}

/// Joins the cluster as [`Cluster::join`] does (gossip over `node`), with the membership
/// protocol's random choices drawn from [`host_seed`] and the member's generation (its age,
/// which decides the oldest member) from the simulated clock, so that a seed replays the run.
///
/// # Errors
///
/// As [`Cluster::join`].
///
/// # Panics
///
/// Outside a [`HostSimulation`]'s host software future (there is no host seed there).
///
/// # Example
///
/// See [the module](self).
pub fn join(
    system: &ActorSystem,
    node: &RemoteNode,
    config: ClusterConfig,
) -> Result<Cluster, JoinError> {
    let seed = host_seed().expect("sim::join runs in a simulated host's software future");
    let provider = GossipProvider::new(system, node).with_seed(seed);
    let mut local = Cluster::member_id(node)
        .with_roles(config.roles.iter().cloned())
        .with_kinds(config.kinds.iter().cloned());
    local.generation = generation();
    Cluster::join_as(system, local, config, provider)
}

/// A member's generation (its age) under the simulation: milliseconds since the Unix epoch
/// on the simulated wall clock (a fixed start date plus simulated time), so that who is the
/// oldest member replays with the seed. Production takes the real wall clock
/// ([`Cluster::member_id`]).
fn generation() -> u64 {
    let since_epoch = turmoil::since_epoch().expect("inside a simulated host");
    u64::try_from(since_epoch.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The simulated time now, inside a [`HostSimulation`]'s host; `None` outside one.
///
/// # Example
///
/// ```
/// assert_eq!(rally::sim::now(), None);
/// ```
pub fn now() -> Option<Duration> {
    turmoil::sim_elapsed()
}

/// An entry of a [`SimLog`]: what happened, and when (simulated time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged<T> {
    /// Simulated time of the entry.
    pub at: Duration,
    /// What happened.
    pub entry: T,
}

/// A log shared by the hosts of a simulation and the test: each entry stamped with the
/// simulated time (say in the entry which host recorded it). Clones share one log.
///
/// # Example
///
/// ```
/// use rally::sim::{SimLog, HostSimulation};
///
/// let log = SimLog::new();
/// let mut simulation = HostSimulation::new(1);
/// let on_host = log.clone();
/// simulation.host("a", move || {
///     let log = on_host.clone();
///     async move { log.record("a started") }
/// });
/// simulation.run_for(std::time::Duration::from_millis(5)).unwrap();
/// assert_eq!(log.entries()[0].entry, "a started");
/// assert!(log.entries()[0].at <= std::time::Duration::from_millis(5));
/// ```
#[derive(Debug)]
pub struct SimLog<T> {
    entries: Arc<Mutex<Vec<Logged<T>>>>,
}

impl<T> Clone for SimLog<T> {
    fn clone(&self) -> Self {
        Self {
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<T> Default for SimLog<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SimLog<T> {
    /// An empty log.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(rally::sim::SimLog::<u32>::new().entries().is_empty());
    /// ```
    pub fn new() -> Self {
        Self {
            entries: Arc::default(),
        }
    }

    /// Appends `entry`, stamped with the simulated time (zero outside a simulation's host).
    ///
    /// # Example
    ///
    /// See [`SimLog`].
    pub fn record(&self, entry: T) {
        let logged = Logged {
            at: now().unwrap_or_default(),
            entry,
        };
        self.entries.lock().push(logged);
    }

    /// Everything recorded so far, in order.
    ///
    /// # Example
    ///
    /// See [`SimLog`].
    pub fn entries(&self) -> Vec<Logged<T>>
    where
        T: Clone,
    {
        self.entries.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn the_shared_types_are_send_and_sync() {
        assert_send_sync::<SimTransport>();
        assert_send_sync::<SimLog<String>>();
        assert_send_sync::<SimError>();
    }

    #[test]
    fn run_until_gives_up_after_its_limit_in_simulated_time() {
        let mut simulation = HostSimulation::new(1);
        simulation.host("a", || async {});
        let before = simulation.elapsed();
        let error = simulation
            .run_until(Duration::from_millis(50), || false)
            .unwrap_err();
        assert!(matches!(error, SimError::Timeout(limit) if limit == Duration::from_millis(50)));
        assert_eq!(simulation.elapsed() - before, Duration::from_millis(50));
    }

    #[test]
    fn an_unknown_host_is_an_error_and_changes_nothing() {
        let mut simulation = HostSimulation::new(1);
        simulation.host("a", || async {});
        for result in [
            simulation.crash("b"),
            simulation.restart("b"),
            simulation.partition(&["a"], &["b"]),
            simulation.heal(&["b"], &["a"]),
            simulation.delay(&["a"], &["b"], Duration::from_millis(1)),
            simulation.drop_connections(&["a"], &["b"]).map(drop),
        ] {
            assert!(matches!(result, Err(SimError::UnknownHost(name)) if name == "b"));
        }
    }

    #[test]
    fn each_life_of_each_host_has_its_own_seed_and_a_seed_replays_them() {
        let lives = |seed: u64| {
            let log = SimLog::new();
            let mut simulation = HostSimulation::new(seed);
            for name in ["a", "b"] {
                let log = log.clone();
                simulation.host(name, move || {
                    let log = log.clone();
                    async move { log.record((name, host_seed().expect("in a host"))) }
                });
            }
            simulation.run_for(Duration::from_millis(5)).unwrap();
            simulation.restart("a").unwrap();
            simulation.run_for(Duration::from_millis(5)).unwrap();
            log.entries()
                .into_iter()
                .map(|e| e.entry)
                .collect::<Vec<_>>()
        };
        let first = lives(3);
        assert_eq!(first.len(), 3, "a, b, then a again: {first:?}");
        let seeds: std::collections::HashSet<u64> = first.iter().map(|(_, s)| *s).collect();
        assert_eq!(seeds.len(), 3, "every life its own seed: {first:?}");
        assert_eq!(lives(3), first, "the same seed, the same lives");
        assert_ne!(lives(4), first, "another seed, other lives");
    }

    /// A broken connection fails both ends at once (a reader waiting on it is woken with the
    /// error, a writer gets it at its next write), and a new connection between the same
    /// hosts works.
    #[test]
    fn a_dropped_connection_fails_both_ends_and_a_new_one_works() {
        let log = SimLog::new();
        let mut simulation = HostSimulation::new(1);
        let server_log = log.clone();
        simulation.host("server", move || {
            let log = server_log.clone();
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                loop {
                    let (incoming, _) = listener.accept().await.unwrap();
                    let mut stream = incoming.await.unwrap();
                    let log = log.clone();
                    tokio::spawn(async move {
                        let mut byte = [0u8; 1];
                        loop {
                            match stream.read_exact(&mut byte).await {
                                Ok(_) => log.record(format!("server read {}", byte[0])),
                                Err(e) => {
                                    log.record(format!("server error {:?}", e.kind()));
                                    break;
                                }
                            }
                        }
                    });
                }
            }
        });
        let client_log = log.clone();
        simulation.host("client", move || {
            let log = client_log.clone();
            async move {
                for attempt in 0..2u8 {
                    let mut stream = SimTransport.connect("server", PORT).await.unwrap();
                    let mut sent = 0u8;
                    loop {
                        if let Err(e) = stream.write_all(&[attempt * 100 + sent]).await {
                            log.record(format!("client error {:?}", e.kind()));
                            break;
                        }
                        sent += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        let has = |log: &SimLog<String>, text: &str| log.entries().iter().any(|e| e.entry == text);
        simulation
            .run_until(Duration::from_secs(1), || has(&log, "server read 3"))
            .unwrap();
        assert_eq!(
            simulation
                .drop_connections(&["server"], &["client"])
                .unwrap(),
            1
        );
        let at = simulation.elapsed();
        simulation
            .run_until(Duration::from_secs(1), || {
                has(&log, "server error ConnectionReset")
                    && has(&log, "client error ConnectionReset")
            })
            .unwrap();
        let server_error = log
            .entries()
            .into_iter()
            .find(|e| e.entry == "server error ConnectionReset")
            .unwrap();
        assert!(
            server_error.at <= at + Duration::from_millis(2),
            "the waiting reader is woken at once: {server_error:?}, broken at {at:?}"
        );
        // The second connection carries bytes again.
        simulation
            .run_until(Duration::from_secs(1), || has(&log, "server read 102"))
            .unwrap();
        assert_eq!(
            simulation.faults(),
            [Logged {
                at,
                entry: Fault::Broke {
                    a: "server".to_owned(),
                    b: "client".to_owned(),
                    connections: 1
                }
            }]
        );
    }

    /// Random faults come from the seed: the same seed throws the same faults at the same
    /// instants, another seed others; with probability 1 every link breaks at every throw.
    #[test]
    fn random_faults_replay_from_the_seed() {
        let faults = |seed: u64, faults: RandomFaults| {
            let mut simulation = HostSimulation::new(seed);
            for name in ["a", "b", "c"] {
                simulation.host(name, || async {});
            }
            simulation.start_random_faults(faults).unwrap();
            simulation.run_for(Duration::from_secs(3)).unwrap();
            simulation.stop_random_faults();
            simulation.run_for(Duration::from_secs(1)).unwrap();
            simulation.faults().to_vec()
        };
        let some = RandomFaults::every(Duration::from_millis(100))
            .breaks(0.2)
            .delay_spikes(0.1, Duration::from_millis(300));
        let first = faults(5, some.clone());
        assert!(
            first.iter().any(|f| matches!(f.entry, Fault::Broke { .. }))
                && first.iter().any(|f| matches!(f.entry, Fault::Spike { .. })),
            "{first:?}"
        );
        assert!(
            first.iter().all(|f| f.at < Duration::from_secs(3)),
            "none after the stop"
        );
        assert_eq!(faults(5, some.clone()), first);
        assert_ne!(faults(6, some), first);
        // Three links, 30 throws: every one breaks.
        let all = faults(
            5,
            RandomFaults::every(Duration::from_millis(100)).breaks(1.0),
        );
        assert_eq!(all.len(), 3 * 30, "{all:?}");
    }

    #[test]
    fn invalid_random_faults_are_refused() {
        let mut simulation = HostSimulation::new(1);
        for faults in [
            RandomFaults::every(Duration::ZERO),
            RandomFaults::every(Duration::from_millis(1)).breaks(1.5),
            RandomFaults::every(Duration::from_millis(1)).delay_spikes(-0.1, Duration::ZERO),
            RandomFaults::every(Duration::from_millis(1)).breaks(f64::NAN),
        ] {
            assert!(
                matches!(
                    simulation.start_random_faults(faults.clone()),
                    Err(SimError::InvalidFaults(_))
                ),
                "{faults:?}"
            );
        }
    }

    /// A spike slows a link for one interval, then the link has its usual latency again: a
    /// byte sent every 10 ms arrives within the usual 1–5 ms outside spikes.
    #[test]
    fn a_delay_spike_lasts_one_interval() {
        let log = SimLog::new();
        let mut simulation = HostSimulation::new(2);
        let server_log = log.clone();
        simulation.host("server", move || {
            let log = server_log.clone();
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                let (incoming, _) = listener.accept().await.unwrap();
                let mut stream = incoming.await.unwrap();
                let mut sent_at = [0u8; 8];
                while stream.read_exact(&mut sent_at).await.is_ok() {
                    let sent = Duration::from_millis(u64::from_be_bytes(sent_at));
                    log.record(now().unwrap() - sent);
                }
            }
        });
        simulation.host("client", || async {
            let mut stream = SimTransport.connect("server", PORT).await.unwrap();
            loop {
                let at = u64::try_from(now().unwrap().as_millis()).unwrap();
                if stream.write_all(&at.to_be_bytes()).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        simulation.run_for(Duration::from_millis(200)).unwrap();
        let before = log.entries().len();
        let spike = RandomFaults::every(Duration::from_millis(200))
            .delay_spikes(1.0, Duration::from_millis(50));
        simulation.start_random_faults(spike).unwrap();
        simulation.run_for(Duration::from_millis(150)).unwrap();
        simulation.stop_random_faults();
        simulation.run_for(Duration::from_millis(300)).unwrap();
        let took: Vec<Duration> = log.entries()[before..].iter().map(|e| e.entry).collect();
        let slow = took
            .iter()
            .filter(|t| **t >= Duration::from_millis(45))
            .count();
        assert!(slow >= 5, "messages during the spike took 50 ms: {took:?}");
        let tail = &took[took.len() - 10..];
        assert!(
            tail.iter().all(|t| *t <= Duration::from_millis(6)),
            "after the spike the usual latency: {took:?}"
        );
    }

    /// Bytes sent during a partition arrive after the heal, on the same connection, in order:
    /// the partition holds packets as TCP retransmission would deliver them.
    #[test]
    fn a_partition_holds_bytes_until_the_heal() {
        let received = Arc::new(AtomicUsize::new(0));
        let mut simulation = HostSimulation::new(1);
        let counter = Arc::clone(&received);
        simulation.host("server", move || {
            let counter = Arc::clone(&counter);
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                let (incoming, _) = listener.accept().await.unwrap();
                let mut stream = incoming.await.unwrap();
                let mut byte = [0u8; 1];
                let mut expected = 0u8;
                while stream.read_exact(&mut byte).await.is_ok() {
                    assert_eq!(byte[0], expected, "in order, nothing lost");
                    expected = expected.wrapping_add(1);
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        simulation.host("client", || async {
            let mut stream = SimTransport.connect("server", PORT).await.unwrap();
            for i in 0..=255u8 {
                stream.write_all(&[i]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stream
        });
        let count = || received.load(Ordering::SeqCst);
        simulation
            .run_until(Duration::from_secs(1), || count() >= 10)
            .unwrap();
        simulation.partition(&["client"], &["server"]).unwrap();
        let cut = count();
        simulation.run_for(Duration::from_millis(500)).unwrap();
        assert!(
            count() <= cut + 1,
            "at most one byte already in flight got through"
        );
        simulation.heal(&["client"], &["server"]).unwrap();
        simulation
            .run_until(Duration::from_secs(5), || count() == 256)
            .unwrap();
    }
}
