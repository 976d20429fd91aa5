//! The operator's spans (docs/observability.md): one `reconcile` per reconcile of a RustQueue,
//! with a child for its observation, one per action it carries out (named for the action:
//! `ApplyRuntime`, `Drain`, ...) and one for the status it writes.
//!
//! Nothing is built while tracing is off ([`otel::tracer`] is `None`) or the sampler drops the
//! reconcile; a step of a reconcile that is not traced is `None` too.

use rustqueue_api::otel::{
    self, Context, KeyValue, SdkSpan, Span as _, SpanKind, Status, TraceContextExt as _,
    Tracer as _,
};

use crate::Error;
use crate::plan::Action;

/// A sampled reconcile's span.
pub(crate) struct ReconcileSpan {
    span: SdkSpan,
    cx: Context,
}

/// One step of a reconcile.
pub(crate) struct StepSpan(SdkSpan);

impl ReconcileSpan {
    /// Starts the span of a reconcile of RustQueue `namespace/name`, when sampled.
    pub(crate) fn start(namespace: &str, name: &str) -> Option<Self> {
        let tracer = otel::tracer()?;
        let mut span = tracer
            .span_builder("reconcile")
            .with_kind(SpanKind::Internal)
            .start(tracer);
        if !span.is_recording() {
            return None;
        }
        span.set_attributes([
            KeyValue::new("k8s.namespace.name", namespace.to_string()),
            KeyValue::new("rustqueue.name", name.to_string()),
        ]);
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        Some(ReconcileSpan { span, cx })
    }

    /// Ends it with its outcome: `rustqueue.reconcile.result` is `ok` or what failed (the
    /// label of `rustqueue_operator_reconcile_errors_total`).
    pub(crate) fn end(mut self, error: Option<&Error>) {
        let result = error.map_or("ok", Error::metric_label);
        self.span
            .set_attribute(KeyValue::new("rustqueue.reconcile.result", result));
        if let Some(e) = error {
            self.span.set_status(Status::error(e.to_string()));
        }
        self.span.end();
    }
}

/// Starts the step `name` of the reconcile `parent` (when it is traced).
pub(crate) fn step(
    parent: Option<&ReconcileSpan>,
    name: &'static str,
    attributes: Vec<KeyValue>,
) -> Option<StepSpan> {
    let parent = parent?;
    let tracer = otel::tracer()?;
    let span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent.cx);
    Some(StepSpan(span))
}

/// Starts the span of one action of the reconcile `parent`.
pub(crate) fn action(parent: Option<&ReconcileSpan>, action: &Action) -> Option<StepSpan> {
    parent?;
    let mut attributes = vec![KeyValue::new("rustqueue.action", action.kind())];
    if let Some(target) = action.target() {
        attributes.push(KeyValue::new("rustqueue.action.target", target.to_string()));
    }
    step(parent, action.kind(), attributes)
}

/// Ends a step with its result.
pub(crate) fn finish<T>(step: Option<StepSpan>, result: &Result<T, Error>) {
    let Some(StepSpan(mut span)) = step else {
        return;
    };
    if let Err(e) = result {
        span.set_attribute(KeyValue::new("rustqueue.error", e.metric_label()));
        span.set_status(Status::error(e.to_string()));
    }
    span.end();
}
