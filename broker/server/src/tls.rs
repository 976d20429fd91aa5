//! TLS for the TCP `tls_v1` upgrade (rustls): server certificate, optional client CA (mTLS),
//! and the client certificate's subject CN for AUTH.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::config::TlsConfig;

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// I/O error.
        source: std::io::Error,
    },
    /// The file holds no usable item.
    #[error("{0}")]
    Empty(String),
    /// rustls refused the material.
    #[error("TLS configuration rejected: {0}")]
    Rustls(String),
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let f = File::open(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut BufReader::new(f))
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty(format!(
            "{} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let f = File::open(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    rustls_pemfile::private_key(&mut BufReader::new(f))
        .map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })?
        .ok_or_else(|| TlsError::Empty(format!("{} holds no PEM private key", path.display())))
}

/// The protocol versions from `tls1.2` on (unset) or `tls1.3` only; validation refuses the
/// rest, so anything else is treated as unset here.
pub fn protocol_versions(
    min_version: Option<&str>,
) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min_version {
        Some("tls1.3") => &TLS13_ONLY,
        _ => rustls::DEFAULT_VERSIONS,
    }
}

/// Builds the rustls server configuration (shared by the TCP `tls_v1` upgrade and HTTPS).
pub fn server_config(cfg: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(protocol_versions(cfg.min_version.as_deref()))
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &cfg.client_ca_file {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca)? {
                roots.add(c).map_err(|e| TlsError::Rustls(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if cfg.require_client_certificate {
                verifier.build()
            } else {
                verifier.allow_unauthenticated().build()
            }
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(
            read_certs(&cfg.certificate_file)?,
            read_key(&cfg.private_key_file)?,
        )
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    Ok(Arc::new(config))
}

/// The subject common name of a DER certificate, if present.
///
/// The subject follows the issuer inside TBSCertificate, so the last `id-at-commonName`
/// attribute before the extensions is the subject's CN.
pub fn common_name(der: &[u8]) -> Option<String> {
    const OID_CN: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    let mut found = None;
    let mut i = 0;
    while i + OID_CN.len() + 2 <= der.len() {
        if der[i..i + OID_CN.len()] == OID_CN {
            let tag = der[i + 5];
            let len = usize::from(der[i + 6]);
            let start = i + 7;
            if matches!(tag, 0x0c | 0x13 | 0x14 | 0x16) && len < 0x80 && start + len <= der.len() {
                found = std::str::from_utf8(&der[start..start + len])
                    .ok()
                    .map(str::to_owned);
            }
            i = start;
        } else {
            i += 1;
        }
    }
    found
}
