//! Kodo mode's startup rules on top of the standard ones (docs/kodo.md, "The Kodo Gateway"):
//! an ordinal 0..2, cleanup compatibility refused, the 100 MiB message / 128 MiB body limits,
//! an in-flight budget that holds the worst-case working set of one command, HTTP on 4151.

//!
//! The ports, limits and grace are the contract's (`rustqueue_api::gateway::kodo`), the same
//! constants the operator renders.

use rustqueue_api::gateway::kodo::{HTTP_PORT, MAX_BODY_BYTES, MAX_MESSAGE_BYTES};
use rustqueue_protocol::command::MAX_MPUB_MESSAGES;

use crate::config::Cli;

/// Largest IDENTIFY/AUTH body.
pub const CONTROL_BODY_BYTES: u64 = 1024 * 1024;
/// Bookkeeping charged per MPUB entry on top of the body.
pub const MPUB_ENTRY_OVERHEAD: u64 = 128;

/// Why Kodo mode refuses to start; each names the setting to change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KodoConfigError {
    /// An ordinal that is not 0, 1 or 2.
    #[error("Kodo gateway mode: {from} = {value:?} does not give an ordinal 0, 1 or 2")]
    BadOrdinal {
        /// Where it came from.
        from: &'static str,
        /// The value.
        value: String,
    },
    /// Neither the ordinal nor the Pod name is set.
    #[error(
        "Kodo gateway mode: set RUSTQUEUE_KODO_GATEWAY_ORDINAL (0..2) or POD_NAME (<name>-kodo-gateway-<0..2>)"
    )]
    NoOrdinal,
    /// Cleanup compatibility asked for.
    #[error(
        "Kodo gateway mode: RUSTQUEUE_KODO_CLEANUP_ENABLED=true is not supported: set it to false"
    )]
    CleanupEnabled,
    /// A size limit other than the one Kodo needs.
    #[error("Kodo gateway mode: {name} must be exactly {want} in Kodo mode (is {value})")]
    Limit {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: u64,
        /// The required value.
        want: u64,
    },
    /// An in-flight budget that cannot hold one worst-case command.
    #[error(
        "Kodo gateway mode: RUSTQUEUE_GATEWAY_MAX_INFLIGHT_BYTES ({inflight}) must be at least the worst-case \
         working set of one command ({need})"
    )]
    InflightBelowWorkingSet {
        /// The budget.
        inflight: u64,
        /// The working set.
        need: u64,
    },
    /// The HTTP address on another port.
    #[error(
        "Kodo gateway mode: RUSTQUEUE_GATEWAY_HTTP_ADDRESS must use port 4151 in Kodo mode (is {0})"
    )]
    HttpPort(u16),
}

/// What Kodo mode adds to the validated [`crate::config::Config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KodoSettings {
    /// This gateway's ordinal (0..2).
    pub ordinal: u8,
}

impl KodoSettings {
    /// Kodo mode's rules over the command line (the standard ones are [`Cli::validate`]'s).
    pub fn from_cli(cli: &Cli) -> Result<KodoSettings, KodoConfigError> {
        validate(cli)
    }
}

/// The ordinal from `RUSTQUEUE_KODO_GATEWAY_ORDINAL`, else from the `POD_NAME` suffix.
pub fn parse_ordinal(
    explicit: Option<&str>,
    pod_name: Option<&str>,
) -> Result<u8, KodoConfigError> {
    let (source, raw) = match (explicit.map(str::trim), pod_name.map(str::trim)) {
        (Some(v), _) if !v.is_empty() => ("RUSTQUEUE_KODO_GATEWAY_ORDINAL", v),
        (_, Some(pod)) if !pod.is_empty() => (
            "POD_NAME",
            pod.rsplit_once('-').map(|(_, suffix)| suffix).unwrap_or(""),
        ),
        _ => return Err(KodoConfigError::NoOrdinal),
    };
    let bad = || KodoConfigError::BadOrdinal {
        from: source,
        value: if source == "POD_NAME" {
            pod_name.unwrap_or_default().to_string()
        } else {
            raw.to_string()
        },
    };
    let valid_digits = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit());
    match raw.parse::<u8>() {
        Ok(n) if valid_digits && n <= 2 => Ok(n),
        _ => Err(bad()),
    }
}

/// The most bytes one command may hold while it is read and published: the largest of an
/// IDENTIFY (body, parsed copy and reply), an MPUB (body plus per-entry bookkeeping) and
/// one message.
pub fn worst_case_working_set(max_message: u64, max_body: u64) -> u64 {
    let identify = 3 * CONTROL_BODY_BYTES + 4096;
    let mpub = max_body + u64::from(MAX_MPUB_MESSAGES) * MPUB_ENTRY_OVERHEAD;
    identify.max(mpub).max(max_message)
}

/// The Kodo rules; [`Cli::validate`] applies the standard ones.
pub fn validate(cli: &Cli) -> Result<KodoSettings, KodoConfigError> {
    if cli.kodo_cleanup_enabled {
        return Err(KodoConfigError::CleanupEnabled);
    }
    let ordinal = parse_ordinal(cli.kodo_gateway_ordinal.as_deref(), cli.pod_name.as_deref())?;
    let exact = [
        (
            "RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES",
            cli.max_message_bytes,
            MAX_MESSAGE_BYTES,
        ),
        (
            "RUSTQUEUE_GATEWAY_MAX_BODY_BYTES",
            cli.max_body_bytes,
            MAX_BODY_BYTES,
        ),
    ];
    for (name, value, want) in exact {
        if value != want {
            return Err(KodoConfigError::Limit { name, value, want });
        }
    }
    let need = worst_case_working_set(cli.max_message_bytes, cli.max_body_bytes);
    if cli.max_inflight_bytes < need {
        return Err(KodoConfigError::InflightBelowWorkingSet {
            inflight: cli.max_inflight_bytes,
            need,
        });
    }
    if cli.http_address.port() != HTTP_PORT {
        return Err(KodoConfigError::HttpPort(cli.http_address.port()));
    }
    Ok(KodoSettings { ordinal })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use clap::Parser as _;

    #[test]
    fn ordinal_comes_from_the_variable_else_the_pod_name_suffix() {
        let bad = |from, value: &str| {
            Err(KodoConfigError::BadOrdinal {
                from,
                value: value.into(),
            })
        };
        let env = "RUSTQUEUE_KODO_GATEWAY_ORDINAL";
        type Case = (
            Option<&'static str>,
            Option<&'static str>,
            Result<u8, KodoConfigError>,
        );
        let cases: &[Case] = &[
            (Some("0"), None, Ok(0)),
            (Some("2"), Some("q-kodo-gateway-1"), Ok(2)),
            (Some(" 1 "), None, Ok(1)),
            (None, Some("q-kodo-gateway-2"), Ok(2)),
            (Some(""), Some("q-kodo-gateway-0"), Ok(0)),
            (None, Some("queue-1"), Ok(1)),
            (Some("3"), None, bad(env, "3")),
            (Some("-1"), None, bad(env, "-1")),
            (Some("+1"), None, bad(env, "+1")),
            (Some("one"), Some("q-kodo-gateway-1"), bad(env, "one")),
            (
                None,
                Some("q-kodo-gateway-3"),
                bad("POD_NAME", "q-kodo-gateway-3"),
            ),
            (
                None,
                Some("q-kodo-gateway-"),
                bad("POD_NAME", "q-kodo-gateway-"),
            ),
            (None, Some("gateway"), bad("POD_NAME", "gateway")),
            (
                None,
                Some("q-kodo-gateway-01x"),
                bad("POD_NAME", "q-kodo-gateway-01x"),
            ),
            (None, None, Err(KodoConfigError::NoOrdinal)),
            (Some(" "), Some(""), Err(KodoConfigError::NoOrdinal)),
        ];
        for (explicit, pod, want) in cases {
            assert_eq!(
                parse_ordinal(*explicit, *pod),
                *want,
                "{explicit:?} {pod:?}"
            );
        }
    }

    #[test]
    fn the_worst_case_working_set_is_the_largest_mpub() {
        let mib = 1024 * 1024;
        assert_eq!(
            worst_case_working_set(100 * mib, 128 * mib),
            128 * mib + 65_536 * 128
        );
        assert_eq!(worst_case_working_set(1, 1), 1 + 65_536 * 128);
        assert_eq!(worst_case_working_set(1, 0), 65_536 * 128);
        assert_eq!(worst_case_working_set(100 * mib, 10), 100 * mib);
    }

    /// The operator's rendering with `extra` flags added or replacing its values.
    fn kodo(extra: &[&str]) -> Result<(Config, KodoSettings), KodoConfigError> {
        let mut flags: Vec<(&str, Option<&str>)> = vec![
            ("--kodo-compatibility-enabled", None),
            ("--kodo-gateway-ordinal", Some("1")),
            ("--max-message-bytes", Some("104857600")),
            ("--max-body-bytes", Some("134217728")),
            ("--max-inflight-bytes", Some("536870912")),
        ];
        let mut rest = extra.iter();
        while let Some(flag) = rest.next() {
            let value = if flag.ends_with("-enabled") {
                None
            } else {
                rest.next().copied()
            };
            match flags.iter_mut().find(|(f, _)| f == flag) {
                Some(slot) => slot.1 = value,
                None => flags.push((flag, value)),
            }
        }
        let mut args = vec!["gw"];
        for (f, v) in flags {
            args.push(f);
            args.extend(v);
        }
        let cli = Cli::try_parse_from(args).unwrap();
        let settings = validate(&cli)?;
        Ok((cli.validate().expect("the standard rules pass"), settings))
    }

    #[test]
    fn the_operators_rendering_is_valid_with_a_60_second_grace() {
        let (c, settings) = kodo(&[]).unwrap();
        assert_eq!(settings, KodoSettings { ordinal: 1 });
        assert_eq!(c.shutdown_grace, std::time::Duration::from_secs(60));
        let (c, _) = kodo(&["--shutdown-grace-seconds", "5"]).unwrap();
        assert_eq!(c.shutdown_grace, std::time::Duration::from_secs(5));
    }

    #[test]
    fn kodo_startup_validation_refuses_each_rule() {
        let cases: &[(&[&str], KodoConfigError)] = &[
            (&["--kodo-cleanup-enabled"], KodoConfigError::CleanupEnabled),
            (
                &["--kodo-gateway-ordinal", "5"],
                KodoConfigError::BadOrdinal {
                    from: "RUSTQUEUE_KODO_GATEWAY_ORDINAL",
                    value: "5".into(),
                },
            ),
            (
                &["--max-message-bytes", "20971520"],
                KodoConfigError::Limit {
                    name: "RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES",
                    value: 20_971_520,
                    want: 104_857_600,
                },
            ),
            (
                &[
                    "--max-body-bytes",
                    "134217727",
                    "--max-message-bytes",
                    "1000",
                ],
                KodoConfigError::Limit {
                    name: "RUSTQUEUE_GATEWAY_MAX_MESSAGE_BYTES",
                    value: 1000,
                    want: 104_857_600,
                },
            ),
            (
                &["--max-body-bytes", "134217000"],
                KodoConfigError::Limit {
                    name: "RUSTQUEUE_GATEWAY_MAX_BODY_BYTES",
                    value: 134_217_000,
                    want: 134_217_728,
                },
            ),
            (
                &["--max-inflight-bytes", "142606335"],
                KodoConfigError::InflightBelowWorkingSet {
                    inflight: 142_606_335,
                    need: 142_606_336,
                },
            ),
            (
                &["--http-address", "127.0.0.1:8080"],
                KodoConfigError::HttpPort(8080),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(kodo(args).unwrap_err(), *want, "{args:?}");
        }
        assert!(kodo(&["--max-inflight-bytes", "142606336"]).is_ok());
        let no_ordinal = Cli::try_parse_from([
            "gw",
            "--kodo-compatibility-enabled",
            "--max-message-bytes",
            "104857600",
            "--max-body-bytes",
            "134217728",
        ]);
        let e = validate(&no_ordinal.unwrap()).unwrap_err();
        assert_eq!(e, KodoConfigError::NoOrdinal);
        assert!(e.to_string().contains("POD_NAME"), "{e}");
    }
}
