//! `storage.message_index_cache_bytes` bounds the engine's index page cache.

mod common;

use common::Broker;

#[tokio::test]
async fn the_configured_index_cache_bound_reaches_the_storage_page_cache() {
    let b = Broker::start_with(|c| c.storage.message_index_cache_bytes = 3 << 20).await;
    let engine = b.running.as_ref().unwrap().engine();
    assert_eq!(engine.index_cache_capacity(), 3 << 20);
    b.stop().await;
    let b = Broker::start().await;
    assert_eq!(
        b.running.as_ref().unwrap().engine().index_cache_capacity(),
        64 << 20,
        "the default is 64 MiB"
    );
    b.stop().await;
}

#[tokio::test]
async fn two_brokers_in_one_process_keep_their_own_index_cache_bound() {
    let small = Broker::start_with(|c| c.storage.message_index_cache_bytes = 1 << 20).await;
    let large = Broker::start_with(|c| c.storage.message_index_cache_bytes = 5 << 20).await;
    let capacity = |b: &Broker| b.running.as_ref().unwrap().engine().index_cache_capacity();
    assert_eq!((capacity(&small), capacity(&large)), (1 << 20, 5 << 20));
    small.stop().await;
    large.stop().await;
}
