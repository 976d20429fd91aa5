//! The spans of `reconcile` (docs/observability.md), through the SDK's in-memory exporter: a
//! `reconcile` root naming the RustQueue, an `observe` step, one child per action carried out
//! and a `status` step. The OTLP export itself is tested against a real collector in
//! broker/server/tests/otlp_traces.rs; the operator shares that code (rustqueue_api::otel).

use std::sync::{Arc, OnceLock};

use rustqueue_api::crd::{RustQueue, RustQueueSpec};
use rustqueue_api::otel::testing::{InMemorySpanExporter, SdkTracerProvider, SpanData, SpanId};
use rustqueue_operator::testing::reconcile;

use super::{NS, UID, cluster_with, context};

/// The process's tracer, exporting into memory (installed once per test binary).
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<(InMemorySpanExporter, SdkTracerProvider)> = OnceLock::new();
    &EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            rustqueue_api::otel::install(&provider, "rustqueue-operator").unwrap();
            (exporter, provider)
        })
        .0
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn each_reconcile_is_a_span_with_its_observation_actions_and_status_as_children() {
    let exporter = exporter();
    // Its own name: other tests of this binary reconcile `q` meanwhile.
    let mut rq = RustQueue::new("traced", RustQueueSpec::with_image("rustqueue:a"));
    rq.metadata.namespace = Some(NS.into());
    rq.metadata.uid = Some(UID.into());
    rq.metadata.generation = Some(1);
    let api = cluster_with(&rq, 3);
    let ctx = context(&api);
    reconcile(Arc::new(rq.clone()), ctx.clone()).await.unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let roots: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "reconcile" && attr(s, "rustqueue.name").as_deref() == Some("traced"))
        .collect();
    let [root] = roots.as_slice() else {
        panic!("one reconcile of `traced`: {roots:#?}");
    };
    assert_eq!(
        root.parent_span_id,
        SpanId::INVALID,
        "a reconcile is a root span"
    );
    assert_eq!(attr(root, "k8s.namespace.name").as_deref(), Some(NS));
    assert_eq!(
        attr(root, "rustqueue.reconcile.result").as_deref(),
        Some("ok")
    );
    let steps: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            s.span_context.trace_id() == root.span_context.trace_id()
                && s.parent_span_id == root.span_context.span_id()
        })
        .collect();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_ref()).collect();
    // A fresh RustQueue: the first reconcile creates its auth Secret and writes a status.
    assert_eq!(names.first(), Some(&"observe"), "{names:?}");
    assert_eq!(names.last(), Some(&"status"), "{names:?}");
    let secret = steps
        .iter()
        .find(|s| s.name == "CreateAuthSecret")
        .unwrap_or_else(|| panic!("the auth Secret's action: {names:?}"));
    assert_eq!(
        attr(secret, "rustqueue.action").as_deref(),
        Some("CreateAuthSecret")
    );
    assert!(
        attr(secret, "rustqueue.action.target").is_some_and(|t| t.starts_with("traced")),
        "{secret:?}"
    );
    for s in &steps {
        assert!(
            s.start_time >= root.start_time && s.end_time <= root.end_time,
            "{s:?}"
        );
    }
}
