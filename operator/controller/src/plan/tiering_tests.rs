//! Table tests of tiering in a plan: the credentials Secret gate, the `RestoringFromBucket`
//! and `RestoreFromBucketFailed` phases, and `status.restores`.

use rustqueue_api::contract::{RestoreOutcome, RestoreSummary};
use rustqueue_api::crd::{BrokerRestore, RustQueueStatus, Tiering, TieringCredentials};

use super::tests::{run, spec};
use super::*;

fn tiered() -> RustQueueSpec {
    let mut s = spec();
    s.tiering = Some(Tiering {
        bucket: "rq-bucket".into(),
        endpoint: "https://s3.example".into(),
        region: "us-east-1".into(),
        prefix: None,
        allow_http: false,
        credentials_secret: TieringCredentials::named("s3"),
        upload_after_seconds: 0,
        checkpoint_upload_seconds: 60,
        local_retention_bytes: None,
        local_retention_seconds: None,
    });
    s
}

fn brokers() -> builder::ObservedBuilder {
    Observed::test()
        .brokers(3)
        .at_revision("b")
        .tiering_secret(TieringSecret::Valid {
            revision: "1".into(),
        })
}

fn cond(p: &Plan, t: &str) -> ConditionSpec {
    p.conditions.iter().find(|c| c.type_ == t).cloned().unwrap()
}

fn restored(lost: u64) -> RestoreRun {
    RestoreRun::Done {
        summary: RestoreSummary {
            outcome: RestoreOutcome::Restored,
            node_id: 2,
            topics: 1,
            topics_not_restored: 0,
            segments_restored: 4,
            messages_restored: 40,
            lost_messages: lost,
            damaged_objects: 0,
        },
        started_at: Some("2033-05-18T03:33:00Z".into()),
        finished_at: Some("2033-05-18T03:33:05Z".into()),
    }
}

#[test]
fn a_missing_credentials_secret_or_key_is_invalid_spec_naming_them() {
    let rows = [
        (
            TieringSecret::Missing { name: "s3".into() },
            "Secret s3 named by spec.tiering.credentialsSecret does not exist",
            "--from-literal=access-key-id=",
        ),
        (
            TieringSecret::MissingKeys {
                name: "s3".into(),
                keys: vec!["secret-access-key".into()],
            },
            "Secret s3 named by spec.tiering.credentialsSecret has no (or an empty) key secret-access-key",
            "accessKeyIdKey",
        ),
    ];
    for (secret, says, and_says) in rows {
        let obs = brokers().tiering_secret(secret.clone()).build();
        let p = run(&tiered(), &obs, None);
        assert_eq!(p.phase, Phase::InvalidSpec, "{secret:?}");
        assert!(
            p.message.contains(says) && p.message.contains(and_says),
            "{}",
            p.message
        );
        assert!(p.actions.is_empty(), "nothing is touched: {:?}", p.actions);
        let degraded = cond(&p, "Degraded");
        assert!(degraded.status && degraded.message.contains(says));
        assert!(!cond(&p, "Ready").status);
    }
    // Without tiering the Secret is never looked for.
    let p = run(
        &spec(),
        &brokers().tiering_secret(TieringSecret::Unused).build(),
        None,
    );
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
}

#[test]
fn a_broker_restoring_its_empty_volume_is_named_and_keeps_the_cluster_from_ready() {
    let running = RestoreRun::Running {
        started_at: Some("2033-05-18T03:33:00Z".into()),
    };
    let obs = brokers().restore(1, running).build();
    let p = run(&tiered(), &obs, None);
    assert_eq!(p.phase, Phase::RestoringFromBucket, "{}", p.message);
    assert!(
        p.message
            .starts_with("q-1 not started yet: the restore init container runs")
    );
    let ready = cond(&p, "Ready");
    assert!(!ready.status);
    assert_eq!(ready.reason, "RestoringFromBucket");
    assert!(ready.message.contains("q-1"), "{}", ready.message);
    assert!(cond(&p, "Progressing").status);
    assert!(!cond(&p, "Degraded").status);
    let brokers_available = cond(&p, "BrokersAvailable");
    assert!(
        brokers_available
            .message
            .contains("q-1: RestoringFromBucket"),
        "{}",
        brokers_available.message
    );
    assert!(
        moves_nothing(&p),
        "no broker is touched while one restores: {:?}",
        p.actions
    );
    assert_eq!(p.restores.len(), 1);
    assert_eq!(p.restores[0].broker, "q-1");
    assert_eq!(p.restores[0].phase, "RestoringFromBucket");
    assert_eq!(p.restores[0].pod_uid, "uid-1");
}

fn moves_nothing(p: &Plan) -> bool {
    p.actions.iter().all(|a| {
        matches!(
            a,
            Action::ApplyRuntime { .. }
                | Action::ApplyBrokerSet { .. }
                | Action::DeleteConfigMap { .. }
        )
    })
}

#[test]
fn a_finished_restore_is_recorded_with_its_counts_and_the_cluster_is_ready_again() {
    let obs = brokers().restore(1, restored(3)).build();
    let previous = RustQueueStatus {
        restores: vec![BrokerRestore {
            broker: "q-1".into(),
            phase: "RestoringFromBucket".into(),
            pod_uid: "uid-1".into(),
            started_at: None,
            finished_at: None,
            messages_restored: None,
            lost_messages: None,
            damaged_objects: None,
            message: String::new(),
        }],
        ..RustQueueStatus::default()
    };
    let floor = feature_floor(&obs, &previous);
    let d = super::tests::desired_over(&tiered(), "b", floor);
    let p = plan(&tiered(), &obs, &d, &previous, 2_000_000_000);
    assert_eq!(p.phase, Phase::Ready, "{}", p.message);
    let r = &p.restores[0];
    assert_eq!(r.phase, RESTORED);
    assert_eq!(
        (r.messages_restored, r.lost_messages, r.damaged_objects),
        (Some(40), Some(3), Some(0))
    );
    assert!(r.message.contains("3 messages lost"), "{}", r.message);
    let (next, _) = crate::status::next_status(&previous, &p, Some(1), "now");
    let events = crate::status::restore_events(&previous, &next);
    assert_eq!(events.len(), 1, "one Event when it ends");
    assert_eq!(events[0].reason, "RestoredFromBucket");
    assert!(events[0].warning, "it lost messages");
    assert!(events[0].note.starts_with("q-1: restored 40 messages"));
    assert!(
        crate::status::restore_events(&next, &next).is_empty(),
        "and only once"
    );

    // The next Pod on the restored volume finds data: the record stays.
    let again = brokers()
        .restore(
            1,
            RestoreRun::Done {
                summary: RestoreSummary::nothing(RestoreOutcome::HasData, 2),
                started_at: None,
                finished_at: None,
            },
        )
        .broker_uid(1, "uid-2")
        .build();
    assert_eq!(
        super::tiering::records(&again, &next.restores),
        next.restores
    );
}

#[test]
fn a_look_that_found_data_or_an_empty_bucket_leaves_no_record() {
    let running = RustQueueStatus {
        restores: super::tiering::records(
            &brokers()
                .restore(0, RestoreRun::Running { started_at: None })
                .build(),
            &[],
        ),
        ..RustQueueStatus::default()
    };
    assert_eq!(running.restores.len(), 1);
    for outcome in [RestoreOutcome::HasData, RestoreOutcome::NothingInBucket] {
        let obs = brokers()
            .restore(
                0,
                RestoreRun::Done {
                    summary: RestoreSummary::nothing(outcome, 1),
                    started_at: None,
                    finished_at: None,
                },
            )
            .build();
        assert!(super::tiering::records(&obs, &running.restores).is_empty());
    }
    // Nor does a restore whose Pod went before it was seen ending.
    let replaced = brokers().broker_uid(0, "uid-new").build();
    assert!(super::tiering::records(&replaced, &running.restores).is_empty());
}

#[test]
fn a_failed_restore_is_degraded_with_the_log_tail_and_what_to_do() {
    let failed = RestoreRun::Failed {
        message: "restoring /data from the bucket\nError: bucket gave up: connection refused\n"
            .into(),
        finished_at: None,
    };
    let obs = brokers().restore(2, failed).build();
    let p = run(&tiered(), &obs, None);
    assert_eq!(p.phase, Phase::RestoreFromBucketFailed, "{}", p.message);
    assert!(
        p.message
            .contains("q-2: Error: bucket gave up: connection refused")
            && p.message.contains("kubectl logs <pod> -c restore"),
        "{}",
        p.message
    );
    assert!(cond(&p, "Degraded").status);
    assert_eq!(p.restores[0].phase, RESTORE_FAILED);
}

#[test]
fn local_retention_once_seen_is_remembered_in_status() {
    let mut s = tiered();
    let p = run(&s, &brokers().build(), None);
    assert!(!p.tiering_local_retention_used);
    s.tiering.as_mut().unwrap().local_retention_seconds = Some(3600);
    s.storage_feature_level = 3;
    let p = run(&s, &brokers().build(), None);
    assert!(p.tiering_local_retention_used);
    let (next, _) = crate::status::next_status(&RustQueueStatus::default(), &p, Some(1), "now");
    assert_eq!(next.tiering_local_retention_used, Some(true));
    // Never cleared, whatever the spec says next.
    let later = run(&spec(), &brokers().build(), None);
    let (after, _) = crate::status::next_status(&next, &later, Some(2), "now");
    assert_eq!(after.tiering_local_retention_used, Some(true));
    // An object written past the CRD's rule is refused by the operator, touching nothing.
    let obs = brokers().build();
    let d = super::tests::desired_over(&spec(), "b", 1);
    let p = plan(&spec(), &obs, &d, &after, 2_000_000_000);
    assert_eq!(p.phase, Phase::InvalidSpec);
    assert!(p.message.contains("put spec.tiering back"), "{}", p.message);
    assert!(p.actions.is_empty());
}

#[test]
fn a_tiering_spec_the_broker_would_refuse_is_invalid_spec() {
    type Edit = fn(&mut Tiering);
    let rows: [(Edit, &str); 9] = [
        (
            |t| t.bucket = "Bad_Bucket".into(),
            "is not an S3 bucket name",
        ),
        (|t| t.bucket = "a..b".into(), "is not an S3 bucket name"),
        (
            |t| t.endpoint = "s3.example".into(),
            "is not an https:// URL",
        ),
        (
            |t| t.endpoint = "http://s3.example".into(),
            "set spec.tiering.allowHttp",
        ),
        (|t| t.prefix = Some("a/../b".into()), "spec.tiering.prefix"),
        (
            |t| t.checkpoint_upload_seconds = 0,
            "checkpointUploadSeconds (0) must be 1 to 86400",
        ),
        (
            |t| t.local_retention_seconds = Some(0),
            "localRetentionSeconds must be 1 to",
        ),
        // at the spec's level 1
        (
            |t| t.local_retention_bytes = Some(0),
            "need spec.storageFeatureLevel 3 (it is 1)",
        ),
        (
            |t| t.local_retention_seconds = Some(3600),
            "roll an image that writes level 3 first, then raise the level",
        ),
    ];
    for (edit, says) in rows {
        let mut s = tiered();
        edit(s.tiering.as_mut().unwrap());
        let p = run(&s, &brokers().build(), None);
        assert_eq!(p.phase, Phase::InvalidSpec, "{says}");
        assert!(p.message.contains(says), "{}", p.message);
    }
    let mut s = tiered();
    let t = s.tiering.as_mut().unwrap();
    t.endpoint = "http://versitygw.test:7070".into();
    t.allow_http = true;
    t.prefix = Some("cluster-a/prod".into());
    assert_eq!(run(&s, &brokers().build(), None).phase, Phase::Ready);
    // Local retention at level 3, on brokers and an image that write it.
    s.tiering.as_mut().unwrap().local_retention_bytes = Some(0);
    s.storage_feature_level = 3;
    let obs = brokers()
        .capabilities(builder::RETAINING, 3)
        .probe(Some(("Succeeded", None, Some(builder::RETAINING))))
        .build();
    assert_eq!(run(&s, &obs, None).phase, Phase::Ready);
}
