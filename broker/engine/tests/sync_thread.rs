//! A durable topic's sync stage on a thread of its own (docs/architecture.md, step 4): started
//! by a publish, gone once the topic is idle, started again by the next publish, and never more
//! than the process-wide limit at once. Threads are counted by name in /proc, so this file is
//! its own test process and its tests run one at a time.

mod common;

use std::time::Duration;

use common::{cfg, wait_for_seen};
use rustqueue_engine::{Bytes, Engine};

/// The tests here share the process's thread count.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a stage waits for work before its thread ends (`sync_thread::IDLE`).
const IDLE: Duration = Duration::from_secs(1);

/// PF_EXITING in /proc's `stat` flags: the thread has begun to exit and runs no more of our
/// code, though /proc lists it until the kernel is done with it.
const PF_EXITING: u64 = 0x4;

/// Threads of this process named `rq-sync` that have not begun to exit. The list is read
/// whole before any thread in it: read thread by thread, a thread that ends and the one
/// started in its place would both be counted.
fn sync_threads() -> usize {
    let tasks: Vec<_> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| Some(t.ok()?.path()))
        .collect();
    tasks
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("stat")).ok())
        .filter(|stat| {
            // "tid (comm) state ppid pgrp session tty_nr tpgid flags ..."; comm may hold spaces.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                return false;
            };
            let flags = stat[close + 1..]
                .split_whitespace()
                .nth(6)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
            &stat[open + 1..close] == "rq-sync" && flags & PF_EXITING == 0
        })
        .count()
}

async fn publish(e: &Engine, topic: &str, body: &str) {
    tokio::time::timeout(
        Duration::from_secs(10),
        e.publish(topic, vec![Bytes::from(body.to_owned())], None),
    )
    .await
    .unwrap_or_else(|_| panic!("publish of {body} to {topic} not answered within 10 s"))
    .expect("durable publish acknowledged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_topic_syncs_on_a_thread_only_while_it_publishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    assert_eq!(sync_threads(), 0, "no thread before any publish");

    publish(&e, "t", "first").await;
    assert_eq!(
        sync_threads(),
        1,
        "the first durable publish starts the topic's thread"
    );
    wait_for_seen(10, "the idle topic's sync thread to end", || {
        let n = sync_threads();
        (n == 0, format!("{n} sync threads"))
    })
    .await;

    // Publishes that come about when the stage gives up waiting: each one is answered, by
    // the stage still running or by the one it starts. The pause is the point of the test,
    // not a wait for something: publishes paced 0.98-1.02 s apart land on either side of the
    // stage's idle limit. A loaded machine only moves where they land; each must be answered
    // wherever it does.
    for i in 0..5u32 {
        let pace = IDLE - Duration::from_millis(20) + Duration::from_millis(10 * u64::from(i));
        tokio::time::sleep(pace).await;
        publish(&e, "t", &format!("m{i}")).await;
    }
    let s = e.stats(Some("t"), None);
    assert_eq!(
        s.topics[0].last_durable_position, 6,
        "every publish fsynced"
    );
    e.shutdown().await;
    wait_for_seen(10, "the sync thread to end after shutdown", || {
        let n = sync_threads();
        (n == 0, format!("{n} sync threads"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_thread_limit_stages_run_on_the_runtime_and_every_publish_is_answered() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(cfg(dir.path())).await.unwrap();
    // 80 topics publishing at once, past the limit of 64 threads; the threads are counted
    // every 2 ms until the last publisher is done.
    let mut publishers = tokio::task::JoinSet::new();
    for t in 0..80 {
        let e = e.clone();
        publishers.spawn(async move {
            for i in 0..20 {
                publish(&e, &format!("t{t}"), &format!("m{i}")).await;
            }
        });
    }
    let mut most = 0;
    let mut count = tokio::time::interval(Duration::from_millis(2));
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            tokio::select! {
                done = publishers.join_next() => match done {
                    Some(r) => r.expect("publisher"),
                    None => break,
                },
                _ = count.tick() => most = most.max(sync_threads()),
            }
        }
    })
    .await
    .expect("80 topics x 20 durable publishes done within 60 s");
    assert!(
        most <= 64,
        "{most} sync threads at once, over the limit of 64"
    );
    assert!(
        most > 1,
        "only {most} sync thread seen: the stages did not get threads"
    );
    for t in 0..80 {
        let s = e.stats(Some(&format!("t{t}")), None);
        assert_eq!(
            s.topics[0].last_durable_position, 20,
            "topic t{t}: every publish fsynced"
        );
    }
    e.shutdown().await;
}
