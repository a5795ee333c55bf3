//! The PostgreSQL store keeps the store contract against a real server the test starts.

mod support;

use std::sync::Arc;

use rally::state::{PostgresStore, StateStore};
use support::postgres::PgServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs postgresql; run by .ci/run"]
async fn postgres_store_keeps_the_contract_and_races_have_one_winner() {
    let server = PgServer::start("contract");
    let store = PostgresStore::connect(&server.config()).await.unwrap();
    support::check_contract(&store, "p").await;
    support::check_shared_scope(&store, "p").await;
    support::check_fences(&store, "p").await;
    // Four connections, as four members would hold.
    let mut stores: Vec<Arc<dyn StateStore>> = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(
            PostgresStore::connect(&server.config()).await.unwrap(),
        ));
    }
    support::check_one_winner(stores, "p").await;
}
