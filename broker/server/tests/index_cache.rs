//! `storage.message_index_cache_bytes` bounds the process-wide index page cache. Its own test
//! binary: the cache is global, so brokers started in parallel would race for its setting.

mod common;

use common::Broker;
use rustqueue_storage::log::PageCache;

#[tokio::test]
async fn the_configured_index_cache_bound_reaches_the_storage_page_cache() {
    let b = Broker::start_with(|c| c.storage.message_index_cache_bytes = 3 << 20).await;
    assert_eq!(PageCache::shared().capacity(), 3 << 20);
    b.stop().await;
    let b = Broker::start().await;
    assert_eq!(
        PageCache::shared().capacity(),
        64 << 20,
        "the default is 64 MiB"
    );
    b.stop().await;
}
