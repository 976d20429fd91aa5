//! Traces over OTLP (feature `otel`; docs/observability.md): what every RustQueue binary that
//! exports spans shares.
//!
//! [`init`] installs a tracer only when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. Without it [`tracer`] is `None`, and code on a
//! hot path skips every span with one load of a `OnceLock`: no span, no attribute, no clock
//! read. With it, spans go through the SDK's batch processor (its own thread) to an
//! OTLP/HTTP-protobuf exporter that sends with our own reqwest client
//! ([`crate::http_client`]: rustls on ring), run on the process's tokio runtime. The sampler is
//! the SDK's reading of `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`; the resource is
//! `OTEL_SERVICE_NAME` (else the binary's name) and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! Callers decide sampling before they build anything: [`SdkTracer`]'s `build` runs the sampler
//! first and returns a span that records nothing when the trace is not sampled; set attributes
//! only when `span.is_recording()`.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer};
pub use opentelemetry::{Context, KeyValue};
pub use opentelemetry_sdk::trace::{SdkTracer, Span as SdkSpan};

/// What tests of span structure use: the SDK's in-memory exporter and provider.
#[cfg(feature = "otel-testing")]
pub mod testing {
    pub use opentelemetry::trace::SpanId;
    pub use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
}

/// The endpoint variables; either one turns exporting on.
pub const ENDPOINT_ENVS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// How long one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT` overrides it in the exporter).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The process's tracer, `None` when no endpoint was configured (nothing is exported).
#[inline]
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// `init` runs the exporter's requests on the caller's tokio runtime.
    #[error("OpenTelemetry tracing must start inside a tokio runtime")]
    NoRuntime,
    /// The OTLP exporter refused its settings (a malformed endpoint or header variable).
    #[error("the OTLP span exporter cannot be built from the OTEL_EXPORTER_OTLP_* variables: {0}")]
    Exporter(String),
    /// A tracer was installed already in this process.
    #[error("a tracer is installed already")]
    AlreadyInstalled,
}

/// Keeps the tracer provider; [`Guard::shutdown`] exports what is still buffered.
pub struct Guard {
    provider: SdkTracerProvider,
}

impl Guard {
    /// Exports the spans still buffered (bounded by the exporter's timeout) and stops the
    /// batch processor. Runs the blocking shutdown off the async threads.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
    }
}

/// Whether the environment asks for traces: an endpoint variable is set and non-empty, and
/// neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` turns them off.
pub fn wanted(env: impl Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| env(k).is_some_and(|v| !v.trim().is_empty());
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let exporter_none =
        env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    ENDPOINT_ENVS.iter().any(|k| set(k)) && !disabled && !exporter_none
}

/// Starts exporting spans when the environment asks for it ([`wanted`]); `Ok(None)` otherwise.
/// `default_service` is `service.name` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
/// names one. Call it once, inside the tokio runtime, after logging is set up.
pub fn init(default_service: &'static str) -> Result<Option<Guard>, InitError> {
    let env = |k: &str| std::env::var(k).ok();
    if !wanted(env) {
        return Ok(None);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| InitError::NoRuntime)?;
    for k in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        if let Some(p) = env(k).filter(|p| p.trim() != "http/protobuf") {
            tracing::warn!(
                "{k}={p} is not supported: spans are sent as OTLP over HTTP with protobuf \
                 (the receiver's HTTP port, 4318 by convention)"
            );
        }
    }
    let client = crate::http_client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| InitError::Exporter(e.to_string()))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(OtlpHttp { client, runtime })
        .build()
        .map_err(|e| InitError::Exporter(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource(default_service, env))
        .build();
    install(&provider, default_service)?;
    let endpoint = ENDPOINT_ENVS
        .iter()
        .find_map(|k| env(k))
        .unwrap_or_default();
    tracing::info!(%endpoint, "exporting traces over OTLP/HTTP");
    Ok(Some(Guard { provider }))
}

/// Makes `provider`'s tracer the process's [`tracer`] (tests install one with an in-memory
/// exporter). Only the first call in a process installs.
pub fn install(provider: &SdkTracerProvider, scope: &'static str) -> Result<(), InitError> {
    TRACER
        .set(provider.tracer(scope))
        .map_err(|_| InitError::AlreadyInstalled)
}

/// The SDK's resource (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`, the SDK's own
/// attributes), with `default_service` as `service.name` when neither variable names one.
fn resource(default_service: &'static str, env: impl Fn(&str) -> Option<String>) -> Resource {
    let named = env("OTEL_SERVICE_NAME").is_some_and(|v| !v.trim().is_empty())
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(default_service).build()
    }
}

/// The wall-clock time of a monotonic instant (span timestamps are wall time; the code
/// measures with `Instant`).
pub fn wall_time(at: Instant) -> SystemTime {
    WallClock::now().at(at)
}

/// One reading of both clocks: converts every instant of one span tree against the same
/// reference, so a child's timestamps never stray outside its parent's by a clock read.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    instant: Instant,
    wall: SystemTime,
}

impl WallClock {
    /// Reads both clocks now.
    pub fn now() -> Self {
        WallClock {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// The wall-clock time of `at`.
    pub fn at(&self, at: Instant) -> SystemTime {
        match self.instant.checked_duration_since(at) {
            Some(ago) => self.wall - ago,
            None => self.wall + at.duration_since(self.instant),
        }
    }
}

/// Sends the exporter's requests with our reqwest client, on the tokio runtime (the SDK's
/// batch processor polls the export on a thread of its own, which has no reactor).
#[derive(Debug)]
struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let (status, headers, body) = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, headers, body))
            })
            .await??;
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_string())
        }
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        assert!(!wanted(env(&[])));
        assert!(!wanted(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!wanted(env(&[("OTEL_TRACES_SAMPLER", "always_on")])));
    }

    #[test]
    fn either_endpoint_variable_turns_exporting_on_unless_disabled() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces",
        );
        assert!(wanted(env(&[base])));
        assert!(wanted(env(&[traces])));
        assert!(!wanted(env(&[base, ("OTEL_SDK_DISABLED", "true")])));
        assert!(!wanted(env(&[base, ("OTEL_TRACES_EXPORTER", "none")])));
        assert!(wanted(env(&[base, ("OTEL_TRACES_EXPORTER", "otlp")])));
    }

    fn service_name(r: &Resource) -> String {
        r.get(&opentelemetry::Key::new("service.name"))
            .map(|v| v.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn the_binary_names_the_service_unless_the_environment_does() {
        // The SDK's own detectors read the process environment, which no test here sets.
        assert_eq!(
            service_name(&resource("rustqueued", env(&[]))),
            "rustqueued"
        );
    }

    #[test]
    fn wall_time_of_an_earlier_instant_is_in_the_past() {
        let earlier = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let wall = wall_time(earlier);
        let ago = SystemTime::now().duration_since(wall).unwrap();
        assert!(ago >= Duration::from_millis(5), "{ago:?}");
        assert!(ago < Duration::from_secs(5), "{ago:?}");
    }
}
