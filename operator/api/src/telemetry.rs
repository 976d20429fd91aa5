//! What every RustQueue binary's logs and metrics share (feature `telemetry`; docs/monitoring.md):
//! one `--log-format text|json` switch (environment `RUSTQUEUE_LOG_FORMAT`) with the field names
//! a log pipeline expects, and the `rustqueue_build_info` and `process_*` series.

use std::io::IsTerminal;

use prometheus::{IntGauge, Opts, Registry};
use tracing_subscriber::EnvFilter;

pub use crate::broker_config::LogFormat;

/// The environment variable every binary reads its log format from (`text` or `json`).
pub const LOG_FORMAT_ENV: &str = "RUSTQUEUE_LOG_FORMAT";

/// The version every binary, image, chart and bundle carries (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Installs the process's log subscriber on standard error. `RUST_LOG` filters (default
/// `default_filter`). JSON lines carry `timestamp`, `level`, `target`, `message` and the
/// event's own fields (`broker`, `topic`, `channel`, ... where the code names them) at the top
/// level, with the enclosing span's fields under `span`.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colours only on a terminal: a log file or `kubectl logs` would show the escape codes.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        LogFormat::Text => builder.init(),
    }
}

/// Registers `rustqueue_build_info{component, version} 1` and the process collector
/// (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, ...).
pub fn register_build_info(registry: &Registry, component: &str) -> prometheus::Result<()> {
    let info = IntGauge::with_opts(
        Opts::new(
            "rustqueue_build_info",
            "Always 1; the labels name the component and its version",
        )
        .const_label("component", component)
        .const_label("version", VERSION),
    )?;
    info.set(1);
    registry.register(Box::new(info))?;
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))
}

#[cfg(test)]
mod tests {
    use prometheus::{Encoder, TextEncoder};

    use super::*;

    #[test]
    fn build_info_and_process_series_are_exported() {
        let r = Registry::new();
        register_build_info(&r, "rustqueued").unwrap();
        let mut out = Vec::new();
        TextEncoder::new().encode(&r.gather(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(&format!(
                "rustqueue_build_info{{component=\"rustqueued\",version=\"{VERSION}\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
        assert!(text.contains("process_cpu_seconds_total"), "{text}");
    }

    #[test]
    fn log_formats_parse_from_their_names() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert!(
            "yaml"
                .parse::<LogFormat>()
                .unwrap_err()
                .contains("text or json")
        );
    }
}
