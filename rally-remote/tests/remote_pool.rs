//! A pool exposed like any other actor, asked from another node over real TCP.

#[path = "support/nodes.rs"]
mod nodes;

use nodes::{Echo, T, Target, client_node, config};
use rally_actor::{ActorSystem, Pool, Props, Routing};
use rally_remote::RemoteNode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_exposed_on_one_node_answers_asks_from_another() {
    let system_b = ActorSystem::new("b");
    let b = RemoteNode::start(&system_b, config()).await.unwrap();
    let pool = system_b
        .spawn(Props::new(Pool::new(3, Routing::RoundRobin, || {
            Props::new(Target::new())
        })))
        .unwrap();
    b.expose("pool", &pool).unwrap();

    let (_as, a) = client_node("a", config()).await;
    let remote_pool = a.lookup::<Pool<Target>>(b.address(), "pool");
    // From many tasks at once, through clones of one ref.
    let asks: Vec<_> = (0..12u64)
        .map(|n| {
            let pool = remote_pool.clone();
            tokio::spawn(async move { pool.ask(Echo(n), T).await })
        })
        .collect();
    for (n, ask) in (0..12u64).zip(asks) {
        assert_eq!(ask.await.unwrap(), Ok(n));
    }
    // A message the routees do not accept remotely is refused at the sender, as for any actor.
    assert!(remote_pool.tell(nodes::Unregistered).is_err());
    // Watched like any remote actor: stopping the pool (and its routees) reaches A.
    let ended = remote_pool.terminated();
    pool.stop();
    tokio::time::timeout(T, ended).await.unwrap();
}
