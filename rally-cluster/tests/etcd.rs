//! The etcd provider against a real etcd server (`/usr/bin/etcd`, Debian `etcd-server`), which
//! each test starts on free loopback ports in a directory of its own and stops at the end.
//!
//! Run with `cargo test -p rally-cluster --release --features etcd --test etcd -- --ignored`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rally_cluster::provider::{EtcdConfig, EtcdProvider};
use rally_cluster::{
    Cluster, ClusterConfig, DowningStrategy, JoinError, MemberEvent, MemberEvents, MemberId,
    MemberStatus, WhenDowned,
};
use rally_remote::Incarnation;
use rally_test::eventually;

/// Bound on every wait: generous, because builds share the machine's two cores.
const T: Duration = Duration::from_secs(60);

/// An etcd server of this test's own.
struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

/// Runs `etcdctl` (Debian `etcd-client`) against `endpoint`; whether it succeeded.
fn etcdctl(endpoint: &str, args: &[&str]) -> bool {
    Command::new("/usr/bin/etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=1s")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Etcd {
    async fn start(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rally-etcd-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut etcd = Self {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        etcd.run().await;
        etcd
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Starts the server on its data directory and ports, and waits until it answers.
    async fn run(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("log file");
        let child = Command::new("/usr/bin/etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("/usr/bin/etcd starts (Debian etcd-server)");
        self.child = Some(child);
        let etcd_answers = format!("etcd answers (log in {:?})", self.dir);
        eventually(&etcd_answers, T, async || {
            etcdctl(&client, &["get", "ready"])
        })
        .await;
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn restart(&mut self) {
        self.stop();
        self.run().await;
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn id(port: u16) -> MemberId {
    MemberId::new(
        format!("rally://etcdtest@127.0.0.1:{port}")
            .parse()
            .expect("address"),
        Incarnation(u64::from(port) * 7),
        u64::from(port),
    )
}

fn lease_config() -> ClusterConfig {
    // Several members in this process: a downed one stops, the test goes on.
    ClusterConfig::builder()
        .downing(DowningStrategy::Lease)
        .when_downed(WhenDowned::Stop)
        .build()
        .expect("valid")
}

fn etcd_config(etcd: &Etcd, ttl: u64, keep_alive_ms: u64) -> EtcdConfig {
    let mut config = EtcdConfig::new([etcd.endpoint()]);
    config.lease_ttl = Duration::from_secs(ttl);
    config.keep_alive = Duration::from_millis(keep_alive_ms);
    config.request_timeout = Duration::from_millis(keep_alive_ms.min(1000));
    config
}

fn join(etcd: &Etcd, member: MemberId, ttl: u64, keep_alive_ms: u64) -> (Cluster, MemberEvents) {
    let provider = EtcdProvider::new(etcd_config(etcd, ttl, keep_alive_ms)).expect("valid");
    let cluster = Cluster::join_with(member, lease_config(), provider).expect("joins");
    let events = cluster.events();
    (cluster, events)
}

/// Reads `events` until `wanted`; panics on `forbidden` or after `T`.
async fn until(events: &mut MemberEvents, wanted: &MemberEvent, forbidden: &[MemberEvent]) {
    let found = tokio::time::timeout(T, async {
        while let Some(event) = events.next().await {
            assert!(!forbidden.contains(&event), "unexpected {event:?}");
            if event == *wanted {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "no {wanted:?}");
}

/// Reads `events` until every one of `wanted` was seen, in any order.
async fn until_all(events: &mut MemberEvents, wanted: &[MemberEvent]) {
    let mut missing: Vec<MemberEvent> = wanted.to_vec();
    let found = tokio::time::timeout(T, async {
        while let Some(event) = events.next().await {
            missing.retain(|w| *w != event);
            if missing.is_empty() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "missing {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn members_join_see_each_other_and_leave_without_being_downed() {
    let etcd = Etcd::start("join").await;
    let (a, mut a_events) = join(&etcd, id(1), 5, 1000);
    let (b, _b_events) = join(&etcd, id(2).with_kinds(["cart"]), 5, 1000);
    // C joins with an actor system: its membership figures go to the system's monitor.
    let system = rally_actor::ActorSystem::new("etcdtest");
    let provider = EtcdProvider::new(etcd_config(&etcd, 5, 1000)).expect("valid");
    let c = Cluster::join_as(&system, id(3), lease_config(), provider).expect("joins");
    let mut c_events = c.events();
    // B and C register in either order: wait until A has seen both up, C has seen B.
    until_all(
        &mut a_events,
        &[MemberEvent::Up(id(2)), MemberEvent::Up(id(3))],
    )
    .await;
    until(&mut c_events, &MemberEvent::Up(id(2)), &[]).await;
    let seen = a.members();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert!(seen.iter().all(|m| m.status == MemberStatus::Up));
    let b_seen = seen.iter().find(|m| m.id == id(2)).expect("b is known");
    assert!(b_seen.id.hosts_kind("cart"), "kinds travel through etcd");
    // What a member sends to etcd is counted beside what it receives: the lease grant, the
    // read, the registration, the watch and the keep-alives, with their keys and values.
    eventually("a's etcd traffic is counted", T, async || match a.stats() {
        stats if stats.packets_out >= 5 && stats.bytes_out > 100 && stats.bytes_in > 0 => Ok(()),
        stats => Err(stats),
    })
    .await;
    let sent = system
        .monitor()
        .snapshot()
        .figures
        .into_iter()
        .find(|f| f.name == "rally_cluster_membership_bytes_sent_total")
        .expect("a member joined with a system exports its figures");
    assert!(sent.value > 100.0, "{sent:?}");
    // A graceful leave: Leaving, then Removed, never Down.
    b.leave().await.expect("leaves");
    until(
        &mut a_events,
        &MemberEvent::Removed(id(2)),
        &[MemberEvent::Down(id(2))],
    )
    .await;
    assert_eq!(a.members().len(), 2);
    assert_eq!(b.self_member().status, MemberStatus::Removed);
    drop((c, etcd));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn members_survive_an_etcd_restart_and_keep_working() {
    let mut etcd = Etcd::start("restart").await;
    // A lease of 10 s, renewed every second: the restart must fit inside the 9 s fence.
    let (a, mut a_events) = join(&etcd, id(1), 10, 1000);
    let (b, mut b_events) = join(&etcd, id(2), 10, 1000);
    until(&mut a_events, &MemberEvent::Up(id(2)), &[]).await;
    until(&mut b_events, &MemberEvent::Up(id(1)), &[]).await;
    etcd.restart().await;
    // After the restart a new member registers and both old members see it through their
    // re-established watches; neither was downed meanwhile.
    let (_c, _c_events) = join(&etcd, id(3), 10, 1000);
    let downs = [MemberEvent::Down(id(1)), MemberEvent::Down(id(2))];
    until(&mut a_events, &MemberEvent::Up(id(3)), &downs).await;
    until(&mut b_events, &MemberEvent::Up(id(3)), &downs).await;
    // Their leases are renewed after the restart: past a whole lease time, still up.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(a.self_member().status, MemberStatus::Up);
    assert_eq!(b.self_member().status, MemberStatus::Up);
    assert_eq!(a.members().len(), 3, "{:#?}", a.members());
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn a_killed_member_is_downed_when_its_lease_expires() {
    let etcd = Etcd::start("kill").await;
    let (a, mut a_events) = join(&etcd, id(1), 3, 1000);
    let (b, b_events) = join(&etcd, id(2), 3, 1000);
    until(&mut a_events, &MemberEvent::Up(id(2)), &[]).await;
    // Dropping every handle stops B as a crash would: no leave, no revoke; its lease
    // expires and A sees it down, then removed.
    drop((b, b_events));
    until(&mut a_events, &MemberEvent::Down(id(2)), &[]).await;
    until(&mut a_events, &MemberEvent::Removed(id(2)), &[]).await;
    assert_eq!(a.members().len(), 1);
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn a_member_cut_off_from_etcd_downs_itself_before_its_lease_expires() {
    let mut etcd = Etcd::start("fence").await;
    let (a, mut a_events) = join(&etcd, id(1), 3, 1000);
    until(&mut a_events, &MemberEvent::Up(id(1)), &[]).await;
    etcd.stop();
    // No keep-alive answered for lease-ttl - keep-alive (2 s): it downs itself and its
    // stream ends.
    until(&mut a_events, &MemberEvent::Down(id(1)), &[]).await;
    assert_eq!(a.self_member().status, MemberStatus::Down);
    assert_eq!(tokio::time::timeout(T, a_events.next()).await, Ok(None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn an_operator_down_and_a_restart_on_the_same_address() {
    let etcd = Etcd::start("down").await;
    let (a, mut a_events) = join(&etcd, id(1), 5, 1000);
    let (_b, mut b_events) = join(&etcd, id(2), 5, 1000);
    until(&mut a_events, &MemberEvent::Up(id(2)), &[]).await;
    // A downs B: B learns it (its registration is deleted, its lease revoked) and stops.
    a.down(&id(2)).expect("running");
    until(&mut a_events, &MemberEvent::Down(id(2)), &[]).await;
    until(&mut b_events, &MemberEvent::Down(id(2)), &[]).await;
    assert_eq!(tokio::time::timeout(T, b_events.next()).await, Ok(None));
    // A process restarted at A's address (a later generation, another incarnation) is
    // admitted at once and replaces the registration of its earlier life, which every
    // member sees removed at once rather than after a lease time.
    let (_c, mut c_events) = join(&etcd, id(3), 5, 1000);
    until(&mut c_events, &MemberEvent::Up(id(1)), &[]).await;
    let mut again = id(1);
    again.incarnation = Incarnation(99);
    again.generation = 100;
    let (_a2, _a2_events) = join(&etcd, again.clone(), 5, 1000);
    until(&mut c_events, &MemberEvent::Up(again), &[]).await;
    until(&mut c_events, &MemberEvent::Removed(id(1)), &[]).await;
    // The earlier life learns its registration was deleted and stops.
    until(&mut a_events, &MemberEvent::Down(id(1)), &[]).await;
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd; run by .ci/run"]
async fn bad_input_a_wrong_strategy_is_refused_and_garbage_in_the_prefix_is_counted() {
    let etcd = Etcd::start("bad").await;
    let provider = EtcdProvider::new(etcd_config(&etcd, 5, 1000)).expect("valid");
    let refused = Cluster::join_with(id(1), ClusterConfig::default(), provider);
    assert!(
        matches!(&refused, Err(JoinError::Provider(e)) if e.to_string().contains("lease")),
        "{refused:?}"
    );
    let mut bad = etcd_config(&etcd, 5, 1000);
    bad.keep_alive = Duration::from_secs(4);
    assert!(EtcdProvider::new(bad).is_err());

    let (a, mut a_events) = join(&etcd, id(1), 5, 1000);
    until(&mut a_events, &MemberEvent::Up(id(1)), &[]).await;
    assert!(etcdctl(
        &etcd.endpoint(),
        &[
            "put",
            "/rally/etcdtest/members/127.0.0.1:9/9",
            "not a member"
        ]
    ));
    // A real member after the garbage: once it is seen, the garbage was read before it.
    let (_b, _b_events) = join(&etcd, id(2), 5, 1000);
    until(&mut a_events, &MemberEvent::Up(id(2)), &[]).await;
    assert_eq!(a.stats().malformed, 1);
    assert_eq!(a.members().len(), 2);
}
