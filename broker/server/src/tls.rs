//! TLS for the TCP `tls_v1` upgrade (rustls): server certificate, optional client CA (mTLS),
//! and the client certificate's subject CN for AUTH.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
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

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn pem_error(path: &Path, e: &rustls::pki_types::pem::Error) -> TlsError {
    TlsError::Read {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    }
}

fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(path, &e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty(format!(
            "{} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            TlsError::Empty(format!("{} holds no PEM private key", path.display()))
        }
        e => pem_error(path, &e),
    })
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

/// The PEM files a TLS configuration names, as read at one moment.
#[derive(Clone, PartialEq, Eq)]
struct Material {
    certificate: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Material {
    fn read(cfg: &TlsConfig) -> Result<Material, TlsError> {
        Ok(Material {
            certificate: read_file(&cfg.certificate_file)?,
            key: read_file(&cfg.private_key_file)?,
            client_ca: cfg.client_ca_file.as_deref().map(read_file).transpose()?,
        })
    }
}

fn build(cfg: &TlsConfig, m: &Material) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(protocol_versions(cfg.min_version.as_deref()))
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match (&cfg.client_ca_file, &m.client_ca) {
        (Some(path), Some(pem)) => {
            let mut roots = RootCertStore::empty();
            for c in parse_certs(path, pem)? {
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
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(
            parse_certs(&cfg.certificate_file, &m.certificate)?,
            parse_key(&cfg.private_key_file, &m.key)?,
        )
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    Ok(Arc::new(config))
}

/// The TLS configuration in force, rebuilt when its files change: cert-manager renews a
/// certificate in place and the kubelet swaps the mounted Secret's files, so a broker must not
/// need a restart to serve the new one. [`TlsReloader::current`] is read per handshake;
/// established connections keep the configuration they started with. A change that does not
/// build (a key that does not match, a half-written file) keeps the old configuration and is
/// logged; the next check tries again.
pub struct TlsReloader {
    cfg: TlsConfig,
    state: std::sync::RwLock<(Material, Arc<rustls::ServerConfig>)>,
}

/// How often the files are compared with what was loaded.
pub const TLS_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl TlsReloader {
    /// Loads the files once; fails as startup should when they are unusable.
    pub fn load(cfg: &TlsConfig) -> Result<TlsReloader, TlsError> {
        let m = Material::read(cfg)?;
        let built = build(cfg, &m)?;
        Ok(TlsReloader {
            cfg: cfg.clone(),
            state: std::sync::RwLock::new((m, built)),
        })
    }

    /// The configuration new handshakes use.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Re-reads the files; rebuilds and swaps the configuration when they changed. `Ok(true)`
    /// when a new configuration is in force.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let m = Material::read(&self.cfg)?;
        if self.state.read().unwrap_or_else(|e| e.into_inner()).0 == m {
            return Ok(false);
        }
        let built = build(&self.cfg, &m)?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = (m, built);
        Ok(true)
    }

    /// Checks the files every [`TLS_RELOAD_INTERVAL`] until `stop` turns true.
    pub fn watch(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::select! {
                    _ = stop.wait_for(|v| *v) => return,
                    () = tokio::time::sleep(TLS_RELOAD_INTERVAL) => {}
                }
                let me = self.clone();
                match tokio::task::spawn_blocking(move || me.reload_if_changed()).await {
                    Ok(Ok(true)) => {
                        failing = false;
                        tracing::info!(certificate = %self.cfg.certificate_file.display(), "TLS certificate, key or client CA changed: new handshakes use them");
                    }
                    Ok(Ok(false)) => failing = false,
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        tracing::warn!(
                            "TLS files changed but cannot be used, keeping the previous ones: {e}"
                        );
                    }
                    _ => {}
                }
            }
        });
    }
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
