//! Remote scenarios (defined in `docs/benchmarks.md`): ping-pong, one-way throughput, latency
//! at a fixed rate. Node B (the echo side) runs in a child process by default (`--processes 2`), or in
//! this process (`--processes 1`, as the Akka.NET original).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use hdrhistogram::Histogram;
use rally::remote::transport::{TcpTransport, TlsTransport, Transport};
use rally::remote::{
    MessageTable, NodeAddress, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode, RemoteStats,
};
use rally::{Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message, Recipient};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::oneshot;

use super::common::{
    ChildLines, CommonArgs, Workers, micros, on_worker, pace, spawn_talking_child,
};
use crate::report::{Report, Row};

/// The secret both benchmark nodes share.
const SECRET: &[u8] = b"rally-bench";
/// Echo actors node B exposes unless a run needs more (the largest default client count of
/// remote-ping-pong).
const ECHOES: usize = 30;

/// Where node B runs, and over what.
#[derive(Debug, Clone, Args)]
pub(crate) struct NodeArgs {
    /// 2: node B in a child process (default); 1: both nodes in this process.
    #[arg(long, default_value_t = 2)]
    pub processes: u8,
    /// Mutual TLS between the nodes (certificates from a throwaway CA), instead of plain TCP;
    /// needs rally-bench built with `--features tls`.
    #[arg(long)]
    pub tls: bool,
    /// Both nodes are members of one cluster (default settings), so that membership runs
    /// beside the measured messages; the report's framework reads `rally-cluster`. Needs
    /// rally-bench built with `--features cluster`.
    #[arg(long)]
    pub cluster: bool,
    /// Both nodes' runtimes (node B's process gets the same flag).
    #[command(flatten)]
    pub workers: Workers,
}

/// `remote-echo-node` flags (internal).
#[derive(Debug, Args)]
pub(crate) struct EchoNodeArgs {
    /// Use mutual TLS with `node.crt`, `node.key` and `ca.crt` from this directory.
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Found a cluster (node A joins it).
    #[arg(long)]
    cluster: bool,
    /// Echo actors to expose, `echo-0` … `echo-{N-1}`.
    #[arg(long, default_value_t = ECHOES)]
    echoes: usize,
    #[command(flatten)]
    workers: Workers,
}

/// A node's cluster membership with `--cluster`, kept as long as the node.
#[cfg(feature = "cluster")]
type Membership = rally::cluster::Cluster;
/// Without the `cluster` feature there is none (`--cluster` is refused).
#[cfg(not(feature = "cluster"))]
type Membership = std::convert::Infallible;

/// Node B founds a cluster.
#[cfg(feature = "cluster")]
fn found_cluster(system: &ActorSystem, node: &RemoteNode) -> anyhow::Result<Membership> {
    super::cluster::join_echo_cluster(system, node)
}

/// Node A joins node B's cluster and waits until both are up.
#[cfg(feature = "cluster")]
async fn join_cluster(
    system: &ActorSystem,
    node: &RemoteNode,
    seed: &NodeAddress,
) -> anyhow::Result<super::cluster::ClientMember> {
    super::cluster::ClientMember::join(system, node, seed).await
}

#[cfg(not(feature = "cluster"))]
fn without_cluster() -> anyhow::Error {
    anyhow::anyhow!(
        "--cluster needs rally-bench built with the `cluster` feature: \
         cargo run --release -p rally-bench --features cluster -- <scenario> --cluster"
    )
}

#[cfg(not(feature = "cluster"))]
fn found_cluster(_: &ActorSystem, _: &RemoteNode) -> anyhow::Result<Membership> {
    Err(without_cluster())
}

#[cfg(not(feature = "cluster"))]
async fn join_cluster(
    _: &ActorSystem,
    _: &RemoteNode,
    _: &NodeAddress,
) -> anyhow::Result<std::convert::Infallible> {
    Err(without_cluster())
}

/// The system name of both nodes in a `--cluster` run (a cluster's members share it).
const CLUSTER_SYSTEM: &str = "bench";

/// Marks a `--cluster` run's report: another framework name, so `compare` sets it against the
/// bare nodes.
fn mark_cluster(report: &mut Report, node: &NodeArgs) {
    report.param("cluster", node.cluster);
    if node.cluster {
        report.framework = "rally-cluster".to_owned();
    }
}

/// The transport for a node: TCP, or TLS with the PEM files in `dir`.
fn transport(tls_dir: Option<&Path>) -> anyhow::Result<Arc<dyn Transport>> {
    Ok(match tls_dir {
        Some(dir) => Arc::new(TlsTransport::from_files(
            &dir.join("node.crt"),
            &dir.join("node.key"),
            &dir.join("ca.crt"),
        )?),
        None => Arc::new(TcpTransport),
    })
}

/// Without the `tls` feature (left out of the default build to keep the main job's cold build
/// short), `--tls` says how to get it.
#[cfg(not(feature = "tls"))]
fn throwaway_pki() -> anyhow::Result<PathBuf> {
    bail!(
        "--tls needs rally-bench built with the `tls` feature: \
         cargo run --release -p rally-bench --features tls -- <scenario> --tls"
    )
}

/// Issues a CA and two node certificates into a fresh directory: `<dir>/a` and `<dir>/b`.
#[cfg(feature = "tls")]
fn throwaway_pki() -> anyhow::Result<PathBuf> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = std::env::temp_dir().join(format!("rally-bench-pki-{}", std::process::id()));
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    for node in ["a", "b"] {
        let node_dir = dir.join(node);
        std::fs::create_dir_all(&node_dir)?;
        let key = KeyPair::generate()?;
        let cert =
            CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca, &ca_key)?;
        std::fs::write(node_dir.join("node.crt"), cert.pem())?;
        std::fs::write(node_dir.join("node.key"), key.serialize_pem())?;
        std::fs::write(node_dir.join("ca.crt"), ca.pem())?;
    }
    Ok(dir)
}

/// The benchmark message: a tiny payload, as the original's short string.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Ping(pub u64);
impl Message for Ping {
    type Reply = Pong;
}
impl RemoteMessage for Ping {
    const MANIFEST: &'static str = "bench.Ping";
}

/// The echo's reply.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Pong(pub u64);
impl Message for Pong {
    type Reply = ();
}

/// The benchmark message with `--payload N`: N bytes, sent back as they came.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Padded(#[serde(with = "serde_bytes_compat")] pub Vec<u8>);
impl Message for Padded {
    type Reply = PaddedReply;
}
impl RemoteMessage for Padded {
    const MANIFEST: &'static str = "bench.Padded";
}

/// The echo's reply to [`Padded`]: the same bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PaddedReply(#[serde(with = "serde_bytes_compat")] pub Vec<u8>);
impl Message for PaddedReply {
    type Reply = ();
}

/// A payload of a chosen size, for the one-way flood.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Blob(#[serde(with = "serde_bytes_compat")] pub Vec<u8>);
impl Message for Blob {
    type Reply = ();
}
impl RemoteMessage for Blob {
    const MANIFEST: &'static str = "bench.Blob";
}

/// Asks the sink how many blobs it has seen (the flood's acknowledgement window).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Count;
impl Message for Count {
    type Reply = u64;
}
impl RemoteMessage for Count {
    const MANIFEST: &'static str = "bench.Count";
}

mod serde_bytes_compat {
    //! `Vec<u8>` as one length-prefixed byte string (postcard writes it as such either way).
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        <Vec<u8>>::deserialize(d)
    }
}

/// Replies to every `Ping` with a `Pong`; counts `Blob`s.
#[derive(Default)]
pub(crate) struct Echo {
    blobs: u64,
}
impl Actor for Echo {}
impl Handler<Ping> for Echo {
    async fn handle(&mut self, ping: Ping, _ctx: &mut Context<Self>) -> ActorResult<Pong> {
        Ok(Pong(ping.0))
    }
}
impl Handler<Padded> for Echo {
    async fn handle(&mut self, msg: Padded, _ctx: &mut Context<Self>) -> ActorResult<PaddedReply> {
        Ok(PaddedReply(msg.0))
    }
}
impl Handler<Blob> for Echo {
    async fn handle(&mut self, _: Blob, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.blobs += 1;
        Ok(())
    }
}
impl Handler<Count> for Echo {
    async fn handle(&mut self, _: Count, _ctx: &mut Context<Self>) -> ActorResult<u64> {
        Ok(self.blobs)
    }
}
impl RemoteActor for Echo {
    fn messages(table: &mut MessageTable<Self>) {
        table
            .add::<Ping>()
            .add::<Padded>()
            .add::<Blob>()
            .add::<Count>();
    }
}

/// Node B: an actor system exposing `echo-0` … `echo-{echoes - 1}`; with `cluster`, the
/// founder of a cluster.
pub(crate) async fn start_echo_node(
    host: &str,
    port: u16,
    tls_dir: Option<&Path>,
    cluster: bool,
    echoes: usize,
) -> anyhow::Result<(ActorSystem, RemoteNode, Option<Membership>)> {
    let system = ActorSystem::new(if cluster { CLUSTER_SYSTEM } else { "echo" });
    super::otel::traced(&system)?;
    let config = RemoteConfig::builder()
        .listen(host, port)
        .secret(SECRET.to_vec())
        .build()?;
    let node = RemoteNode::start_with(&system, config, transport(tls_dir)?).await?;
    for i in 0..echoes {
        let echo = system.spawn(Echo::default())?;
        node.expose(&format!("echo-{i}"), &echo)?;
    }
    let membership = if cluster {
        Some(found_cluster(&system, &node)?)
    } else {
        None
    };
    Ok((system, node, membership))
}

/// `remote-echo-node`: runs node B until stdin closes; prints `LISTENING <address>` first,
/// then a `STATS …` line (its write path's counters) for each `stats` line it reads.
pub(crate) fn echo_node_main(args: &EchoNodeArgs) -> anyhow::Result<()> {
    let runtime = args.workers.runtime();
    runtime.block_on(async {
        let (_system, node, _membership) = start_echo_node(
            "127.0.0.1",
            0,
            args.tls_dir.as_deref(),
            args.cluster,
            args.echoes,
        )
        .await?;
        println!("LISTENING {}", node.address());
        // Run until the parent closes our stdin (or dies).
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await? {
            if line == "stats" {
                println!("STATS {}", WritePath::of(&node.stats()).line());
            }
        }
        super::otel::flush().await;
        Ok(())
    })
}

/// A node's write-path counters (totals since it started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WritePath {
    messages: u64,
    writes: u64,
    sender_writes: u64,
    wakeups: u64,
    bytes: u64,
}

impl WritePath {
    fn of(stats: &RemoteStats) -> Self {
        Self {
            messages: stats.messages_sent,
            writes: stats.writes,
            sender_writes: stats.sender_writes,
            wakeups: stats.writer_wakeups,
            bytes: stats.bytes_written,
        }
    }

    /// The counts from `before` to `self`.
    fn since(self, before: Self) -> Self {
        Self {
            messages: self.messages - before.messages,
            writes: self.writes - before.writes,
            sender_writes: self.sender_writes - before.sender_writes,
            wakeups: self.wakeups - before.wakeups,
            bytes: self.bytes - before.bytes,
        }
    }

    /// The counts as the echo node prints them.
    fn line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.messages, self.writes, self.sender_writes, self.wakeups, self.bytes
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut fields = line
            .strip_prefix("STATS ")?
            .split(' ')
            .map(|field| field.parse::<u64>().ok());
        let mut next = || fields.next().flatten();
        Some(Self {
            messages: next()?,
            writes: next()?,
            sender_writes: next()?,
            wakeups: next()?,
            bytes: next()?,
        })
    }

    fn per_message(count: u64, messages: u64) -> f64 {
        count as f64 / messages.max(1) as f64
    }

    /// Adds the figures of node A (`client`) and node B (`echo`, when known) to `row`:
    /// messages per socket write and bytes per message (node A, as the table has always
    /// printed them), node B's messages per write, and writer wake-ups and sender writes per
    /// message over both nodes.
    fn add_to(row: Row, client: Self, echo: Option<Self>) -> Row {
        let both = echo.map_or(client, |echo| Self {
            messages: client.messages + echo.messages,
            writes: client.writes + echo.writes,
            sender_writes: client.sender_writes + echo.sender_writes,
            wakeups: client.wakeups + echo.wakeups,
            bytes: client.bytes + echo.bytes,
        });
        row.with(
            "msgs_per_write",
            client.messages as f64 / client.writes.max(1) as f64,
        )
        .with(
            "bytes_per_msg",
            Self::per_message(client.bytes, client.messages),
        )
        .with(
            "echo_msgs_per_write",
            echo.map(|echo| echo.messages as f64 / echo.writes.max(1) as f64),
        )
        .with(
            "wakeups_per_msg",
            Self::per_message(both.wakeups, both.messages),
        )
        .with(
            "sender_writes_per_msg",
            Self::per_message(both.sender_writes, both.messages),
        )
    }
}

/// Node B, in a child process or in this one; dropping it stops it.
pub(crate) struct EchoSide {
    pub address: NodeAddress,
    /// Node A's TLS material, when the run uses TLS.
    pub client_tls: Option<PathBuf>,
    child: Option<EchoChild>,
    local: Option<(ActorSystem, RemoteNode, Option<Membership>)>,
    /// Whether node B founded a cluster that node A joins.
    cluster: bool,
}

/// Node B's process: asked for its counters on its stdin, answering on its stdout.
struct EchoChild {
    _child: Child,
    stdin: tokio::process::ChildStdin,
    lines: ChildLines,
}

impl EchoSide {
    /// Node B's write-path counters (totals since it started), if it answers.
    async fn write_path(&mut self) -> Option<WritePath> {
        use tokio::io::AsyncWriteExt;
        if let Some((_, node, _)) = &self.local {
            return Some(WritePath::of(&node.stats()));
        }
        let child = self.child.as_mut()?;
        child.stdin.write_all(b"stats\n").await.ok()?;
        child.stdin.flush().await.ok()?;
        let line = tokio::time::timeout(Duration::from_secs(5), child.lines.next_line())
            .await
            .ok()?
            .ok()??;
        WritePath::parse(&line)
    }

    /// Starts node B as `args` says, exposing `echoes` echo actors.
    pub(crate) async fn start(args: &NodeArgs, echoes: usize) -> anyhow::Result<Self> {
        let pki = if args.tls {
            Some(throwaway_pki()?)
        } else {
            None
        };
        let client_tls = pki.as_ref().map(|dir| dir.join("a"));
        let server_tls = pki.as_ref().map(|dir| dir.join("b"));
        match args.processes {
            1 => {
                let local =
                    start_echo_node("127.0.0.1", 0, server_tls.as_deref(), args.cluster, echoes)
                        .await?;
                Ok(Self {
                    address: local.1.address().clone(),
                    client_tls,
                    child: None,
                    local: Some(local),
                    cluster: args.cluster,
                })
            }
            2 => {
                let cluster = args.cluster;
                let workers = args.workers.flag();
                let mut args: Vec<&std::ffi::OsStr> = vec!["remote-echo-node".as_ref()];
                if let Some(dir) = &server_tls {
                    args.extend(["--tls-dir".as_ref(), dir.as_os_str()]);
                }
                if cluster {
                    args.push("--cluster".as_ref());
                }
                args.extend(workers.iter().map(|arg| arg.as_os_str()));
                let echoes = echoes.to_string();
                args.extend([
                    std::ffi::OsStr::new("--echoes"),
                    std::ffi::OsStr::new(&echoes),
                ]);
                let (mut child, address, lines) = spawn_talking_child(&args).await?;
                let stdin = child.stdin.take().context("node B's stdin")?;
                Ok(Self {
                    address: address.parse().map_err(|e| anyhow::anyhow!("{e:?}"))?,
                    client_tls,
                    child: Some(EchoChild {
                        _child: child,
                        stdin,
                        lines,
                    }),
                    local: None,
                    cluster,
                })
            }
            other => bail!("--processes must be 1 or 2, not {other}"),
        }
    }
}

/// Node A, with the same transport as node B; with `--cluster`, a member of node B's cluster
/// (returned with it: the membership lasts as long as that value).
async fn start_client_node(
    echo_side: &EchoSide,
) -> anyhow::Result<(ActorSystem, RemoteNode, Option<impl Sized + use<>>)> {
    let system = ActorSystem::new(CLUSTER_SYSTEM);
    super::otel::traced(&system)?;
    let config = RemoteConfig::builder()
        .listen("127.0.0.1", 0)
        .secret(SECRET.to_vec())
        .build()?;
    let node = RemoteNode::start_with(&system, config, transport(echo_side.client_tls.as_deref())?)
        .await?;
    let membership = if echo_side.cluster {
        Some(join_cluster(&system, &node, &echo_side.address).await?)
    } else {
        None
    };
    Ok((system, node, membership))
}

/// `remote-ping-pong` flags.
#[derive(Debug, Args)]
pub(crate) struct PingPongArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    node: NodeArgs,
    /// Round trips per client.
    #[arg(long, default_value_t = 100_000)]
    round_trips: u64,
    /// Messages in flight per client.
    #[arg(long, default_value_t = 50)]
    in_flight: u64,
    /// Client counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,15,20,25,30")]
    clients: Vec<usize>,
    /// Bytes of payload per message (e.g. 100, as Artery's figures); without it, the tiny
    /// message of the Akka.NET original (an 8-byte counter).
    #[arg(long)]
    payload: Option<usize>,
}

/// A message the ping-pong client can send: the tiny `Ping` or the `Padded` payload.
trait PingMessage: Message + Clone + Sync
where
    Echo: Handler<Self>,
    Self::Reply: Message,
{
    /// The message for the `n`-th send (the tiny ping carries the counter, as the original's
    /// string carries its text; a payload is cloned).
    fn nth(&self, n: u64) -> Self;
}

impl PingMessage for Ping {
    fn nth(&self, n: u64) -> Self {
        Ping(n)
    }
}

impl PingMessage for Padded {
    fn nth(&self, _n: u64) -> Self {
        self.clone()
    }
}

/// Keeps `in_flight` pings outstanding to its echo until it has `remaining` replies.
struct Client<M>
where
    M: PingMessage,
    Echo: Handler<M>,
    M::Reply: Message,
{
    echo: ActorRef<Echo>,
    msg: M,
    me: Option<Recipient<M::Reply>>,
    to_send: u64,
    to_receive: u64,
    done: Option<oneshot::Sender<()>>,
}
struct Go(u64);
impl Message for Go {
    type Reply = ();
}
impl<M> Actor for Client<M>
where
    M: PingMessage,
    Echo: Handler<M>,
    M::Reply: Message,
{
}
impl<M> Handler<Go> for Client<M>
where
    M: PingMessage,
    Echo: Handler<M>,
    M::Reply: Message,
    Client<M>: Handler<M::Reply>,
{
    async fn handle(&mut self, go: Go, ctx: &mut Context<Self>) -> ActorResult<()> {
        let me = ctx.myself().recipient::<M::Reply>();
        for _ in 0..go.0.min(self.to_send) {
            self.echo.request(self.msg.nth(self.to_send), &me)?;
            self.to_send -= 1;
        }
        self.me = Some(me);
        Ok(())
    }
}
impl<M> Client<M>
where
    M: PingMessage,
    Echo: Handler<M>,
    M::Reply: Message,
{
    fn on_reply(&mut self) -> ActorResult<()> {
        self.to_receive -= 1;
        if self.to_send > 0 {
            let me = self
                .me
                .as_ref()
                .expect("Go sets the recipient before any reply");
            self.echo.request(self.msg.nth(self.to_send), me)?;
            self.to_send -= 1;
        } else if self.to_receive == 0 {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}
impl Handler<Pong> for Client<Ping> {
    async fn handle(&mut self, _: Pong, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.on_reply()
    }
}
impl Handler<PaddedReply> for Client<Padded> {
    async fn handle(&mut self, _: PaddedReply, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.on_reply()
    }
}

/// The message the clients send.
#[derive(Debug, Clone)]
enum Payload {
    Tiny,
    Bytes(usize),
}

#[allow(clippy::too_many_arguments)]
async fn ping_pong_round(
    system: &ActorSystem,
    node: &RemoteNode,
    echo_at: &NodeAddress,
    clients: usize,
    round_trips: u64,
    in_flight: u64,
    payload: &Payload,
) -> anyhow::Result<Duration> {
    match payload {
        Payload::Tiny => {
            ping_pong_with(
                system,
                node,
                echo_at,
                clients,
                round_trips,
                in_flight,
                Ping(0),
            )
            .await
        }
        Payload::Bytes(n) => {
            let msg = Padded(vec![0x5a; *n]);
            ping_pong_with(system, node, echo_at, clients, round_trips, in_flight, msg).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn ping_pong_with<M>(
    system: &ActorSystem,
    node: &RemoteNode,
    echo_at: &NodeAddress,
    clients: usize,
    round_trips: u64,
    in_flight: u64,
    msg: M,
) -> anyhow::Result<Duration>
where
    M: PingMessage,
    Echo: Handler<M>,
    M::Reply: Message,
    Client<M>: Handler<M::Reply> + Handler<Go>,
{
    let mut actors = Vec::new();
    let mut waits = Vec::new();
    for i in 0..clients {
        let echo = node.lookup::<Echo>(echo_at, &format!("echo-{i}"));
        let (done, wait) = oneshot::channel();
        actors.push(system.spawn(Client {
            echo,
            msg: msg.clone(),
            me: None,
            to_send: round_trips,
            to_receive: round_trips,
            done: Some(done),
        })?);
        waits.push(wait);
    }
    let start = Instant::now();
    for actor in &actors {
        actor
            .tell::<Go>(Go(in_flight))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    for wait in waits {
        tokio::time::timeout(Duration::from_secs(120), wait)
            .await
            .context("a client did not finish within 120 s")??;
    }
    let elapsed = start.elapsed();
    for actor in actors {
        actor.stop();
    }
    Ok(elapsed)
}

/// Runs `remote-ping-pong`: a progress line per client count on stderr, and one table on
/// stdout whose rows appear as each client count finishes (or, with `--json`, one object).
pub(crate) fn ping_pong(args: &PingPongArgs) -> anyhow::Result<()> {
    let (round_trips, clients) = if args.common.quick {
        (5_000, vec![1, 5])
    } else {
        (args.round_trips, args.clients.clone())
    };
    let in_flight = args.in_flight;
    let payload = match args.payload {
        Some(bytes) => Payload::Bytes(bytes),
        None => Payload::Tiny,
    };
    let json = args.common.json;
    let mut report = Report::new("remote-ping-pong");
    mark_cluster(&mut report, &args.node);
    report
        .param("round_trips_per_client", round_trips)
        .param("in_flight_per_client", in_flight)
        .param("processes", args.node.processes)
        .param("workers_per_process", args.node.workers.param())
        .param(
            "payload_bytes",
            match payload {
                Payload::Tiny => serde_json::Value::Null,
                Payload::Bytes(n) => n.into(),
            },
        )
        .param(
            "transport",
            if args.node.tls {
                "mutual TLS 1.3 (rustls, ring) over loopback TCP"
            } else {
                "tcp loopback"
            },
        );
    if !json {
        print!("{}", ping_pong_heading(&report, &payload));
    }
    let node_args = args.node.clone();
    let runtime = args.node.workers.runtime();
    // One echo per client: a client without one would send to a name nobody exposed.
    let echoes = clients.iter().copied().max().unwrap_or(0).max(ECHOES);
    let rows = on_worker(&runtime, async move {
        eprintln!("remote-ping-pong: starting node B and connecting...");
        let mut echo_side = EchoSide::start(&node_args, echoes).await?;
        let (system, node, _membership) = start_client_node(&echo_side).await?;
        // Warm up: connections, handshakes, tables, allocator.
        let warm_up = round_trips.min(20_000);
        eprintln!("remote-ping-pong: warm-up, 2 clients x {warm_up} round trips");
        ping_pong_round(
            &system,
            &node,
            &echo_side.address,
            2,
            warm_up,
            in_flight,
            &payload,
        )
        .await?;
        let mut rows = Vec::new();
        for (i, &n) in clients.iter().enumerate() {
            let total = n as u64 * round_trips * 2;
            eprintln!(
                "remote-ping-pong: [{}/{}] {n} client{}, {total} messages...",
                i + 1,
                clients.len(),
                if n == 1 { "" } else { "s" },
            );
            let before = WritePath::of(&node.stats());
            let echo_before = echo_side.write_path().await;
            let elapsed = ping_pong_round(
                &system,
                &node,
                &echo_side.address,
                n,
                round_trips,
                in_flight,
                &payload,
            )
            .await?;
            let client = WritePath::of(&node.stats()).since(before);
            let echo = echo_side
                .write_path()
                .await
                .zip(echo_before)
                .map(|(after, before)| after.since(before));
            let row = WritePath::add_to(
                Row::new(if n == 1 {
                    "1 client".to_owned()
                } else {
                    format!("{n} clients")
                })
                .clients(n as u64)
                .throughput(total, elapsed),
                client,
                echo,
            );
            if !json {
                print!("{}", ping_pong_row(&row));
            }
            rows.push(row);
        }
        super::otel::flush().await;
        node.leave(Duration::from_secs(1)).await;
        anyhow::Ok(rows)
    })?;
    report.rows = rows;
    if json {
        report.print(true);
    }
    Ok(())
}

/// The table's first lines: what ran where, then the column names (the Akka.NET original's
/// four, then Rally's write-path figures: messages per socket write on each node, bytes per
/// message, and writer wake-ups and sender writes per message over both nodes).
fn ping_pong_heading(report: &Report, payload: &Payload) -> String {
    let message = match payload {
        Payload::Tiny => "tiny message".to_owned(),
        Payload::Bytes(n) => format!("{n}-byte payload"),
    };
    format!(
        "# remote-ping-pong (rally), {message}, {}{}, {}; {} cores, {}\n\
         Num clients, Total [msg], Msgs/sec, Total [ms], Msgs/write, Bytes/msg, \
         Msgs/write (B), Wake-ups/msg, Sender writes/msg\n",
        match report.params["processes"].as_u64() {
            Some(1) => "both nodes in one process",
            _ => "nodes in 2 processes",
        },
        match report.params["workers_per_process"].as_u64() {
            Some(n) => format!(" of {n} worker thread(s) each"),
            None => String::new(),
        },
        report.params["transport"].as_str().unwrap_or("?"),
        report.machine.cores,
        report.machine.cpu,
    )
}

/// One row of the table.
fn ping_pong_row(row: &Row) -> String {
    let extra = |key: &str| row.extra.get(key).and_then(|v| v.as_f64());
    let echo = extra("echo_msgs_per_write").map_or_else(|| "-".to_owned(), |m| format!("{m:.1}"));
    format!(
        "{}, {}, {:.0}, {:.0}, {:.1}, {:.1}, {echo}, {:.4}, {:.4}\n",
        row.clients.unwrap_or(0),
        row.total_msgs.unwrap_or(0),
        row.msgs_per_sec.unwrap_or(0.0),
        row.elapsed_ms.unwrap_or(0.0),
        extra("msgs_per_write").unwrap_or(0.0),
        extra("bytes_per_msg").unwrap_or(0.0),
        extra("wakeups_per_msg").unwrap_or(0.0),
        extra("sender_writes_per_msg").unwrap_or(0.0),
    )
}

/// `max-throughput` flags.
#[derive(Debug, Args)]
pub(crate) struct MaxThroughputArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    node: NodeArgs,
    /// Messages per payload size.
    #[arg(long, default_value_t = 2_000_000)]
    messages: u64,
    /// Messages per burst.
    #[arg(long, default_value_t = 1_000)]
    burst: u64,
    /// Bursts that may be unacknowledged.
    #[arg(long, default_value_t = 3)]
    window: u64,
}

fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    ticks / 100.0
}

/// Runs `max-throughput`.
pub(crate) fn max_throughput(args: &MaxThroughputArgs) -> anyhow::Result<()> {
    let node_args = args.node.clone();
    let (burst, window) = (args.burst, args.window);
    let sizes = [100usize, 1024, 10 * 1024];
    let messages = if args.common.quick {
        50_000
    } else {
        args.messages
    };
    let runtime = args.node.workers.runtime();
    let rows = on_worker(&runtime, async move {
        let mut echo_side = EchoSide::start(&node_args, ECHOES).await?;
        let (_system, node, _membership) = start_client_node(&echo_side).await?;
        let mut rows = Vec::new();
        for (i, size) in sizes.into_iter().enumerate() {
            let before = WritePath::of(&node.stats());
            let echo_before = echo_side.write_path().await;
            let sink = node.lookup::<Echo>(&echo_side.address, &format!("echo-{i}"));
            // Large payloads take fewer messages so each row runs for similar time, and smaller
            // bursts so that the window (bursts × burst bytes) stays within a few MB.
            let burst = burst.min((1024 * 1024 / size as u64).max(1));
            let n = (messages * 100 / size as u64)
                .max(burst * window * 4)
                .min(messages);
            let payload = vec![7u8; size];
            let cpu_before = cpu_seconds();
            let start = Instant::now();
            let mut sent = 0u64;
            let base = sink.ask(Count, Duration::from_secs(10)).await?;
            // A sliding window: after each burst an acknowledgement request (answered after
            // every blob before it, by per-pair ordering) is pipelined; at most `window` bursts
            // are unacknowledged.
            let mut acks = std::collections::VecDeque::new();
            while sent < n {
                for _ in 0..burst.min(n - sent) {
                    sink.send(Blob(payload.clone()))
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    sent += 1;
                }
                let sink = sink.clone();
                acks.push_back(tokio::spawn(async move {
                    sink.ask(Count, Duration::from_secs(30)).await
                }));
                while acks.len() as u64 > window {
                    let oldest = acks
                        .pop_front()
                        .expect("the loop condition says it is there");
                    oldest.await??;
                }
            }
            let received = loop {
                let seen = sink.ask(Count, Duration::from_secs(30)).await? - base;
                if seen >= n {
                    break seen;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let elapsed = start.elapsed();
            let cpu = cpu_seconds() - cpu_before;
            let mb = (received as f64 * size as f64) / elapsed.as_secs_f64() / 1e6;
            let client = WritePath::of(&node.stats()).since(before);
            let echo = echo_side
                .write_path()
                .await
                .zip(echo_before)
                .map(|(after, before)| after.since(before));
            rows.push(WritePath::add_to(
                Row::new(format!("{size} B"))
                    .throughput(received, elapsed)
                    .with("payload_bytes", size as u64)
                    .with("mb_per_sec", mb)
                    .with("sender_cpu_s", cpu),
                client,
                echo,
            ));
        }
        node.leave(Duration::from_secs(1)).await;
        anyhow::Ok(rows)
    })?;
    let mut report = Report::new("max-throughput");
    mark_cluster(&mut report, &args.node);
    report
        .param("burst", burst)
        .param("window_bursts", window)
        .param("processes", args.node.processes)
        .param("workers_per_process", args.node.workers.param());
    report.rows = rows;
    report.print(args.common.json);
    Ok(())
}

/// `latency` flags.
#[derive(Debug, Args)]
pub(crate) struct LatencyArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    node: NodeArgs,
    /// Offered rates in messages per second.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000,100000")]
    rates: Vec<u64>,
    /// Seconds per rate.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// How the pacer sends: `request` (from its own thread, the reply going to a local
    /// collector actor, as a bare socket program writes from its sending thread) or `ask` (a
    /// task spawned on the runtime per message awaits `ask`: each probe also pays a task's
    /// hand-over from the pacer thread to a runtime worker).
    #[arg(long, value_enum, default_value_t = Via::Request)]
    via: Via,
}

/// How the `latency` pacer sends each probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Via {
    /// `ActorRef::request` from the pacer thread; replies go to a collector actor.
    Request,
    /// A task per probe, spawned from the pacer thread, awaits `ActorRef::ask`.
    Ask,
}

/// Records each reply's round trip, from the intended send time of the probe it answers.
struct Collector {
    histogram: Histogram<u64>,
    start: Instant,
    interval: Duration,
    remaining: u64,
    done: Option<oneshot::Sender<Histogram<u64>>>,
}
impl Actor for Collector {}
impl Handler<Pong> for Collector {
    async fn handle(&mut self, pong: Pong, _ctx: &mut Context<Self>) -> ActorResult<()> {
        let intended = self.start + self.interval.mul_f64(pong.0 as f64);
        self.histogram
            .record(intended.elapsed().as_nanos() as u64)
            .expect("values fit");
        self.remaining -= 1;
        if self.remaining == 0
            && let Some(done) = self.done.take()
        {
            let _ = done.send(std::mem::replace(
                &mut self.histogram,
                Histogram::new(3).expect("3 digits is valid"),
            ));
        }
        Ok(())
    }
}

/// Runs `latency`: a paced sender, each round trip timed from its intended send time.
pub(crate) fn latency(args: &LatencyArgs) -> anyhow::Result<()> {
    let node_args = args.node.clone();
    let via = args.via;
    let (rates, seconds) = if args.common.quick {
        (vec![1_000], 1)
    } else {
        (args.rates.clone(), args.seconds)
    };
    let runtime = args.node.workers.runtime();
    let rows = on_worker(&runtime, async move {
        let mut echo_side = EchoSide::start(&node_args, ECHOES).await?;
        let (system, node, _membership) = start_client_node(&echo_side).await?;
        let echo = node.lookup::<Echo>(&echo_side.address, "echo-0");
        echo.ask(Ping(0), Duration::from_secs(10)).await?;
        let mut rows = Vec::new();
        for rate in rates {
            let before = WritePath::of(&node.stats());
            let echo_before = echo_side.write_path().await;
            let total = rate * seconds;
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let start = Instant::now() + Duration::from_millis(5);
            let h = match via {
                Via::Request => {
                    let (done, finished) = oneshot::channel();
                    let collector = system.spawn(Collector {
                        histogram: Histogram::new(3).expect("3 digits is valid"),
                        start,
                        interval,
                        remaining: total,
                        done: Some(done),
                    })?;
                    let to = collector.recipient::<Pong>();
                    let echo = echo.clone();
                    let pacer = pace(start, interval, total, move |i, _| {
                        echo.request(Ping(i), &to).map_err(|e| format!("{e:?}"))
                    });
                    let sent = tokio::task::spawn_blocking(move || pacer.join())
                        .await?
                        .map_err(|_| anyhow::anyhow!("the pacer thread panicked"))?;
                    if let Some(Err(error)) = sent.into_iter().find(Result::is_err) {
                        bail!("a probe was not sent: {error}");
                    }
                    let h = tokio::time::timeout(Duration::from_secs(10), finished)
                        .await
                        .context("every probe is answered within 10 s")??;
                    collector.stop();
                    h
                }
                Via::Ask => {
                    let histogram = Arc::new(rally::sync::Mutex::new(
                        Histogram::<u64>::new(3).expect("3 digits is valid"),
                    ));
                    let runtime = tokio::runtime::Handle::current();
                    let recorded = histogram.clone();
                    let echo = echo.clone();
                    let pacer = pace(start, interval, total, move |i, intended| {
                        let echo = echo.clone();
                        let histogram = recorded.clone();
                        runtime.spawn(async move {
                            echo.ask(Ping(i), Duration::from_secs(10))
                                .await
                                .expect("echo replies");
                            let took = intended.elapsed();
                            histogram
                                .lock()
                                .record(took.as_nanos() as u64)
                                .expect("values fit");
                        })
                    });
                    let pending = tokio::task::spawn_blocking(move || pacer.join())
                        .await?
                        .map_err(|_| anyhow::anyhow!("the pacer thread panicked"))?;
                    for task in pending {
                        task.await?;
                    }
                    histogram.lock().clone()
                }
            };
            let us = |q: f64| micros(Duration::from_nanos(h.value_at_quantile(q)));
            let client = WritePath::of(&node.stats()).since(before);
            let echo_path = echo_side
                .write_path()
                .await
                .zip(echo_before)
                .map(|(after, before)| after.since(before));
            let mut row = WritePath::add_to(
                Row::new(format!("{rate} msg/s"))
                    // Both directions count, as in ping-pong.
                    .throughput(2 * total, start.elapsed())
                    .with("rate", rate)
                    .with("p90_us", us(0.9))
                    .with("p999_us", us(0.999))
                    .with("max_us", micros(Duration::from_nanos(h.max()))),
                client,
                echo_path,
            );
            row.p50_us = Some(us(0.5));
            row.p99_us = Some(us(0.99));
            rows.push(row);
        }
        super::otel::flush().await;
        node.leave(Duration::from_secs(1)).await;
        anyhow::Ok(rows)
    })?;
    let mut report = Report::new("latency");
    mark_cluster(&mut report, &args.node);
    report
        .param("seconds_per_rate", seconds)
        .param("processes", args.node.processes)
        .param("workers_per_process", args.node.workers.param())
        .param("measured_from", "intended send time")
        .param(
            "via",
            match args.via {
                Via::Request => "request",
                Via::Ask => "ask",
            },
        );
    report.rows = rows;
    report.print(args.common.json);
    Ok(())
}
