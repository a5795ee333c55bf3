//! Virtual actors on members in one process (in-memory provider and network): activation on
//! the first message in one hop, bad input, failing hooks, passivation by idle time and by
//! the cap, state across members, moves on join with asks in flight, and takeover after a
//! member is killed only once the takeover wait has passed.

mod virtual_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use rally::cluster::virtual_actors::{
    AskError, GetError, Hashed, Placement, VirtualActorsConfig, shard_of,
};
use rally::cluster::{MemberEvent, MemberId, MemberStatus};
use rally::state::{Claim, MemoryStore, SqliteStore, StateStore};
use virtual_support::{
    Add, Next, Probe, T, TestCluster, TestMember, Unlisted, Where, assert_never_two_at_once,
    converged, disorder, eventually, live, lives,
};

fn key(member: &MemberId) -> String {
    member.to_string()
}

fn owner_of(identity: &str, hosts: &[MemberId]) -> MemberId {
    Hashed
        .place("probe", identity, hosts, &hosts[0])
        .expect("hosts")
        .clone()
}

#[tokio::test(start_paused = true)]
async fn the_first_message_activates_once_on_the_hashed_owner_in_one_hop() {
    let tc = TestCluster::new("first", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let hosts: Vec<_> = (1..=3)
        .map(|p| tc.join(p, true, Arc::clone(&store)))
        .collect();
    let client = tc.join(4, false, Arc::clone(&store));
    let ids: Vec<MemberId> = hosts
        .iter()
        .map(|m| m.id.clone())
        .chain([client.id.clone()])
        .collect();
    let all: Vec<_> = hosts.iter().chain([&client]).collect();
    converged(&all, &ids).await;
    let host_ids: Vec<MemberId> = hosts.iter().map(|m| m.id.clone()).collect();

    for i in 0..30 {
        let identity = format!("first-{i}");
        let expected = key(&owner_of(&identity, &host_ids));
        // From every member, the client-only one included: the same activation answers.
        for (n, member) in all.iter().enumerate() {
            let grain = member.grains.get::<Probe>(&identity).unwrap();
            let (owner, epoch, count) = grain.ask(Where, T).await.unwrap();
            assert_eq!(owner, expected, "{identity} from member {n}");
            assert_eq!(epoch, 1);
            assert_eq!(count, 0);
        }
    }
    let lives = lives("first");
    assert_eq!(lives.len(), 30, "one activation per identity");
    // One hop: no member passed a message on.
    for member in &hosts {
        let stats = &member.grains.stats()[0];
        assert_eq!(stats.forwarded, 0, "{stats:?}");
    }
    let total: u64 = hosts.iter().map(|m| m.grains.stats()[0].activations).sum();
    assert_eq!(total, 30);
    assert!(client.grains.stats().is_empty(), "the client hosts nothing");
}

/// Members that start together do not see each other at once: a message sent before any
/// host of its kind is seen waits for one instead of failing with `NoHost`.
#[tokio::test(start_paused = true)]
async fn messages_sent_before_any_host_is_seen_are_delivered_when_one_joins() {
    let tc = TestCluster::new("early", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    // The client starts first; its seed (the host, port 1) does not exist yet.
    let client = tc.join(2, false, Arc::clone(&store));
    let grain = client.grains.get::<Probe>("early-1").unwrap();
    grain.tell(Add(3)).unwrap();
    let asked = tokio::spawn({
        let grain = grain.clone();
        async move { grain.ask(Add(2), T).await }
    });
    let host = tc.join(1, true, Arc::clone(&store));
    let reply = asked
        .await
        .unwrap()
        .expect("delivered once the host was seen");
    assert!(reply == 2 || reply == 5, "{reply}");
    eventually("live(\"early\") == 1", T, async || live("early") == 1).await;
    let (owner, _, count) = grain.ask(Where, T).await.unwrap();
    assert_eq!(owner, key(&host.id));
    assert_eq!(count, 5, "the tell waited too");
    assert_eq!(lives("early").len(), 1, "one activation");
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_a_typed_error_at_the_sender_and_activates_nothing() {
    let tc = TestCluster::new("bad", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let host = tc.join(1, true, Arc::clone(&store));
    let client = tc.join(2, false, Arc::clone(&store));
    converged(&[&host, &client], &[host.id.clone(), client.id.clone()]).await;

    // Empty or too long identity.
    assert!(matches!(
        client.grains.get::<Probe>(""),
        Err(GetError::InvalidIdentity(_))
    ));
    let long = "x".repeat(257);
    assert!(matches!(
        client.grains.get::<Probe>(&long),
        Err(GetError::InvalidIdentity(_))
    ));
    assert!(client.grains.get::<Probe>(&"x".repeat(256)).is_ok());

    // A zero timeout.
    let grain = client.grains.get::<Probe>("bad-1").unwrap();
    assert_eq!(
        grain.ask(Where, Duration::ZERO).await,
        Err(AskError::InvalidTimeout)
    );

    // A message type the kind did not register cannot cross to another member.
    assert_eq!(
        grain.ask(Unlisted, T).await,
        Err(AskError::UnknownMessage("test.probe.Unlisted".into()))
    );

    // A kind no member hosts: a second cluster whose only member declares no kind. Its view
    // has settled (it is up, nobody joins, nothing changed for `stable-after`: paused time
    // passes it), so no host is on its way: refused at once.
    let lonely = TestCluster::new("nohost", VirtualActorsConfig::default());
    let alone = lonely.join(1, false, Arc::clone(&store));
    converged(&[&alone], std::slice::from_ref(&alone.id)).await;
    tokio::time::sleep(virtual_support::fast_membership().stable_after).await;
    let asked = Instant::now();
    assert_eq!(
        alone
            .grains
            .get::<Probe>("bad-2")
            .unwrap()
            .ask(Where, Duration::from_secs(300))
            .await,
        Err(AskError::UnknownKind {
            kind: "probe".into(),
            similar: None
        }),
        "no host in a settled view"
    );
    assert_eq!(
        asked.elapsed(),
        Duration::ZERO,
        "at once, not after the timeout"
    );

    // A member that declares the kind but never registered it.
    let undeclared = TestCluster::new("unreg", VirtualActorsConfig::default());
    let id = virtual_support::member_id("unreg", 1, true);
    let cluster = rally::cluster::Cluster::join_with(
        id.clone(),
        virtual_support::fast_membership(),
        rally::cluster::provider::MemoryProvider::new(&undeclared.network),
    )
    .unwrap();
    let system = rally::ActorSystem::new("unreg");
    let grains = rally::cluster::virtual_actors::VirtualActors::builder(&cluster, &system)
        .start_in_memory(&undeclared.grains)
        .unwrap();
    eventually("the member seen up", T, async || {
        cluster
            .members()
            .iter()
            .any(|m| m.id == id && m.status == rally::cluster::MemberStatus::Up)
    })
    .await;
    assert!(matches!(
        grains.get::<Probe>("bad-3").unwrap().ask(Where, T).await,
        Err(AskError::NotHosted { .. })
    ));

    // Registering a kind the member does not declare is refused at start.
    let refused =
        rally::cluster::virtual_actors::VirtualActors::builder(&client.cluster, &client.system)
            .kind::<Probe>()
            .start_in_memory(&tc.grains);
    assert!(matches!(
        refused,
        Err(rally::cluster::virtual_actors::VirtualActorsStartError::KindNotDeclared(_))
    ));

    // Nothing was activated by any of it.
    assert!(lives("bad").is_empty());
    assert_eq!(host.grains.stats()[0].activations, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failing_or_panicking_hook_fails_the_sender_and_the_identity_activates_later() {
    let tc = TestCluster::new("hooks", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let host = tc.join(1, true, Arc::clone(&store));
    let client = tc.join(2, false, Arc::clone(&store));
    converged(&[&host, &client], &[host.id.clone(), client.id.clone()]).await;

    for identity in ["failonce-a", "paniconce-b"] {
        let grain = client.grains.get::<Probe>(identity).unwrap();
        let first = grain.ask(Add(1), T).await;
        let Err(AskError::ActivationFailed(why)) = first else {
            panic!("{identity}: {first:?}");
        };
        let expected = if identity.starts_with("paniconce-") {
            // The panic's text and the place it happened, caught as a handler's panic is.
            "the activation hook panicked: the hook panicked (at "
        } else {
            "the hook refused"
        };
        assert!(why.starts_with(expected), "{identity}: {why}");
        // Nothing is held: the next message activates it, under the next epoch.
        assert_eq!(grain.ask(Add(1), T).await, Ok(1));
        let (_, epoch, _) = grain.ask(Where, T).await.unwrap();
        assert_eq!(epoch, 2, "the failed activation's claim was released");
    }
    assert_eq!(host.grains.stats()[0].failed_activations, 2);
    assert_eq!(host.grains.stats()[0].activations, 2);
}

#[tokio::test(start_paused = true)]
async fn an_idle_activation_is_passivated_saving_its_state_and_comes_back_with_it() {
    let mut config = VirtualActorsConfig::default();
    config.idle_timeout = Duration::from_millis(300);
    let tc = TestCluster::new("idle", config);
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let host = tc.join(1, true, Arc::clone(&store));
    converged(&[&host], std::slice::from_ref(&host.id)).await;

    let grain = host.grains.get::<Probe>("idle-1").unwrap();
    assert_eq!(grain.ask(Add(5), T).await, Ok(5));
    // Kept alive while used.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        grain.ask(Add(0), T).await.unwrap();
    }
    assert_eq!(host.grains.stats()[0].deactivations, 0);
    eventually("host.grains.stats()[0].deactivations == 1", T, async || {
        host.grains.stats()[0].deactivations == 1
    })
    .await;
    assert_eq!(host.grains.stats()[0].active, 0);
    assert_eq!(live("idle"), 0, "the actor was dropped");
    // Back with its state, under a new epoch.
    let (_, epoch, count) = grain.ask(Where, T).await.unwrap();
    assert_eq!((epoch, count), (2, 5));
    let life = &lives("idle")[0];
    let idle_for = life.end.unwrap() - life.start;
    assert!(idle_for >= Duration::from_millis(300 + 500), "{idle_for:?}");
}

/// Identities of one shard activate under one lease: the first claims the shard in the
/// store, the others act under the same epoch with no claim of their own; the last of them to
/// end releases it, and the next activation in the shard claims it again, under a higher
/// epoch. Another shard has a lease of its own.
#[tokio::test(start_paused = true)]
async fn identities_of_one_shard_share_one_lease_and_the_last_to_end_releases_it() {
    let mut config = VirtualActorsConfig::default();
    config.idle_timeout = Duration::from_millis(300);
    let tc = TestCluster::new("lease", config);
    let counted = Arc::new(virtual_support::Switch::new(Arc::new(MemoryStore::new())));
    let host = tc.join(1, true, counted.clone());
    converged(&[&host], std::slice::from_ref(&host.id)).await;

    let shard = shard_of("probe", "lease-0");
    let together: Vec<String> = (0..)
        .map(|i| format!("lease-{i}"))
        .filter(|id| shard_of("probe", id) == shard)
        .take(3)
        .collect();
    let apart = (0..)
        .map(|i| format!("lease-apart-{i}"))
        .find(|id| shard_of("probe", id) != shard)
        .unwrap();
    let mut epochs = Vec::new();
    for identity in together.iter().chain([&apart]) {
        let grain = host.grains.get::<Probe>(identity).unwrap();
        assert_eq!(grain.ask(Add(1), T).await, Ok(1), "{identity}");
        epochs.push(grain.ask(Where, T).await.unwrap().1);
    }
    assert_eq!(epochs, [1, 1, 1, 1], "each lease's first epoch");
    assert_eq!(
        counted.claims.load(Ordering::SeqCst),
        2,
        "one claim per shard, not per identity"
    );
    assert_eq!(host.grains.stats()[0].leases, 2);

    // All four idle: passivated, and each shard's lease released once, by its last.
    eventually(
        "host.grains.stats()[0].deactivations == 4 && host.grains.stats()[0].leases == 0",
        T,
        async || host.grains.stats()[0].deactivations == 4 && host.grains.stats()[0].leases == 0,
    )
    .await;
    eventually(
        "counted.releases.load(Ordering::SeqCst) == 2",
        T,
        async || counted.releases.load(Ordering::SeqCst) == 2,
    )
    .await;
    let grain = host.grains.get::<Probe>(&together[1]).unwrap();
    let (_, epoch, count) = grain.ask(Where, T).await.unwrap();
    assert_eq!(
        (epoch, count),
        (2, 1),
        "claimed again, under the next epoch"
    );
    assert_eq!(counted.claims.load(Ordering::SeqCst), 3);
    assert_never_two_at_once("lease");
}

#[tokio::test(start_paused = true)]
async fn past_the_cap_the_least_recently_used_are_deactivated_and_memory_returns() {
    let mut config = VirtualActorsConfig::default();
    config.max_active = 10;
    let tc = TestCluster::new("cap", config);
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let host = tc.join(1, true, Arc::clone(&store));
    converged(&[&host], std::slice::from_ref(&host.id)).await;

    for i in 0..50 {
        let grain = host.grains.get::<Probe>(&format!("cap-{i}")).unwrap();
        grain.ask(Add(1), T).await.unwrap();
    }
    eventually(
        "host.grains.stats()[0].active <= 10 && live(\"cap\") <= 10",
        T,
        async || host.grains.stats()[0].active <= 10 && live("cap") <= 10,
    )
    .await;
    let stats = host.grains.stats()[0].clone();
    assert_eq!(stats.activations, 50);
    assert_eq!(stats.deactivations, 50 - stats.active as u64);
    // The survivors are the most recently used.
    let survivors: Vec<usize> = lives("cap")
        .iter()
        .filter(|l| l.end.is_none())
        .map(|l| l.identity[4..].parse().unwrap())
        .collect();
    // The survivors are the most recently used, but for one: an activation whose last
    // message's reply is sent but whose handler has not yet marked it idle is busy and
    // skipped by the eviction (seen on a loaded machine: cap-0 kept, cap-40 evicted).
    assert!(!survivors.is_empty());
    let recent = survivors.iter().filter(|i| **i >= 40).count();
    assert!(recent + 1 >= survivors.len(), "{survivors:?}");
    // An evicted one comes back with its state.
    let (_, epoch, count) = host
        .grains
        .get::<Probe>("cap-0")
        .unwrap()
        .ask(Where, T)
        .await
        .unwrap();
    assert_eq!((epoch, count), (2, 1));
}

/// A member whose runtime stopped hosting before the others saw it leave: an ask sent to it
/// in that moment is not failed (it was not handled there) but routed anew once the sender
/// sees the member leave, and answered by the new owner within its timeout.
/// Hosts A and B and a client-only member, converged, and an identity of prefix `name`
/// whose hashed owner is A.
async fn hosts_and_a_client(
    name: &str,
) -> (TestCluster, TestMember, TestMember, TestMember, String) {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    hosts_and_a_client_with(
        name,
        VirtualActorsConfig::default(),
        [Arc::clone(&store), Arc::clone(&store), store],
    )
    .await
}

/// [`hosts_and_a_client`] with `config`, and a store handle each for A, B and the client.
async fn hosts_and_a_client_with(
    name: &str,
    config: VirtualActorsConfig,
    [store_a, store_b, store_client]: [Arc<dyn StateStore>; 3],
) -> (TestCluster, TestMember, TestMember, TestMember, String) {
    let tc = TestCluster::new(name, config);
    let a = tc.join(1, true, store_a);
    let b = tc.join(2, true, store_b);
    let client = tc.join(3, false, store_client);
    let ids = [a.id.clone(), b.id.clone(), client.id.clone()];
    converged(&[&a, &b, &client], &ids).await;
    let hosts = [a.id.clone(), b.id.clone()];
    let identity = (0..)
        .map(|i| format!("{name}-{i}"))
        .find(|id| owner_of(id, &hosts) == a.id)
        .unwrap();
    (tc, a, b, client, identity)
}

#[tokio::test(start_paused = true)]
async fn an_ask_to_a_member_that_stopped_hosting_before_it_left_is_routed_anew_not_failed() {
    let (_tc, a, b, client, identity) = hosts_and_a_client("stopfirst").await;
    let grain = client.grains.get::<Probe>(&identity).unwrap();
    // The client's view routes to A before A stops: its answer comes from A.
    let (owner, _, _) = grain.ask(Where, T).await.unwrap();
    assert_eq!(owner, key(&a.id));

    // A stops hosting; the others still see it up.
    a.grains.shutdown().await;
    let mut asked = tokio::spawn({
        let grain = grain.clone();
        async move { grain.ask(Add(1), T).await }
    });
    // A refuses it at once (not handled); while the client still sees A up, it waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut asked)
            .await
            .is_err(),
        "the ask waits while A is still seen up"
    );
    a.cluster.leave().await.unwrap();
    assert_eq!(
        asked.await.unwrap(),
        Ok(1),
        "answered by the next owner (the first count was saved as 0)"
    );
    let (owner, _, _) = grain.ask(Where, T).await.unwrap();
    assert_eq!(owner, key(&b.id));
    assert_never_two_at_once("stopfirst");
}

#[tokio::test(start_paused = true)]
async fn a_tell_that_reaches_a_member_after_it_stopped_hosting_is_passed_on_not_lost() {
    let (_tc, a, b, client, identity) = hosts_and_a_client("telllate").await;
    let grain = client.grains.get::<Probe>(&identity).unwrap();

    // A stops hosting; the client still routes to A, which can no longer answer a tell.
    a.grains.shutdown().await;
    grain.tell(Next(1)).unwrap();
    // A passes it to B; B still sees A up, so it holds it until A leaves.
    eventually(
        "b.grains.stats()[0].forwarded + a.grains.stats()[0].forwarded > 0",
        T,
        async || b.grains.stats()[0].forwarded + a.grains.stats()[0].forwarded > 0,
    )
    .await;
    a.cluster.leave().await.unwrap();
    eventually("b.grains.stats()[0].activations == 1", T, async || {
        b.grains.stats()[0].activations == 1
    })
    .await;
    let (owner, _, count) = grain.ask(Where, T).await.unwrap();
    assert_eq!(owner, key(&b.id));
    assert_eq!(
        count, 1,
        "the tell was handled, not dropped by the stopped member"
    );
    assert!(disorder("telllate").is_empty());
    assert_never_two_at_once("telllate");
}

/// A member that leaves gracefully releases its leases as it stops, which may be a moment
/// after the others have seen it gone (here: its releases are held back until the next owner
/// has met the lease still held). The next owner must not wait the whole takeover wait (the
/// bound for a member that crashed, over 20 s here) for a lease released meanwhile: an ask
/// that crosses the leave is answered within its 10 s. Before, the next owner slept until the
/// takeover wait had passed and the ask failed with `Timeout`.
#[tokio::test(start_paused = true)]
async fn a_lease_released_after_its_holder_was_seen_gone_is_claimed_without_the_takeover_wait() {
    let mut config = VirtualActorsConfig::default();
    config.deactivation_timeout = Duration::from_secs(20);
    let shared: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let leaver_store = Arc::new(virtual_support::Switch::new(Arc::clone(&shared)));
    let next_store = Arc::new(virtual_support::Switch::new(Arc::clone(&shared)));
    let (_tc, a, b, client, identity) = hosts_and_a_client_with(
        "gone",
        config,
        [leaver_store.clone(), next_store.clone(), shared],
    )
    .await;
    let grain = client.grains.get::<Probe>(&identity).unwrap();
    assert_eq!(grain.ask(Where, T).await.unwrap().0, key(&a.id));

    // A leaves; its release of the lease waits.
    leaver_store.hold_releases();
    a.cluster.leave().await.unwrap();
    // The client and B see it gone: the client's ask goes to B.
    eventually(
        "the client and b no longer see a as serving",
        T,
        async || {
            [&client, &b].iter().all(|m| {
                !m.cluster
                    .members()
                    .iter()
                    .any(|seen| seen.id == a.id && seen.status == MemberStatus::Up)
            })
        },
    )
    .await;
    let claims_before = next_store.claims.load(Ordering::SeqCst);
    let asked = tokio::spawn({
        let grain = grain.clone();
        async move { grain.ask(Where, Duration::from_secs(10)).await }
    });
    // B claims the lease and finds A, gone, still holding it; then A's release goes through.
    eventually(
        "next_store.claims.load(Ordering::SeqCst) > claims_before",
        T,
        async || next_store.claims.load(Ordering::SeqCst) > claims_before,
    )
    .await;
    leaver_store.let_releases_go();
    let (owner, _, _) = asked
        .await
        .unwrap()
        .expect("answered by the next owner within the ask's timeout");
    assert_eq!(owner, key(&b.id));
    assert_never_two_at_once("gone");
}

/// A member that hosts the kind is seen up before its runtime has started (members join,
/// then start their virtual actors): an ask routed to it in that gap is routed again until the
/// runtime takes it, not failed.
#[tokio::test(start_paused = true)]
async fn an_ask_to_a_member_whose_runtime_has_not_started_yet_waits_for_it() {
    let tc = TestCluster::new("late", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let a = tc.join(1, true, Arc::clone(&store));
    let client = tc.join(2, false, Arc::clone(&store));
    let (b_id, b_cluster, membership) = tc.join_cluster(3, true);
    let ids = [a.id.clone(), client.id.clone()];
    converged(&[&a, &client], &ids).await;
    eventually("the client sees b up", T, async || {
        client
            .cluster
            .members()
            .iter()
            .any(|m| m.id == b_id && m.status == rally::cluster::MemberStatus::Up)
    })
    .await;
    let hosts = [a.id.clone(), b_id.clone()];
    let identity = (0..)
        .map(|i| format!("late-{i}"))
        .find(|id| owner_of(id, &hosts) == b_id)
        .unwrap();
    let grain = client.grains.get::<Probe>(&identity).unwrap();
    let asked = tokio::spawn(async move { grain.ask(Add(1), T).await });
    // Longer than the in-memory network waits for a runtime to attach (200 ms).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let b = tc.start_grains(b_id, b_cluster, &membership, true, Arc::clone(&store));
    assert_eq!(
        asked.await.unwrap(),
        Ok(1),
        "answered once B's runtime started"
    );
    assert_eq!(b.grains.stats()[0].activations, 1, "on B, its hashed owner");
    assert_never_two_at_once("late");
}

/// A client-only member pipelines tells (each identity's numbers in sequence, never waiting
/// for one to be handled) while a member joins, and then leaves gracefully: the identities that
/// move, move twice under load. Every identity gets every number, in the order sent.
// On the real clock and two threads: a tell that reaches the identity's previous owner after
// the whole move is over (its sender's view lagging by that much) is passed on afterwards and may
// be handled after later ones (docs/cluster.md); on a paused clock, where every view changes in
// the same instant of virtual time, that exception is what the schedule makes likely.
// On a loaded machine the real clock makes it happen too (about 1 run in 25 on the project's
// 2-core VM, e.g. "order-7: 228 before 230", every tell handled in the end): the test is left out
// of the default run, as it cannot tell that exception apart from a fault. The order itself is
// checked where it can: on the deterministic harness, over random schedules of joins, graceful
// leaves and pipelined calls (`joins_and_graceful_leaves_keep_each_senders_order`).
#[ignore = "timing-sensitive: the documented exception (a tell reaching the previous owner after \
            the whole move may be handled after later ones) shows under load; run with --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_pipelined_across_a_join_and_a_graceful_leave_all_arrive_in_the_order_sent() {
    let tc = TestCluster::new("order", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let a = tc.join(1, true, Arc::clone(&store));
    let b = tc.join(2, true, Arc::clone(&store));
    let client = tc.join(3, false, Arc::clone(&store));
    let ids = [a.id.clone(), b.id.clone(), client.id.clone()];
    converged(&[&a, &b, &client], &ids).await;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut senders = Vec::new();
    for i in 0..24 {
        let grain = client.grains.get::<Probe>(&format!("order-{i}")).unwrap();
        let stop = Arc::clone(&stop);
        senders.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sent += 1;
                grain.tell(Next(sent)).expect("the client takes it");
                if sent % 4 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            (grain, sent)
        }));
    }
    let activations = |members: &[&TestMember]| {
        members
            .iter()
            .map(|m| m.grains.stats()[0].activations)
            .sum::<u64>()
    };
    eventually("activations(&[&a, &b]) == 24", T, async || {
        activations(&[&a, &b]) == 24
    })
    .await;

    let c = tc.join(4, true, Arc::clone(&store));
    let all = [a.id.clone(), b.id.clone(), client.id.clone(), c.id.clone()];
    converged(&[&a, &b, &client, &c], &all).await;
    eventually("c.grains.stats()[0].active > 0", T, async || {
        c.grains.stats()[0].active > 0
    })
    .await;
    let moved_in = |c: &TestMember| c.grains.stats()[0].activations;
    eventually(
        "a.grains.stats()[0].moves + b.grains.stats()[0].moves == moved_in(&c)",
        T,
        async || a.grains.stats()[0].moves + b.grains.stats()[0].moves == moved_in(&c),
    )
    .await;

    c.cluster.leave().await.unwrap();
    eventually("c.grains.stats()[0].active == 0", T, async || {
        c.grains.stats()[0].active == 0
    })
    .await;
    // The numbers keep flowing a while after the moves back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    let deadline = Instant::now() + T;
    for sender in senders {
        let (grain, sent) = sender.await.unwrap();
        loop {
            let (_, _, count) = grain.ask(Where, T).await.unwrap();
            if count == sent {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {count} of {sent} handled",
                grain.identity()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    assert_eq!(disorder("order"), Vec::new(), "out of order or lost");
    let left = &c.grains.stats()[0];
    assert!(left.activations > 0);
    assert_eq!(
        left.deactivations, left.activations,
        "C handed back all it held"
    );
    assert_never_two_at_once("order");
}

#[tokio::test(start_paused = true)]
async fn state_written_on_one_member_is_read_by_the_next_activation_on_another_through_one_sqlite_file()
 {
    let dir = std::env::temp_dir().join(format!("rally-virtual-sqlite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("grains.db");
    let tc = TestCluster::new("sqlite", VirtualActorsConfig::default());
    // Each member opens the file itself, as members in separate processes would.
    let a = tc.join(1, true, Arc::new(SqliteStore::open(&path).unwrap()));
    let b = tc.join(2, true, Arc::new(SqliteStore::open(&path).unwrap()));
    converged(&[&a, &b], &[a.id.clone(), b.id.clone()]).await;
    let hosts = [a.id.clone(), b.id.clone()];
    let identity = (0..)
        .map(|i| format!("sqlite-{i}"))
        .find(|id| owner_of(id, &hosts) == a.id)
        .unwrap();

    let grain = b.grains.get::<Probe>(&identity).unwrap();
    assert_eq!(grain.ask(Add(7), T).await, Ok(7));
    // Normally A, the hashed owner, activated it. On a loaded machine B's runtime may not yet
    // have taken in A's `Up` (its view follows the cluster's events a moment later) and
    // activates it itself, to move it once it has (a second activation, on A, with the next
    // epoch). Either way: the member holding it leaves, its activation ends and saves, and the
    // next activation, on the other, reads it, under the epoch after the one seen here (the
    // move, if it comes after this ask, is that next activation).
    let (holder, seen_epoch, _) = grain.ask(Where, T).await.unwrap();
    let (leaver, stayer) = if holder == key(&a.id) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    leaver.grains.shutdown().await;
    leaver.cluster.leave().await.unwrap();
    eventually("the stayer sees the leaver gone", T, async || {
        stayer
            .cluster
            .members()
            .iter()
            .all(|m| m.id != leaver.id || m.status != rally::cluster::MemberStatus::Up)
    })
    .await;
    let grain = stayer.grains.get::<Probe>(&identity).unwrap();
    let (owner, epoch, count) = grain.ask(Where, T).await.unwrap();
    assert_eq!((owner, epoch, count), (key(&stayer.id), seen_epoch + 1, 7));
    assert_never_two_at_once("sqlite");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_join_moves_identities_while_asks_are_in_flight_nothing_lost_never_two_at_once() {
    let tc = TestCluster::new("join", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let a = tc.join(1, true, Arc::clone(&store));
    let b = tc.join(2, true, Arc::clone(&store));
    converged(&[&a, &b], &[a.id.clone(), b.id.clone()]).await;

    // One sender per identity, each asking in sequence (so its order is its count).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut senders = Vec::new();
    for i in 0..40 {
        let grain = a.grains.get::<Probe>(&format!("join-{i}")).unwrap();
        let stop = Arc::clone(&stop);
        senders.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let count = grain
                    .ask(Add(1), T)
                    .await
                    .expect("no ask fails across a move");
                sent += 1;
                assert_eq!(count, sent, "nothing lost, nothing applied twice, in order");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (grain, sent)
        }));
    }
    // The runtimes take in a membership change a moment after `converged` sees it, so an
    // identity may first activate on A and then move to B, its owner: wait until every one
    // answers from its owner, and count only the moves that come after.
    let pair = [a.id.clone(), b.id.clone()];
    for i in 0..40 {
        let identity = format!("join-{i}");
        let grain = a.grains.get::<Probe>(&identity).unwrap();
        let deadline = tokio::time::Instant::now() + T;
        loop {
            let (owner, _, _) = grain.ask(Where, T).await.unwrap();
            if owner == key(&owner_of(&identity, &pair)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{identity} still on {owner}: {:?} {:?}",
                a.grains.stats(),
                b.grains.stats()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let moved_before = a.grains.stats()[0].moves + b.grains.stats()[0].moves;
    let c = tc.join(3, true, Arc::clone(&store));
    converged(&[&a, &b, &c], &[a.id.clone(), b.id.clone(), c.id.clone()]).await;
    eventually("c.grains.stats()[0].active > 0", T, async || {
        c.grains.stats()[0].active > 0
    })
    .await;
    // Let the moves finish under load.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let hosts = [a.id.clone(), b.id.clone(), c.id.clone()];
    for sender in senders {
        let (grain, sent) = sender.await.unwrap();
        let (owner, _, count) = grain.ask(Where, T).await.unwrap();
        assert_eq!(count, sent);
        assert_eq!(
            owner,
            key(&owner_of(grain.identity(), &hosts)),
            "{}",
            grain.identity()
        );
    }
    let moves = a.grains.stats()[0].moves + b.grains.stats()[0].moves - moved_before;
    assert_eq!(
        moves,
        c.grains.stats()[0].activations,
        "only what moved to C moved"
    );
    assert!(moves > 0);
    assert_never_two_at_once("join");
}

#[tokio::test(start_paused = true)]
async fn a_killed_members_identities_activate_elsewhere_only_after_the_takeover_wait() {
    let mut config = VirtualActorsConfig::default();
    config.deactivation_timeout = Duration::from_millis(500);
    let tc = TestCluster::new("kill", config);
    let store = Arc::new(MemoryStore::new());
    let shared: Arc<dyn StateStore> = store.clone();
    let a = tc.join(1, true, Arc::clone(&shared));
    let b = tc.join(2, true, Arc::clone(&shared));
    // C reaches the store through a switch the test turns off when it kills C: a crashed
    // process releases nothing.
    let cut = Arc::new(virtual_support::Switch::new(Arc::clone(&shared)));
    let c = tc.join(3, true, cut.clone());
    let ids = [a.id.clone(), b.id.clone(), c.id.clone()];
    converged(&[&a, &b, &c], &ids).await;
    let identity = (0..)
        .map(|i| format!("kill-{i}"))
        .find(|id| owner_of(id, &ids) == c.id)
        .unwrap();
    let grain = a.grains.get::<Probe>(&identity).unwrap();
    assert_eq!(grain.ask(Where, T).await.unwrap().0, key(&c.id));

    let mut events = a.cluster.events();
    cut.cut();
    let killed = c.id.clone();
    drop(c); // every handle: the member stops as a crash would
    let down_seen = tokio::time::timeout(T, async {
        while let Some(event) = events.next().await {
            if event == MemberEvent::Down(killed.clone()) {
                return Instant::now();
            }
        }
        panic!("events ended");
    })
    .await
    .expect("C is downed");
    // Until A's runtime has taken the down in, the ask still goes to C, which does not take
    // it; it is routed again until the view sends it elsewhere, and the new owner waits out
    // the takeover wait before activating: one ask, answered within its timeout.
    let (owner, epoch, _) = grain
        .ask(Where, T)
        .await
        .expect("answered by the next owner");
    assert_ne!(owner, key(&killed));
    assert_eq!(epoch, 2, "taken over from C's epoch");
    let lives = lives("kill");
    let second = lives.iter().find(|l| l.epoch == 2).unwrap();
    // members seen by A: 3; the takeover wait: the membership margin for 3 plus 500 ms.
    let wait = tc.membership.takeover_margin(3) + Duration::from_millis(500);
    assert!(
        second.start >= down_seen + wait - Duration::from_millis(50),
        "re-activated {:?} after the down was seen; the wait is {wait:?}",
        second.start - down_seen
    );
}

/// A whole cluster restarted over a durable store leaves leases of processes that are gone.
/// One held by a previous life at an address a member now runs at is taken over at once; one
/// held by an address nobody runs at is waited for (the takeover wait, counted from when the
/// member first met it), then taken over. Before, both failed every message with
/// `HolderUnknown`, for as long as the store kept the claim.
#[tokio::test(start_paused = true)]
async fn claims_left_by_dead_lives_in_a_durable_store_are_taken_over() {
    let mut config = VirtualActorsConfig::default();
    config.deactivation_timeout = Duration::from_millis(500);
    let tc = TestCluster::new("restart", config);
    let store = Arc::new(MemoryStore::new());
    // The previous lives: the same address as member 1 with another incarnation, and an
    // address that no member runs at any more.
    let old_life = "rally://restart@mem:1#4242";
    let vanished = "rally://restart@mem:99#7";
    // The leases of the two identities' shards (two shards apart: checked).
    let shard = |identity: &str| format!("#{}", shard_of("probe", identity));
    assert_ne!(shard("restart-a"), shard("restart-b"));
    assert!(matches!(
        store.claim("probe", &shard("restart-a"), old_life).await,
        Ok(Claim::Granted(1))
    ));
    assert!(matches!(
        store.claim("probe", &shard("restart-b"), vanished).await,
        Ok(Claim::Granted(1))
    ));
    let a = tc.join(1, true, store.clone());
    converged(&[&a], std::slice::from_ref(&a.id)).await;

    let grain = a.grains.get::<Probe>("restart-a").unwrap();
    let (owner, epoch, _) = grain.ask(Where, T).await.unwrap();
    assert_eq!(
        (owner, epoch),
        (key(&a.id), 2),
        "taken over from the old life's epoch"
    );

    let first_met = Instant::now();
    let grain = a.grains.get::<Probe>("restart-b").unwrap();
    let wait = tc.membership.takeover_margin(1) + Duration::from_millis(500);
    let (owner, epoch, _) = grain.ask(Where, wait + T).await.unwrap();
    assert_eq!((owner, epoch), (key(&a.id), 2));
    let started = lives("restart")
        .iter()
        .find(|l| l.identity == "restart-b")
        .expect("restart-b activated")
        .start;
    assert!(
        started >= first_met + wait - Duration::from_millis(50),
        "activated {:?} after the claim was met; the wait is {wait:?}",
        started - first_met
    );
}

/// `Cluster::get` is the runtime's `get`: the same activation answers; a second runtime on the
/// same member is refused; on a member with no runtime, `get` says so.
#[tokio::test(start_paused = true)]
async fn the_cluster_hands_out_refs_of_its_one_runtime() {
    use rally::cluster::virtual_actors::{GrainNetwork, VirtualActors, VirtualActorsStartError};

    let tc = TestCluster::new("viacluster", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let a = tc.join(1, true, Arc::clone(&store));
    converged(&[&a], std::slice::from_ref(&a.id)).await;
    let via_cluster = a.cluster.get::<Probe>("viacluster-1").unwrap();
    let via_runtime = a.grains.get::<Probe>("viacluster-1").unwrap();
    via_cluster.ask(Add(5), T).await.unwrap();
    let (_, epoch, count) = via_runtime.ask(Where, T).await.unwrap();
    assert_eq!((epoch, count), (1, 5), "one activation behind both refs");
    assert!(matches!(
        VirtualActors::builder(&a.cluster, &a.system).start_in_memory(&GrainNetwork::new()),
        Err(VirtualActorsStartError::AlreadyStarted)
    ));

    let bare = rally::cluster::Cluster::join_with(
        virtual_support::member_id("viacluster", 2, false),
        tc.membership.clone(),
        rally::cluster::provider::MemoryProvider::new(&tc.network),
    )
    .unwrap();
    assert!(matches!(
        bare.get::<Probe>("viacluster-1"),
        Err(GetError::NotStarted)
    ));
}

/// A kind nobody hosts, named close to one that is hosted (a typo): `probes` for `probe`.
struct Probes;
impl rally::Actor for Probes {}
impl rally::cluster::virtual_actors::VirtualActor for Probes {
    const KIND: &'static str = "probes";
    async fn activate(_: rally::cluster::virtual_actors::Activation) -> rally::ActorResult<Self> {
        Ok(Probes)
    }
    fn messages(table: &mut rally::cluster::virtual_actors::GrainMessages<Self>) {
        table.add::<Where>();
    }
}
impl rally::Handler<Where> for Probes {
    async fn handle(
        &mut self,
        _: Where,
        _: &mut rally::Context<Self>,
    ) -> rally::ActorResult<(String, u64, u64)> {
        Ok((String::new(), 0, 0))
    }
}

/// Issue 32: an ask to a kind nobody hosts waited its whole timeout, then said `NoHost`; a
/// tell returned `Ok` and vanished (no log, no dead letter). Once the view has settled, the
/// ask fails at once and names the hosted kind of a similar name; the tell is a dead letter,
/// counted by the actor system (and logged) under the kind's name.
#[tokio::test(start_paused = true)]
async fn a_kind_nobody_hosts_fails_an_ask_at_once_naming_a_similar_kind_and_a_tell_is_a_dead_letter()
 {
    let tc = TestCluster::new("typo", VirtualActorsConfig::default());
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    let host = tc.join(1, true, Arc::clone(&store));
    let client = tc.join(2, false, Arc::clone(&store));
    converged(&[&host, &client], &[host.id.clone(), client.id.clone()]).await;
    // Before the view has been quiet for `stable-after` a host may be on its way: the ask
    // waits for one, then says `NoHost`.
    let typo = client.grains.get::<Probes>("typo-1").unwrap();
    assert_eq!(
        typo.ask(Where, Duration::from_millis(1)).await,
        Err(AskError::NoHost("probes".into()))
    );
    tokio::time::sleep(virtual_support::fast_membership().stable_after).await;
    let asked = Instant::now();
    assert_eq!(
        typo.ask(Where, Duration::from_secs(300)).await,
        Err(AskError::UnknownKind {
            kind: "probes".into(),
            similar: Some("probe".into())
        })
    );
    assert_eq!(asked.elapsed(), Duration::ZERO, "at once");
    let error = typo.ask(Where, T).await.unwrap_err();
    assert!(
        error.to_string().contains("did you mean \"probe\""),
        "{error}"
    );

    let mut dead = rally_test::Probe::<rally::DeadLetter>::spawn(&client.system);
    client
        .system
        .event_stream()
        .subscribe(dead.actor().recipient::<rally::DeadLetter>());
    let before = client.system.dead_letters().count();
    typo.tell(Where).unwrap();
    let letter = dead.expect_msg(T).await.expect("a dead letter");
    assert_eq!(&*letter.recipient, "grain:probes");
    assert_eq!(letter.message_type, "test.probe.Where");
    assert_eq!(client.system.dead_letters().count(), before + 1);
    // The hosted kind is not affected.
    assert!(
        client
            .grains
            .get::<Probe>("typo-2")
            .unwrap()
            .ask(Where, T)
            .await
            .is_ok()
    );
}
