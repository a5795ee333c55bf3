//! Cluster members as separate OS processes, for the multi-process tests.
//!
//! The member process is the test binary itself, re-run with [`MEMBER_ENV`] set: its `main`
//! then runs [`member_main`] instead of the tests ([`run_if_member`]; the target has
//! `harness = false` and runs its tests with `rally_test::harness`). A binary still on the
//! built-in harness has a `member_process` test that calls [`run_if_member`], which the
//! arguments below select. A member reports what happens to it on stdout, one line per fact, each stamped with
//! `CLOCK_MONOTONIC` (one clock for every process on the machine, network namespaces
//! included), so the test can order facts from several processes:
//!
//! ```text
//! @@ <mono-ns> READY <member> <generation>
//! @@ <mono-ns> EVENT <Joined|Up|Unreachable|Reachable|Leaving|Down|Removed> <member>
//! @@ <mono-ns> SINGLETON <START|STOP> <member>
//! @@ <mono-ns> ACT <START|END> <identity> <owner> <epoch>
//! @@ <mono-ns> REPLY <identity> <count> <owner> <epoch>
//! @@ <mono-ns> ASKERR <identity> <error>
//! @@ <mono-ns> STATS <activations> <forwarded> <active>
//! @@ <mono-ns> LOADED <failed asks in the round>
//! @@ <mono-ns> TOLD <numbers sent to each identity>
//! @@ <mono-ns> DISORDER <identity> <count> <number>
//! @@ <mono-ns> STOPPED <member>
//! @@ <mono-ns> DEP <OK|ERR> <account> <seq> <balance|handled> <owner|error>
//! @@ <mono-ns> BANKED <account>
//! @@ <mono-ns> BAL <account> <balance>
//! ```
//!
//! `<member>` is `rally://<cluster>@<host>:<port>#<incarnation>`. Commands on stdin:
//! `ask <identity> <n>`, `load <prefix> <count>` (asks `<prefix>-0..count` in rounds until the
//! process ends, reporting each round), `tell <prefix> <count>` (sends each of
//! `<prefix>-0..count` the numbers 1, 2, 3, … as tells, never waiting for one to be handled,
//! until `untell`, then reports how many; an identity handling a number that is not its count
//! plus one reports `DISORDER`), `stats`, `leave` (leaves the cluster gracefully; the process
//! then stops), `bank <prefix> <accounts> <deposits> <plain|keyed>` (deposits 1 into each of
//! `<prefix>-0..accounts`, `<deposits>` times one after another per account: `plain` with one
//! `ask` each, `keyed` with `ask_until_definite` and an idempotency key per deposit; reports
//! each outcome and each account done), `balances <prefix> <accounts>` (each balance).

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rally::cluster::virtual_actors::{
    Activation, GrainMessages, IdempotencyKey, Idempotent, State, VirtualActor, VirtualActors,
    VirtualActorsConfig,
};
use rally::cluster::{Cluster, ClusterConfig, ClusterSingleton, MemberEvent, MemberId};
use rally::remote::{
    Incarnation, MessageTable, NodeAddress, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode,
};
use rally::state::SqliteStore;
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_test::harness::{Child, Fact, commands, mono_ns, say};
use serde::{Deserialize, Serialize};
use std::process::Command;

use tokio::sync::mpsc;

/// Set in a member process: the test binary runs [`member_main`] only.
pub const MEMBER_ENV: &str = "RALLY_CLUSTER_MEMBER";
/// Bound on every wait: generous, since several sessions' builds share two cores.
pub const T: Duration = Duration::from_secs(90);
/// Every member's system name: the cluster's name.
pub const CLUSTER: &str = "procs";
const SECRET: &[u8] = b"multi-process cluster secret";
/// The virtual-actor kind of the member processes.
pub const KIND: &str = "counter";
/// The bank-account kind (typed state, as the guide's examples keep it).
pub const ACCOUNT: &str = "account";

/// The membership settings every member process runs with: the default probing (500 ms,
/// 200 ms), a 2 s stable-after, and down members forgotten after 2 s so that `Removed` is
/// seen within the test.
pub fn membership() -> ClusterConfig {
    let mut builder = ClusterConfig::builder();
    builder
        // The member processes report their own end (and some start again): a downed member
        // stops and says so rather than exit (the exit is tested on its own).
        .when_downed(rally::cluster::WhenDowned::Stop)
        .stable_after(Duration::from_secs(2))
        .down_all_when_unstable(Duration::from_secs(2))
        .remove_down_after(Duration::from_secs(2));
    builder.build().expect("valid")
}

/// The virtual-actor settings: a deactivation may take 1 s (it is part of the takeover wait).
pub fn grains_config() -> VirtualActorsConfig {
    let mut config = VirtualActorsConfig::default();
    config.deactivation_timeout = Duration::from_secs(1);
    config
}

/// Nanoseconds of `CLOCK_MONOTONIC`: comparable across the processes of one machine.
/// What a member process is asked to be.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The address it binds and is reached at (default 127.0.0.1).
    pub host: String,
    pub port: u16,
    /// `host:port` of the seeds.
    pub seeds: Vec<String>,
    /// Runs the singleton `beacon`.
    pub singleton: bool,
    /// Hosts the virtual-actor kind `counter` (else client-only for virtual actors).
    pub hosts_grains: bool,
    /// Starts the virtual-actor runtime on this SQLite file.
    pub db: Option<PathBuf>,
    /// After being downed, starts again as a new incarnation on the same port.
    pub rejoin: bool,
    /// Runs with the default `when-downed = exit` (the others stop when downed).
    pub exit_when_downed: bool,
    /// SIGTERM runs `Cluster::shutdown` and ends the process (`shutdown_on_sigterm`).
    pub sigterm: bool,
}

impl Spec {
    pub fn new(port: u16, seeds: &[u16]) -> Self {
        Self {
            host: "127.0.0.1".into(),
            port,
            seeds: seeds.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
            ..Self::default()
        }
    }

    fn to_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (MEMBER_ENV, "1".into()),
            ("RCM_HOST", self.host.clone()),
            ("RCM_PORT", self.port.to_string()),
            ("RCM_SEEDS", self.seeds.join(",")),
            ("RCM_SINGLETON", u8::from(self.singleton).to_string()),
            ("RCM_HOSTS_GRAINS", u8::from(self.hosts_grains).to_string()),
            (
                "RCM_DB",
                self.db
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            ("RCM_REJOIN", u8::from(self.rejoin).to_string()),
            ("RCM_EXIT", u8::from(self.exit_when_downed).to_string()),
            ("RCM_SIGTERM", u8::from(self.sigterm).to_string()),
        ]
    }

    fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        Self {
            host: var("RCM_HOST"),
            port: var("RCM_PORT").parse().expect("RCM_PORT"),
            seeds: var("RCM_SEEDS")
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            singleton: var("RCM_SINGLETON") == "1",
            hosts_grains: var("RCM_HOSTS_GRAINS") == "1",
            db: Some(var("RCM_DB"))
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            rejoin: var("RCM_REJOIN") == "1",
            exit_when_downed: var("RCM_EXIT") == "1",
            sigterm: var("RCM_SIGTERM") == "1",
        }
    }
}

// ---------------------------------------------------------------------------------------
// The member process.

/// The role of the members that run the singleton.
const SINGLETON_ROLE: &str = "beacon";

/// The singleton: logs when it is made and when it is dropped (the widest interval it can
/// be said to exist in).
struct Beacon {
    member: String,
}
impl Actor for Beacon {}
impl RemoteActor for Beacon {
    fn messages(_: &mut MessageTable<Self>) {}
}
impl Drop for Beacon {
    fn drop(&mut self) {
        say(&format!("SINGLETON STOP {}", self.member));
    }
}

/// The virtual actor: a counter saved on every change (write-through, so that a member
/// killed without a goodbye leaves its state behind for the next activation).
pub struct Counter {
    activation: Activation,
    count: u64,
}

impl Actor for Counter {}

impl Drop for Counter {
    fn drop(&mut self) {
        say(&format!(
            "ACT END {} {} {}",
            self.activation.identity(),
            self.activation.owner(),
            self.activation.epoch()
        ));
    }
}

impl VirtualActor for Counter {
    const KIND: &'static str = KIND;

    async fn activate(activation: Activation) -> ActorResult<Self> {
        // Logged before the state is read: the activation exists from here on.
        say(&format!(
            "ACT START {} {} {}",
            activation.identity(),
            activation.owner(),
            activation.epoch()
        ));
        let count = match activation.load().await? {
            Some(bytes) => u64::from_le_bytes(bytes.as_slice().try_into()?),
            None => 0,
        };
        Ok(Self { activation, count })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Add>().add::<Next>();
    }
}

/// Adds to the counter and saves it; replies with (count, owner, epoch).
#[derive(Debug, Serialize, Deserialize)]
pub struct Add(pub u64);
impl Message for Add {
    type Reply = (u64, String, u64);
}
impl RemoteMessage for Add {
    const MANIFEST: &'static str = "test.procs.Add";
}
impl Handler<Add> for Counter {
    async fn handle(&mut self, msg: Add, _: &mut Context<Self>) -> ActorResult<(u64, String, u64)> {
        let count = self.count + msg.0;
        self.activation.save(&count.to_le_bytes()).await?;
        self.count = count;
        Ok((
            count,
            self.activation.owner().to_owned(),
            self.activation.epoch(),
        ))
    }
}

/// The sender's next number: the count becomes it (and is saved). One that is not the count
/// plus one (out of order, or after a lost one) is reported as `DISORDER`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Next(pub u64);
impl Message for Next {
    type Reply = ();
}
impl RemoteMessage for Next {
    const MANIFEST: &'static str = "test.procs.Next";
}
impl Handler<Next> for Counter {
    async fn handle(&mut self, msg: Next, _: &mut Context<Self>) -> ActorResult<()> {
        if msg.0 != self.count + 1 {
            say(&format!(
                "DISORDER {} {} {}",
                self.activation.identity(),
                self.count,
                msg.0
            ));
        }
        self.activation.save(&msg.0.to_le_bytes()).await?;
        self.count = msg.0;
        Ok(())
    }
}

/// The bank account of the guide's recipe: a typed state written before every reply.
pub struct Account {
    balance: State<u64>,
}

impl Actor for Account {}

impl VirtualActor for Account {
    const KIND: &'static str = ACCOUNT;

    async fn activate(activation: Activation) -> ActorResult<Self> {
        Ok(Self {
            balance: State::load(&activation).await?,
        })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table
            .add::<Deposit>()
            .add::<KeyedDeposit>()
            .add::<Balance>();
    }
}

/// Adds to the balance, writes it, then replies with (balance, owner).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deposit(pub u64);
impl Message for Deposit {
    type Reply = (u64, String);
}
impl RemoteMessage for Deposit {
    const MANIFEST: &'static str = "test.procs.Deposit";
}
impl Handler<Deposit> for Account {
    async fn handle(&mut self, msg: Deposit, _: &mut Context<Self>) -> ActorResult<(u64, String)> {
        *self.balance += msg.0;
        self.balance.write().await?;
        Ok((*self.balance, self.balance.activation().owner().to_owned()))
    }
}

/// A deposit applied once per key; replies with the balance after it and the member that
/// applied it (a deposit sent again is answered with the first reply).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyedDeposit {
    pub key: IdempotencyKey,
    pub amount: u64,
    /// How long the handler goes on after the write before it replies (work after the
    /// write, as a call to another service): a member killed then has applied the deposit,
    /// and its caller never hears so.
    pub linger_ms: u64,
}
impl Message for KeyedDeposit {
    type Reply = (u64, String);
}
impl RemoteMessage for KeyedDeposit {
    const MANIFEST: &'static str = "test.procs.KeyedDeposit";
}
impl Idempotent for KeyedDeposit {
    fn idempotency_key(&self) -> &str {
        self.key.as_str()
    }
}
impl Handler<KeyedDeposit> for Account {
    async fn handle(
        &mut self,
        msg: KeyedDeposit,
        _: &mut Context<Self>,
    ) -> ActorResult<(u64, String)> {
        let (amount, owner) = (msg.amount, self.balance.activation().owner().to_owned());
        Ok(self
            .balance
            .apply_once(msg.key.as_str(), |balance| {
                *balance += amount;
                (*balance, owner)
            })
            .await
            .map(|reply| async move {
                tokio::time::sleep(Duration::from_millis(msg.linger_ms)).await;
                reply
            })?
            .await)
    }
}

/// The balance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Balance;
impl Message for Balance {
    type Reply = u64;
}
impl RemoteMessage for Balance {
    const MANIFEST: &'static str = "test.procs.Balance";
}
impl Handler<Balance> for Account {
    async fn handle(&mut self, _: Balance, _: &mut Context<Self>) -> ActorResult<u64> {
        Ok(*self.balance)
    }
}

struct Life {
    system: ActorSystem,
    node: RemoteNode,
    cluster: Cluster,
    singleton: Option<ClusterSingleton<Beacon>>,
    grains: Option<Arc<VirtualActors>>,
    me: String,
    /// Set by `untell`: the `tell` task stops.
    untell: Arc<std::sync::atomic::AtomicBool>,
}

impl Life {
    async fn start(spec: &Spec) -> Self {
        let system = ActorSystem::new(CLUSTER);
        // A restart in this process may find the port still held for a moment.
        let node = loop {
            match RemoteNode::start(
                &system,
                RemoteConfig::builder()
                    .listen(&spec.host, spec.port)
                    .secret(SECRET.to_vec())
                    .build()
                    .unwrap(),
            )
            .await
            {
                Ok(node) => break node,
                Err(e) => {
                    eprintln!("member: starting the node: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let mut config = membership();
        for seed in &spec.seeds {
            config.seeds.push(
                format!("rally://{CLUSTER}@{seed}")
                    .parse()
                    .expect("seed address"),
            );
        }
        if spec.hosts_grains {
            config.kinds.push(KIND.into());
            config.kinds.push(ACCOUNT.into());
        }
        if spec.exit_when_downed {
            config.when_downed = rally::cluster::WhenDowned::Exit;
        }
        // Only the members that run the singleton may be its host: without a role, a member
        // that does not run it (the client) could be the oldest once the host leaves, and
        // then none would run it.
        if spec.singleton {
            config.roles.push(SINGLETON_ROLE.into());
        }
        let cluster = Cluster::join(&system, &node, config.clone()).expect("joins");
        if spec.sigterm {
            cluster.shutdown_on_sigterm(Duration::from_secs(20));
        }
        let me = cluster.self_member().id;
        let member = me.to_string();
        // The documented hook: said as soon as this member learns it was downed.
        let downed = cluster.clone();
        let me_downed = member.clone();
        tokio::spawn(async move {
            downed.downed().await;
            say(&format!("DOWNED {me_downed}"));
        });
        // Events first, so that nothing this member sees goes unreported.
        let mut events = cluster.events();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let (what, who) = match &event {
                    MemberEvent::Joined(m) => ("Joined", m),
                    MemberEvent::Up(m) => ("Up", m),
                    MemberEvent::Unreachable(m) => ("Unreachable", m),
                    MemberEvent::Reachable(m) => ("Reachable", m),
                    MemberEvent::Leaving(m) => ("Leaving", m),
                    MemberEvent::Down(m) => ("Down", m),
                    MemberEvent::Removed(m) => ("Removed", m),
                    _ => ("Other", event.member()),
                };
                say(&format!("EVENT {what} {who}"));
            }
        });
        let singleton = spec.singleton.then(|| {
            let me = member.clone();
            ClusterSingleton::start(
                &system,
                &node,
                &cluster,
                config.clone(),
                "beacon",
                Some(SINGLETON_ROLE.to_owned()),
                move || {
                    say(&format!("SINGLETON START {me}"));
                    Beacon { member: me.clone() }
                },
            )
        });
        let grains = spec.db.as_ref().map(|db| {
            let mut builder = VirtualActors::builder(&cluster, &system);
            builder
                .store(Arc::new(SqliteStore::open(db).expect("sqlite opens")))
                .config(grains_config())
                .membership(&config);
            if spec.hosts_grains {
                builder.kind::<Counter>().kind::<Account>();
            }
            Arc::new(builder.start(&node).expect("virtual actors start"))
        });
        say(&format!("READY {member} {}", me.generation));
        Self {
            system,
            node,
            cluster,
            singleton,
            grains,
            me: member,
            untell: Arc::default(),
        }
    }

    /// Serves commands until this member stops (downed or left: `true`) or stdin closes
    /// (`false`).
    async fn serve(&self, commands: &mut mpsc::UnboundedReceiver<String>) -> bool {
        let mut events = self.cluster.events();
        loop {
            tokio::select! {
                event = events.next() => if event.is_none() { return true },
                command = commands.recv() => match command {
                    None => return false,
                    Some(command) => self.command(&command),
                },
            }
        }
    }

    fn command(&self, command: &str) {
        let words: Vec<&str> = command.split_whitespace().collect();
        let grains = self.grains.clone();
        match (words.as_slice(), grains) {
            (["ask", identity, n], Some(grains)) => {
                let (identity, n) = ((*identity).to_owned(), n.parse().expect("a number"));
                tokio::spawn(async move { ask(&grains, &identity, n).await });
            }
            (["load", prefix, count], Some(grains)) => {
                let (prefix, count): (String, u64) =
                    ((*prefix).to_owned(), count.parse().expect("a number"));
                tokio::spawn(async move {
                    loop {
                        let mut failed = 0;
                        for i in 0..count {
                            let identity = format!("{prefix}-{i}");
                            let failed_now = match grains.get::<Counter>(&identity) {
                                Ok(grain) => {
                                    grain.ask(Add(1), Duration::from_secs(1)).await.is_err()
                                }
                                Err(_) => true,
                            };
                            failed += u32::from(failed_now);
                        }
                        say(&format!("LOADED {failed}"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                });
            }
            (["tell", prefix, count], Some(grains)) => {
                let (prefix, count): (String, u64) =
                    ((*prefix).to_owned(), count.parse().expect("a number"));
                let untell = Arc::clone(&self.untell);
                tokio::spawn(async move {
                    let grains: Vec<_> = (0..count)
                        .map(|i| {
                            grains
                                .get::<Counter>(&format!("{prefix}-{i}"))
                                .expect("valid")
                        })
                        .collect();
                    let mut sent = 0;
                    while !untell.load(std::sync::atomic::Ordering::Relaxed) {
                        sent += 1;
                        for grain in &grains {
                            grain.tell(Next(sent)).expect("the member takes it");
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    say(&format!("TOLD {sent}"));
                });
            }
            (["bank", prefix, accounts, deposits, mode], Some(grains)) => {
                let keyed = match *mode {
                    "plain" => false,
                    "keyed" => true,
                    other => panic!("bank mode {other:?}"),
                };
                let deposits: u64 = deposits.parse().expect("a number");
                for i in 0..accounts.parse::<u64>().expect("a number") {
                    let account = format!("{prefix}-{i}");
                    let grains = Arc::clone(&grains);
                    tokio::spawn(async move { bank(&grains, &account, deposits, keyed).await });
                }
            }
            (["balances", prefix, accounts], Some(grains)) => {
                for i in 0..accounts.parse::<u64>().expect("a number") {
                    let account = format!("{prefix}-{i}");
                    let grains = Arc::clone(&grains);
                    tokio::spawn(async move {
                        let grain = grains.get::<Account>(&account).expect("valid");
                        // A read, safe to send again.
                        loop {
                            match grain.ask(Balance, Duration::from_secs(10)).await {
                                Ok(balance) => break say(&format!("BAL {account} {balance}")),
                                Err(e) => eprintln!("member: balance of {account}: {e}"),
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    });
                }
            }
            (["untell"], _) => self
                .untell
                .store(true, std::sync::atomic::Ordering::Relaxed),
            (["leave"], _) => {
                let cluster = self.cluster.clone();
                tokio::spawn(async move {
                    if let Err(e) = cluster.leave().await {
                        eprintln!("member: leave failed: {e}");
                    }
                });
            }
            (["active", kind, limit], Some(grains)) => {
                let (kind, limit) = ((*kind).to_owned(), limit.parse().expect("a number"));
                tokio::spawn(async move { list_active(&grains, &kind, limit).await });
            }
            (["stats"], Some(grains)) => {
                let (activations, forwarded, active) =
                    grains.stats().iter().fold((0, 0, 0), |(a, f, n), s| {
                        (a + s.activations, f + s.forwarded, n + s.active)
                    });
                say(&format!("STATS {activations} {forwarded} {active}"));
            }
            _ => eprintln!("member: unknown command {command:?}"),
        }
    }

    async fn stop(self) {
        let hosting = self
            .singleton
            .as_ref()
            .is_some_and(ClusterSingleton::is_hosting);
        drop(self.singleton);
        // One call: leave (if not left or downed yet), virtual actors, node, system.
        if let Err(e) = self.cluster.shutdown(T).await {
            eprintln!("member: {e}");
        }
        drop((self.grains, self.node, self.system));
        say(&format!("STOPPED {} hosting={hosting}", self.me));
    }
}

/// Lists the active identities of `kind` in the whole cluster, `limit` a page: `ACTIVE
/// <identity> <member>` for each, then `ACTIVEDONE <identities> <pages> <skipped members>`, or
/// `ACTIVEERR <error>`.
async fn list_active(grains: &VirtualActors, kind: &str, limit: usize) {
    let (mut cursor, mut listed, mut pages, mut skipped) = (None, 0, 0, 0);
    loop {
        let page = match grains
            .active_in_cluster(kind, cursor.as_ref(), limit, T)
            .await
        {
            Ok(page) => page,
            Err(e) => return say(&format!("ACTIVEERR {e}")),
        };
        pages += 1;
        skipped += page.skipped.len();
        assert!(
            page.identities.len() <= limit,
            "a page holds at most its limit"
        );
        for active in &page.identities {
            listed += 1;
            say(&format!("ACTIVE {} {}", active.identity, active.member));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    say(&format!("ACTIVEDONE {listed} {pages} {skipped}"));
}

async fn ask(grains: &VirtualActors, identity: &str, n: u64) {
    let reply = match grains.get::<Counter>(identity) {
        // Generous: the tests check outcomes, not speed, and run beside other builds in CI.
        Ok(grain) => grain
            .ask(Add(n), Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match reply {
        Ok((count, owner, epoch)) => say(&format!("REPLY {identity} {count} {owner} {epoch}")),
        Err(e) => say(&format!("ASKERR {identity} {e}")),
    }
}

/// Deposits 1 into `account`, `deposits` times, one after another: `keyed`, each with its own
/// idempotency key, sent until definite (a minute at most), its handler replying 200 ms after
/// its write (so that a kill mostly falls after a write and before its reply); else one `ask`
/// each.
async fn bank(grains: &VirtualActors, account: &str, deposits: u64, keyed: bool) {
    let grain = grains.get::<Account>(account).expect("valid");
    for seq in 0..deposits {
        let outcome = if keyed {
            let deposit = KeyedDeposit {
                key: IdempotencyKey::new(),
                amount: 1,
                linger_ms: 200,
            };
            grain
                .ask_until_definite(deposit, Duration::from_secs(60))
                .await
        } else {
            grain.ask(Deposit(1), Duration::from_secs(10)).await
        };
        match outcome {
            Ok((balance, owner)) => say(&format!("DEP OK {account} {seq} {balance} {owner}")),
            Err(e) => say(&format!(
                "DEP ERR {account} {seq} {:?} {}",
                e.handled(),
                e.to_string().replace(' ', "_")
            )),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say(&format!("BANKED {account}"));
}

/// The member process: runs until stdin closes or it is killed.
pub fn member_main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let spec = Spec::from_env();
        let mut commands = commands();
        loop {
            let life = Life::start(&spec).await;
            let stopped = life.serve(&mut commands).await;
            if stopped && spec.exit_when_downed {
                // An application that leaves the decision to the cluster: with `when-downed =
                // exit` the process ends with the cluster's exit code, before this does.
                tokio::time::sleep(T).await;
            }
            life.stop().await;
            if !(stopped && spec.rejoin) {
                break;
            }
        }
    });
}

/// Runs [`member_main`] when this process is a member; returns whether it was.
pub fn run_if_member() -> bool {
    if std::env::var(MEMBER_ENV).is_err() {
        return false;
    }
    member_main();
    true
}

pub fn in_member_mode() -> bool {
    std::env::var(MEMBER_ENV).is_ok()
}

// ---------------------------------------------------------------------------------------
// The test's side.

/// A member's identity as it reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// `rally://…#incarnation`.
    pub member: String,
    pub address: NodeAddress,
    pub incarnation: u64,
    pub generation: u64,
    pub at: u64,
}

impl Ready {
    /// The member id (with the kind when it hosts one), as the placement sees it.
    pub fn id(&self, hosts_grains: bool) -> MemberId {
        let id = MemberId::new(
            self.address.clone(),
            Incarnation(self.incarnation),
            self.generation,
        );
        if hosts_grains {
            id.with_kinds([KIND, ACCOUNT])
        } else {
            id
        }
    }
}

/// A member process started by the test (this binary, in member mode): killed when dropped.
pub struct MemberProcess {
    process: Child,
    pub ready: Option<Ready>,
}

impl std::ops::Deref for MemberProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.process
    }
}

impl std::ops::DerefMut for MemberProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.process
    }
}

impl MemberProcess {
    /// Starts a member (in network namespace `netns` if given) without waiting for it.
    pub fn spawn(name: &str, spec: &Spec, netns: Option<&str>) -> Self {
        let exe = std::env::current_exe().expect("this test binary");
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        command
            .args([
                "--exact",
                "member_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(spec.to_env());
        Self {
            process: Child::spawn(name, command),
            ready: None,
        }
    }

    /// Waits for the next fact matching `wanted` (facts before it are kept in `seen`).
    pub async fn expect(&mut self, what: &str, wanted: impl Fn(&Fact) -> bool) -> Fact {
        self.process.expect(what, T, wanted).await
    }

    /// The first fact matching `wanted`, already read or still to come.
    pub async fn find(&mut self, what: &str, wanted: impl Fn(&Fact) -> bool) -> Fact {
        self.process.find(what, T, wanted).await
    }

    /// Waits for the next READY line: this process's (next) incarnation.
    pub async fn wait_ready(&mut self) -> Ready {
        let out = self.expect("READY", |o| o.word == "READY").await;
        let member = out.args[0].clone();
        let (address, incarnation) = member.rsplit_once('#').expect("address#incarnation");
        let ready = Ready {
            member: member.clone(),
            address: address.parse().expect("an address"),
            incarnation: u64::from_str_radix(incarnation, 16).expect("an incarnation"),
            generation: out.args[1].parse().expect("a generation"),
            at: out.at,
        };
        self.ready = Some(ready.clone());
        ready
    }

    pub fn member(&self) -> &str {
        &self.ready.as_ref().expect("ready").member
    }

    /// Waits until this member has seen every one of `members` up.
    pub async fn wait_up(&mut self, members: &[String]) {
        for member in members {
            // An Up already read counts.
            if self.seen.iter().any(|o| o.is("EVENT", &["Up", member])) {
                continue;
            }
            let m = member.clone();
            self.expect(&format!("Up of {member}"), move |o| {
                o.is("EVENT", &["Up", &m])
            })
            .await;
        }
    }

    /// SIGKILL; returns the instant (`CLOCK_MONOTONIC`) just before it was sent. Returns once
    /// the process is reaped.
    pub async fn kill(&mut self) -> u64 {
        let at = mono_ns();
        // SIGKILL, and the process reaped (the kernel reaps a SIGKILLed process at once).
        self.process.kill();
        self.drain();
        at
    }

    /// Waits until the process exits; its exit status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        let status = rally_test::eventually("the process exits", T, async || {
            self.process.try_wait().ok_or("still running")
        })
        .await;
        self.drain();
        status
    }

    /// SIGSTOP; returns once the kernel shows the process stopped, with the instant of the
    /// signal.
    pub async fn pause(&mut self) -> u64 {
        let at = mono_ns();
        self.process.pause(T).await;
        at
    }

    /// SIGTERM; returns the instant it was sent.
    pub fn terminate(&mut self) -> u64 {
        let at = mono_ns();
        self.process.terminate();
        at
    }

    /// SIGCONT; returns the instant it was sent.
    pub fn resume(&mut self) -> u64 {
        let at = mono_ns();
        self.process.resume();
        at
    }
}

/// The index of the oldest of `members` (the singleton's host), its member id, once it
/// reports the singleton started, and the others' indexes, oldest first.
pub async fn singleton_on_oldest(members: &mut [MemberProcess]) -> (usize, String, Vec<usize>) {
    let age = |m: &MemberProcess| m.ready.as_ref().expect("ready").id(false);
    let host = (0..members.len())
        .min_by_key(|&i| age(&members[i]))
        .expect("members");
    members[host]
        .find("the singleton on the oldest", |o| {
            o.is("SINGLETON", &["START"])
        })
        .await;
    let mut others: Vec<usize> = (0..members.len()).filter(|&i| i != host).collect();
    others.sort_by_key(|&i| age(&members[i]));
    (host, members[host].member().to_owned(), others)
}

/// Starts `specs` at once, waits until each is ready and has seen all of them up; returns the
/// processes and the instant (mono) the last one saw everyone.
pub async fn start_cluster(specs: &[(String, Spec, Option<String>)]) -> (Vec<MemberProcess>, u64) {
    let mut members: Vec<MemberProcess> = specs
        .iter()
        .map(|(name, spec, ns)| MemberProcess::spawn(name, spec, ns.as_deref()))
        .collect();
    for m in &mut members {
        m.wait_ready().await;
    }
    let all: Vec<String> = members.iter().map(|m| m.member().to_owned()).collect();
    for m in &mut members {
        m.wait_up(&all).await;
    }
    let converged = members
        .iter()
        .flat_map(|m| m.seen.iter())
        .filter(|o| o.word == "EVENT")
        .map(|o| o.at)
        .max()
        .unwrap_or(0);
    (members, converged)
}

/// The singleton's lives from every process's facts: (member, start, stop or None).
pub fn singleton_lives(facts: &[&Fact]) -> Vec<(String, u64, Option<u64>)> {
    let mut lives: Vec<(String, u64, Option<u64>)> = Vec::new();
    let mut sorted: Vec<&&Fact> = facts.iter().filter(|o| o.word == "SINGLETON").collect();
    sorted.sort_by_key(|o| o.at);
    for o in sorted {
        match o.args[0].as_str() {
            "START" => lives.push((o.args[1].clone(), o.at, None)),
            "STOP" => {
                let life = lives
                    .iter_mut()
                    .rev()
                    .find(|l| l.0 == o.args[1] && l.2.is_none())
                    .unwrap_or_else(|| panic!("a stop without a start: {o:?}"));
                life.2 = Some(o.at);
            }
            other => panic!("unknown singleton fact {other}"),
        }
    }
    lives
}

/// Activation lives by identity: (owner, epoch, start, end or None).
pub type Lives = BTreeMap<String, Vec<(String, u64, u64, Option<u64>)>>;

pub fn activation_lives(facts: &[&Fact]) -> Lives {
    let mut lives: Lives = BTreeMap::new();
    let mut sorted: Vec<&&Fact> = facts.iter().filter(|o| o.word == "ACT").collect();
    sorted.sort_by_key(|o| o.at);
    for o in sorted {
        let (identity, owner) = (o.args[1].clone(), o.args[2].clone());
        let epoch: u64 = o.args[3].parse().unwrap();
        let of = lives.entry(identity).or_default();
        match o.args[0].as_str() {
            "START" => of.push((owner, epoch, o.at, None)),
            "END" => {
                let life = of
                    .iter_mut()
                    .rev()
                    .find(|l| l.0 == owner && l.1 == epoch && l.3.is_none())
                    .unwrap_or_else(|| panic!("an end without a start: {o:?}"));
                life.3 = Some(o.at);
            }
            other => panic!("unknown activation fact {other}"),
        }
    }
    lives
}

/// Asserts that no two lives overlap: each ends (`end`, or `ended` for its owner when the
/// process was killed) before the next starts; returns how many lives were checked.
pub fn assert_no_overlap<K: std::fmt::Debug>(
    what: &str,
    lives: &[(K, u64, Option<u64>)],
    ended: impl Fn(&K) -> Option<u64>,
) -> usize {
    for pair in lives.windows(2) {
        let (first, second) = (&pair[0], &pair[1]);
        let end = first.2.or_else(|| ended(&first.0)).unwrap_or_else(|| {
            panic!("{what}: a life never ended before another started: {pair:?}")
        });
        assert!(
            end <= second.1,
            "{what}: two at once ({} ms of overlap): {pair:?}",
            (end - second.1) / 1_000_000
        );
    }
    lives.len()
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
