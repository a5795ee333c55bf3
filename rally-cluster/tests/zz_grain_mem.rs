#![allow(missing_docs, clippy::all)]
mod virtual_support;
use rally::cluster::virtual_actors::{
    Activation, GrainMessages, VirtualActor, VirtualActorsConfig,
};
use rally::remote::RemoteMessage;
use rally::state::{MemoryStore, StateStore};
use rally::{Actor, ActorResult, Context, Handler, Message};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use virtual_support::*;

struct P;
impl Actor for P {}
impl VirtualActor for P {
    const KIND: &'static str = "probe";
    async fn activate(_a: Activation) -> ActorResult<Self> {
        Ok(Self)
    }
    fn messages(t: &mut GrainMessages<Self>) {
        t.add::<Pi>();
    }
}
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pi;
impl Message for Pi {
    type Reply = u8;
}
impl RemoteMessage for Pi {
    const MANIFEST: &'static str = "zz.Pi";
}
impl Handler<Pi> for P {
    async fn handle(&mut self, _: Pi, _: &mut Context<Self>) -> ActorResult<u8> {
        Ok(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coldwarm() {
    let n: usize = std::env::var("ZZ_N")
        .map(|v| v.parse().unwrap())
        .unwrap_or(3000);
    let mut cfg = VirtualActorsConfig::default();
    cfg.idle_timeout = Duration::from_secs(3600);
    cfg.max_active = 10_000_000;
    let tc = TestCluster::new("zz", cfg);
    let dir = std::env::temp_dir().join(format!("zzcw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store: Arc<dyn StateStore> = if std::env::var("ZZ_MEM").is_ok() {
        Arc::new(MemoryStore::new())
    } else {
        Arc::new(rally::state::SqliteStore::open(dir.join("s.db")).unwrap())
    };
    let id = member_id("zz", 1, true);
    let mut membership = tc.membership.clone();
    membership.seeds = vec![id.address.clone()];
    let cluster = rally::cluster::Cluster::join_with(
        id.clone(),
        membership.clone(),
        rally::cluster::provider::MemoryProvider::new(&tc.network),
    )
    .unwrap();
    let system = rally::ActorSystem::new("zz");
    let mut b = rally::cluster::virtual_actors::VirtualActors::builder(&cluster, &system);
    b.store(store)
        .config(tc.config.clone())
        .membership(&membership)
        .kind::<P>();
    let grains = b.start_in_memory(&tc.grains).unwrap();
    poll(|| {
        cluster
            .members()
            .iter()
            .any(|m| m.status == rally::cluster::MemberStatus::Up)
    })
    .await;
    let warm = grains.get::<P>("warm").unwrap();
    warm.ask(Pi, T).await.unwrap();
    for round in 0..3 {
        let mut cold = Vec::new();
        let mut hot = Vec::new();
        for i in 0..n {
            let g = grains.get::<P>(&format!("id-{round}-{i:08}")).unwrap();
            let t = std::time::Instant::now();
            g.ask(Pi, T).await.unwrap();
            cold.push(t.elapsed().as_micros() as u64);
            let t = std::time::Instant::now();
            g.ask(Pi, T).await.unwrap();
            hot.push(t.elapsed().as_micros() as u64);
        }
        cold.sort();
        hot.sort();
        eprintln!(
            "cold p50 {} p99 {}  warm p50 {} p99 {}  ratio {:.2}",
            cold[n / 2],
            cold[n * 99 / 100],
            hot[n / 2],
            hot[n * 99 / 100],
            cold[n / 2] as f64 / hot[n / 2] as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
