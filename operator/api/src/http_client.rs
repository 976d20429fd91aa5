//! The one way a RustQueue crate builds a reqwest [`Client`](reqwest::Client).
//!
//! reqwest 0.13 is compiled with `rustls-no-provider`: its own `rustls` feature would compile
//! aws-lc-rs, a second crypto provider beside ring. Without a provider of its own, a client that
//! reqwest configures itself panics when no process-wide rustls provider is installed. So every
//! client gets a rustls configuration made here, on ring, through
//! `ClientBuilder::tls_backend_preconfigured`, and works in any binary or test whatever was
//! installed. clippy.toml forbids reqwest's own constructors (`Client::new`, `Client::builder`,
//! `reqwest::get`) and its TLS settings, which a preconfigured backend would silently ignore.
//!
//! - [`builder`]: a `ClientBuilder` that trusts the Mozilla roots (webpki-roots, bundled: no CA
//!   file needed on the host). Set timeouts, redirects and proxies on it as usual.
//! - [`builder_with_tls`] and [`tls_config`]: a client that trusts given roots (our own CA) and
//!   may present a client certificate (mTLS).
//! - [`client`] and [`get`]: the defaults, for callers with no settings (mostly tests).

use std::sync::{Arc, LazyLock};

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A client certificate chain and its private key, presented for mTLS.
pub type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The configuration [`builder`] hands reqwest, made once.
static DEFAULT_TLS: LazyLock<rustls::ClientConfig> = LazyLock::new(|| {
    tls_config(mozilla_roots(), None).expect("ring supports rustls' default protocol versions")
});

/// The Mozilla root certificates (webpki-roots), what [`builder`] trusts.
pub fn mozilla_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// A rustls client configuration on the ring provider: rustls' default protocol versions,
/// `roots` trusted, `identity` presented when the server asks for a client certificate, and
/// HTTP/1.1 offered by ALPN (reqwest is built without HTTP/2).
pub fn tls_config(
    roots: RootCertStore,
    identity: Option<Identity>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A reqwest `ClientBuilder` whose TLS is `tls` (build it with [`tls_config`]: any other
/// rustls configuration may carry another provider). reqwest's own TLS settings
/// (`tls_certs_only`, `identity`, `tls_version_min`, ...) do not apply to it; put them in `tls`.
#[allow(
    clippy::disallowed_methods,
    reason = "the one place a reqwest ClientBuilder is made, with TLS on ring"
)]
pub fn builder_with_tls(tls: rustls::ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(tls)
}

/// A reqwest `ClientBuilder` on ring that trusts the Mozilla roots.
pub fn builder() -> reqwest::ClientBuilder {
    builder_with_tls(DEFAULT_TLS.clone())
}

/// A client with reqwest's defaults (no timeout) and [`builder`]'s TLS: what
/// `reqwest::Client::new()` was.
pub fn client() -> reqwest::Client {
    builder()
        .build()
        .expect("a reqwest client with default settings builds")
}

/// One GET with a fresh [`client`]: what `reqwest::get` was.
pub async fn get<U: reqwest::IntoUrl>(url: U) -> reqwest::Result<reqwest::Response> {
    client().get(url).send().await
}

/// Installs ring as the process-wide rustls provider, for what builds its TLS with
/// `rustls::ClientConfig::builder()` (kube, tokio-rustls users): every binary calls it first
/// thing in `main`. Nothing here depends on it. Installing twice is harmless.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_without_a_process_wide_provider() {
        // This test binary installs none: a client reqwest configured itself would panic here.
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        let _ = client();
        let _ = builder()
            .timeout(std::time::Duration::from_secs(1))
            .build()
            .unwrap();
        let _ = builder_with_tls(tls_config(RootCertStore::empty(), None).unwrap())
            .build()
            .unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }

    #[test]
    fn the_default_trusts_the_mozilla_roots_over_http_1_1() {
        assert!(mozilla_roots().len() > 100);
        assert_eq!(DEFAULT_TLS.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
