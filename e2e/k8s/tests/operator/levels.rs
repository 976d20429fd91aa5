//! Storage feature levels with two "releases" of one build (`rustqueue:level1` lowers the
//! ceiling with `RUSTQUEUE_MAX_FEATURE_LEVEL=1`): raising the level under the old binary is
//! blocked, activation takes a capable binary first, and once level 2 is active a rollback to
//! the old binary is fenced off while a rollback to a capable one completes.

use std::time::Duration;

use crate::cluster::{Cluster, LEVEL1, LONG, NEXT};
use crate::rollout::{
    assert_withdrawn, brokers, no_broker_touched_for, operation, rolled_to, template,
    template_applied,
};

async fn roll_image(c: &Cluster, image: &str) {
    c.patch_spec_ok(&format!(r#"{{"image":"{image}"}}"#));
    template_applied(c, image, std::time::Instant::now()).await;
    let (rev, _) = template(c).await;
    rolled_to(c, &rev.expect("template revision"), 2 * LONG).await;
}

/// Level 2 under a level-1 binary is `PreflightBlocked` naming the limit, without touching a
/// broker; with a capable binary rolled first it activates, and status and every broker
/// report active level 2.
pub async fn a_feature_level_activates_only_after_a_capable_binary(c: &Cluster, capable: &str) {
    roll_image(c, &LEVEL1).await;
    c.patch_spec_ok(r#"{"storageFeatureLevel":2}"#);
    let rq = c
        .until("PreflightBlocked for level 2", LONG, |rq| {
            rq.phase() == "PreflightBlocked"
        })
        .await;
    assert!(
        rq.message().contains("level 2") && rq.message().contains("1..=1"),
        "the message should name the requested level and the binary's limit: {:?}",
        rq.message()
    );
    no_broker_touched_for(c, Duration::from_secs(3), "while level 2 is blocked").await;
    let blocked = rq.operation().clone();

    // Step one: back to level 1 (the raise never activated, so the CRD lets it be taken back,
    // and the blocked rollout is withdrawn) and a capable binary; step two: level 2.
    c.patch_spec_ok(r#"{"storageFeatureLevel":1}"#);
    let rq = c.ready(3).await;
    assert_withdrawn(&rq, &blocked, "the level raise taken back");
    roll_image(c, capable).await;
    c.patch_spec_ok(r#"{"storageFeatureLevel":2}"#);
    let rq = c
        .until("active storage feature level 2", 2 * LONG, |rq| {
            rq.is_ready() && rq.status()["activeStorageFeatureLevel"] == 2
        })
        .await;
    for b in brokers() {
        let caps = c.broker_get(&b, "/v1/capabilities").await;
        assert_eq!(
            caps["storage"]["active_writer_feature_level"], 2,
            "{b} after activation: {caps}\nstatus {rq:?}"
        );
    }
}

/// With level 2 active, `rollbackToImage` to the level-1 binary is `PreflightBlocked` (behind
/// the PVC reader fence) and touches no broker; to a capable binary it completes as a
/// `Rollback`.
pub async fn a_rollback_is_fenced_by_the_active_level(c: &Cluster) {
    c.ready(3).await;
    c.patch_spec_ok(&format!(
        r#"{{"rollout":{{"rollbackToImage":"{}"}}}}"#,
        *LEVEL1
    ));
    let rq = c
        .until("PreflightBlocked for the rollback", LONG, |rq| {
            rq.phase() == "PreflightBlocked"
        })
        .await;
    assert!(
        rq.message().contains("reader fence"),
        "the message should name the PVC reader fence: {:?}",
        rq.message()
    );
    no_broker_touched_for(c, Duration::from_secs(3), "while the rollback is fenced").await;

    c.patch_spec_ok(&format!(
        r#"{{"rollout":{{"rollbackToImage":"{}"}}}}"#,
        *NEXT
    ));
    template_applied(c, &NEXT, std::time::Instant::now()).await;
    let (rev, _) = template(c).await;
    let rev = rev.expect("template revision");
    let (rq, _) = rolled_to(c, &rev, 2 * LONG).await;
    assert!(
        operation(&rq, "Rollback", &rev).is_some_and(|o| o["phase"] == "Completed"),
        "no Completed Rollback to {rev}: {rq:?}"
    );
    // Adopt the rolled-back image as the spec's and clear the request: nothing rolls.
    c.patch_spec_ok(&format!(
        r#"{{"image":"{}","rollout":{{"rollbackToImage":null}}}}"#,
        *NEXT
    ));
    c.ready(3).await;
    assert_eq!(template(c).await.0.as_deref(), Some(rev.as_str()));
}
