//! Virtual actors over real loopback TCP (Rally's own connections, in one process): two
//! members host the kind, a client-only member sends; each identity is activated once, on
//! its hashed owner, and state goes through one SQLite file.

mod virtual_support;

use std::sync::Arc;

use rally::ActorSystem;
use rally::cluster::virtual_actors::{Hashed, Placement, VirtualActors};
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{RemoteConfig, RemoteNode};
use rally::state::SqliteStore;
use virtual_support::{Add, Probe, T, Where, lives, poll};

struct Member {
    cluster: Cluster,
    grains: VirtualActors,
    _system: ActorSystem,
    _node: RemoteNode,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn member(port: u16, seed: u16, hosts: bool, db: &std::path::Path) -> Member {
    let system = ActorSystem::new("vtcp");
    let node = RemoteNode::start(
        &system,
        RemoteConfig::new("127.0.0.1", port).with_secret(b"virtual tcp secret".to_vec()),
    )
    .await
    .expect("node starts");
    let mut builder = ClusterConfig::builder();
    builder.seed(format!("rally://vtcp@127.0.0.1:{seed}").parse().unwrap());
    if hosts {
        builder.kind("probe");
    }
    let config = builder.build().unwrap();
    let cluster = Cluster::join(&system, &node, config.clone()).expect("joins");
    let mut grains = VirtualActors::builder(&cluster, &system);
    grains
        .store(Arc::new(SqliteStore::open(db).unwrap()))
        .membership(&config);
    if hosts {
        grains.kind::<Probe>();
    }
    let grains = grains.start(&node).expect("starts");
    Member {
        cluster,
        grains,
        _system: system,
        _node: node,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_only_member_reaches_each_identity_on_its_hashed_owner_over_tcp() {
    let dir = std::env::temp_dir().join(format!("rally-virtual-tcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("grains.db");
    let ports = [free_port(), free_port(), free_port()];
    let a = member(ports[0], ports[0], true, &db).await;
    let b = member(ports[1], ports[0], true, &db).await;
    let client = member(ports[2], ports[0], false, &db).await;
    let all = [&a, &b, &client];
    poll(|| {
        all.iter().all(|m| {
            let members = m.cluster.members();
            members.len() == 3 && members.iter().all(|x| x.status == MemberStatus::Up)
        })
    })
    .await;
    let hosts = [a.cluster.self_member().id, b.cluster.self_member().id];

    for i in 0..20 {
        let identity = format!("tcp-{i}");
        let grain = client.grains.get::<Probe>(&identity).unwrap();
        assert_eq!(grain.ask(Add(i), T).await, Ok(i));
        let (owner, epoch, count) = grain.ask(Where, T).await.unwrap();
        let expected = Hashed.place("probe", &identity, &hosts, &hosts[0]).unwrap();
        assert_eq!(owner, expected.to_string());
        assert_eq!((epoch, count), (1, i));
        // From a hosting member too: the same activation.
        let from_a = a.grains.get::<Probe>(&identity).unwrap();
        assert_eq!(from_a.ask(Where, T).await.unwrap(), (owner, 1, i));
    }
    assert_eq!(lives("tcp").len(), 20);
    let (sa, sb) = (&a.grains.stats()[0], &b.grains.stats()[0]);
    assert_eq!(sa.activations + sb.activations, 20);
    assert!(sa.activations > 0 && sb.activations > 0, "{sa:?} {sb:?}");
    assert_eq!(sa.forwarded + sb.forwarded, 0, "one hop");
    let _ = std::fs::remove_dir_all(&dir);
}
