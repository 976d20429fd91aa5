//! Certificates and keys for one control plane: a cluster CA, the apiserver's serving
//! certificate, client certificates for the admin (`system:masters`), the controller-manager and
//! the scheduler, and the service-account signing key pair. All generated fresh per testbed.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A PEM certificate with its PEM private key.
#[derive(Clone, Debug)]
pub struct CertPair {
    /// The certificate (PEM).
    pub cert: String,
    /// Its private key (PKCS#8 PEM).
    pub key: String,
}

/// Everything the control plane needs to run with TLS, client-certificate authentication and
/// service-account tokens.
#[derive(Debug)]
pub struct Pki {
    /// The cluster CA; it signs every other certificate and is the `--client-ca-file`.
    pub ca: CertPair,
    /// The apiserver's serving certificate (127.0.0.1, localhost, the `kubernetes` Service).
    pub apiserver: CertPair,
    /// Client certificate in the `system:masters` group (used by tests and the kubelet).
    pub admin: CertPair,
    /// Client certificate for `system:kube-controller-manager`.
    pub controller_manager: CertPair,
    /// Client certificate for `system:kube-scheduler`.
    pub scheduler: CertPair,
    /// Client certificate the apiserver presents to the kubelet (logs proxy).
    pub apiserver_kubelet_client: CertPair,
    /// Serving certificate of the process kubelet's HTTPS endpoint.
    pub kubelet_serving: CertPair,
    /// Service-account token signing key (PKCS#8 PEM, ECDSA P-256).
    pub sa_key: String,
    /// Its public half (PEM), given to the apiserver to verify tokens.
    pub sa_pub: String,
}

fn name(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

fn pki_err(e: rcgen::Error) -> Error {
    Error::Pki(e.to_string())
}

impl Pki {
    /// Generates a fresh CA and every certificate signed by it.
    pub fn generate() -> Result<Self, Error> {
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = name("rustqueue-testbed-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(pki_err)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_err)?;
        let ca = CertPair {
            cert: ca_cert.pem(),
            key: ca_key.serialize_pem(),
        };
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_sans = |names: &[&str]| -> Result<Vec<SanType>, Error> {
            let mut sans = vec![
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            ];
            for n in names {
                sans.push(SanType::DnsName(
                    (*n).try_into().map_err(|e: rcgen::Error| pki_err(e))?,
                ));
            }
            Ok(sans)
        };
        let leaf = |cn: &str,
                    org: Option<&str>,
                    server_sans: Option<Vec<SanType>>|
         -> Result<CertPair, Error> {
            let mut p = CertificateParams::default();
            p.distinguished_name = name(cn, org);
            p.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            match server_sans {
                Some(sans) => {
                    p.subject_alt_names = sans;
                    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                }
                None => p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth],
            }
            let key = KeyPair::generate().map_err(pki_err)?;
            let cert = p.signed_by(&key, &issuer).map_err(pki_err)?;
            Ok(CertPair {
                cert: cert.pem(),
                key: key.serialize_pem(),
            })
        };

        let apiserver = leaf(
            "kube-apiserver",
            None,
            Some(serving_sans(&[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ])?),
        )?;
        let admin = leaf("rustqueue-testbed-admin", Some("system:masters"), None)?;
        let controller_manager = leaf("system:kube-controller-manager", None, None)?;
        let scheduler = leaf("system:kube-scheduler", None, None)?;
        let apiserver_kubelet_client = leaf(
            "kube-apiserver-kubelet-client",
            Some("system:masters"),
            None,
        )?;
        let kubelet_serving = leaf("testbed-kubelet", None, Some(serving_sans(&["localhost"])?))?;

        let sa = KeyPair::generate().map_err(pki_err)?;
        Ok(Pki {
            ca,
            apiserver,
            admin,
            controller_manager,
            scheduler,
            apiserver_kubelet_client,
            kubelet_serving,
            sa_key: sa.serialize_pem(),
            sa_pub: sa.public_key_pem(),
        })
    }
}
