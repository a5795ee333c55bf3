//! The in-memory store keeps the store contract.

mod support;

use std::sync::Arc;

use rally::state::{MemoryStore, StateStore};

#[tokio::test]
async fn memory_store_keeps_the_contract() {
    let store = MemoryStore::new();
    support::check_contract(&store, "m").await;
    support::check_shared_scope(&store, "m").await;
    support::check_fences(&store, "m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_have_one_winner() {
    let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
    support::check_one_winner(vec![store], "m").await;
}

#[test]
fn memory_store_answers_as_the_model_over_random_sequences() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    support::model::check_against_model(&store, &runtime, "memory", 1024);
}
