//! `spec.tracing`: OpenTelemetry traces of the brokers (docs/observability.md), given to the
//! broker Pods as the standard `OTEL_*` environment variables.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the brokers send their publish and delivery spans, and which they keep.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[x_kube(
    validation = Rule::new("!has(self.samplerArg) || (has(self.sampler) && (self.sampler == 'traceidratio' || self.sampler == 'parentbased_traceidratio'))")
        .message("tracing.samplerArg is the ratio of the traceidratio samplers: set tracing.sampler to traceidratio or parentbased_traceidratio, or leave samplerArg out"),
)]
#[serde(rename_all = "camelCase")]
pub struct Tracing {
    /// The receiver's OTLP/HTTP base address, e.g. `http://otel-collector.monitoring:4318`
    /// (spans go to `<endpoint>/v1/traces`; OTLP over gRPC is not sent).
    #[schemars(length(max = 2048), regex(pattern = r"^https?://[^\s/]+(/\S*)?$"))]
    pub otlp_endpoint: String,
    /// Which traces are kept (`OTEL_TRACES_SAMPLER`); unset: `parentbased_always_on`, every
    /// publish and delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<TraceSampler>,
    /// The kept fraction for the traceidratio samplers (`OTEL_TRACES_SAMPLER_ARG`), a decimal
    /// from 0 to 1, e.g. `"0.01"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$"))]
    pub sampler_arg: Option<String>,
}

/// The standard samplers (`OTEL_TRACES_SAMPLER`).
#[derive(JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TraceSampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// The fraction `samplerArg` of traces, by trace id.
    Traceidratio,
    /// As the parent decided, else every trace (the default).
    ParentbasedAlwaysOn,
    /// As the parent decided, else none.
    ParentbasedAlwaysOff,
    /// As the parent decided, else the fraction `samplerArg`.
    ParentbasedTraceidratio,
}

impl TraceSampler {
    /// The value of `OTEL_TRACES_SAMPLER`.
    pub fn as_env(self) -> &'static str {
        match self {
            Self::AlwaysOn => "always_on",
            Self::AlwaysOff => "always_off",
            Self::Traceidratio => "traceidratio",
            Self::ParentbasedAlwaysOn => "parentbased_always_on",
            Self::ParentbasedAlwaysOff => "parentbased_always_off",
            Self::ParentbasedTraceidratio => "parentbased_traceidratio",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_are_the_standard_names() {
        for (s, name) in [
            (TraceSampler::AlwaysOn, "always_on"),
            (TraceSampler::AlwaysOff, "always_off"),
            (TraceSampler::Traceidratio, "traceidratio"),
            (TraceSampler::ParentbasedAlwaysOn, "parentbased_always_on"),
            (TraceSampler::ParentbasedAlwaysOff, "parentbased_always_off"),
            (
                TraceSampler::ParentbasedTraceidratio,
                "parentbased_traceidratio",
            ),
        ] {
            assert_eq!(s.as_env(), name);
            assert_eq!(serde_json::to_value(s).unwrap(), name);
        }
    }
}
