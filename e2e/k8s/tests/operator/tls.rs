//! Client TLS renewed in place (docs/install.md, "TLS for clients, renewed by cert-manager"):
//! the Secret named by `spec.clientTlsSecretName` gets a new certificate, as cert-manager's
//! renewal writes it; the kubelet swaps the mounted files and every broker serves the new
//! certificate to new handshakes, with no restart, no rollout, and a session from before the
//! renewal still working.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use rustqueue_e2e::steps::figure;
use rustqueue_e2e::{Poll, eventually};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::cluster::{Cluster, LONG, NS, RQ};
use crate::rollout::{broker_uids, brokers, pod_revisions, rolled_to, template};

/// The Secret the RustQueue names for client TLS.
const SECRET: &str = "queue-tls";
/// The name every broker's certificate covers (`<pod>.<headless Service>.<ns>.svc`).
const WILDCARD: &str = "*.queue-brokers.rustqueue-system.svc";
/// How long a renewal may take to reach new handshakes: the kubelet's Secret resync (about
/// 30 s on the testbed, up to a minute or two on real clusters), the broker's 1 s check, slack.
const RENEWAL: Duration = Duration::from_secs(120);
/// A limit on each read and handshake, so a broker that stops answering fails the step.
const IO: Duration = Duration::from_secs(10);
/// NSQ's frame type of a response.
const FRAME_RESPONSE: u32 = 0;

/// A CA standing in for cert-manager's issuer.
struct Ca(rcgen::CertifiedIssuer<'static, rcgen::KeyPair>);

/// A broker certificate: PEM for the Secret, DER to compare with what a handshake presents.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("CA key");
        Ca(rcgen::CertifiedIssuer::self_signed(params, key).expect("self-signed CA"))
    }

    /// A new certificate with a new key for every broker name, as a renewal issues it.
    fn issue(&self) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let cert = rcgen::CertificateParams::new(vec![WILDCARD.to_owned()])
            .expect("leaf params")
            .signed_by(&key, &self.0)
            .expect("leaf signed by the CA");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.0.der().clone()).expect("CA as a root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(cfg)
    }
}

/// Writes Secret `queue-tls` (type `kubernetes.io/tls`) with `leaf` and the CA, by server-side
/// apply: creates it the first time, replaces its contents after.
async fn put_secret(c: &Cluster, ca: &Ca, leaf: &Leaf) {
    let data = BTreeMap::from([
        (
            "tls.crt".to_owned(),
            ByteString(leaf.cert_pem.clone().into()),
        ),
        (
            "tls.key".to_owned(),
            ByteString(leaf.key_pem.clone().into()),
        ),
        ("ca.crt".to_owned(), ByteString(ca.0.pem().into())),
    ]);
    let mut secret = Secret {
        data: Some(data),
        type_: Some("kubernetes.io/tls".into()),
        ..Secret::default()
    };
    secret.metadata.name = Some(SECRET.into());
    Api::<Secret>::namespaced(c.client.clone(), NS)
        .patch(
            SECRET,
            &PatchParams::apply("rustqueue-e2e").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("applying the TLS Secret");
}

/// Reads one NSQ frame: its type and body.
async fn read_frame<S: AsyncRead + Unpin>(io: &mut S) -> (u32, Vec<u8>) {
    let read = async {
        let size = io.read_u32().await?;
        let kind = io.read_u32().await?;
        let mut body = vec![0; usize::try_from(size.saturating_sub(4)).unwrap_or(0)];
        io.read_exact(&mut body).await?;
        Ok::<_, std::io::Error>((kind, body))
    };
    tokio::time::timeout(IO, read)
        .await
        .expect("a frame within 10 s")
        .expect("reading a frame")
}

/// The next response that is not a heartbeat.
async fn answer<S: AsyncRead + Unpin>(io: &mut S) -> (u32, Vec<u8>) {
    loop {
        let f = read_frame(io).await;
        if f != (FRAME_RESPONSE, b"_heartbeat_".to_vec()) {
            return f;
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(io: &mut S, bytes: &[u8]) {
    io.write_all(bytes).await.expect("writing to the broker");
    io.flush().await.expect("flushing to the broker");
}

/// An NSQ connection to `pod` upgraded with IDENTIFY `tls_v1`, verified against the CA under
/// the broker's DNS name; returns it with the certificate the broker presented.
async fn tls_session(c: &Cluster, ca: &Ca, pod: &str) -> (TlsStream<TcpStream>, Vec<u8>) {
    let ip = c.pod_ip(pod).await;
    let mut tcp = tokio::time::timeout(IO, TcpStream::connect((ip.as_str(), 4150)))
        .await
        .expect("connecting within 10 s")
        .expect("connecting to the broker's NSQ port");
    send(&mut tcp, b"  V2").await;
    let identify = br#"{"feature_negotiation":true,"tls_v1":true,"user_agent":"rustqueue-e2e"}"#;
    let mut cmd = b"IDENTIFY\n".to_vec();
    cmd.extend_from_slice(&u32::try_from(identify.len()).unwrap_or(0).to_be_bytes());
    cmd.extend_from_slice(identify);
    send(&mut tcp, &cmd).await;
    let (kind, body) = answer(&mut tcp).await;
    let negotiated: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    assert!(
        kind == FRAME_RESPONSE && negotiated["tls_v1"] == true,
        "{pod} does not offer tls_v1: {}",
        String::from_utf8_lossy(&body)
    );
    let name = format!("{pod}.{RQ}-brokers.{NS}.svc");
    let server_name = rustls::pki_types::ServerName::try_from(name).expect("a DNS name");
    let connect = tokio_rustls::TlsConnector::from(ca.client_config()).connect(server_name, tcp);
    let mut tls = tokio::time::timeout(IO, connect)
        .await
        .expect("a TLS handshake within 10 s")
        .expect("a TLS handshake verified by the CA");
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .expect("the broker presents a certificate");
    assert_eq!(answer(&mut tls).await, (FRAME_RESPONSE, b"OK".to_vec()));
    (tls, presented)
}

/// Each broker Pod's UID with its broker container's restart count.
async fn broker_processes(c: &Cluster) -> BTreeMap<String, (String, i32)> {
    let uids = broker_uids(c).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), NS);
    let mut out = BTreeMap::new();
    for (name, uid) in uids {
        let restarts = pods
            .get(&name)
            .await
            .ok()
            .and_then(|p| p.status)
            .and_then(|s| s.container_statuses)
            .and_then(|cs| cs.into_iter().find(|s| s.name == "broker"))
            .map_or(-1, |s| s.restart_count);
        out.insert(name, (uid, restarts));
    }
    out
}

/// The brokers serve client TLS from Secret `queue-tls` (one rollout to mount it); then the
/// Secret's contents are replaced with a new certificate and key: within the kubelet's resync
/// every broker presents the new certificate to a new handshake, while a TLS session opened
/// before the renewal still publishes, and no broker Pod was replaced or restarted.
pub async fn a_renewed_client_certificate_reaches_new_handshakes_without_a_restart(c: &Cluster) {
    let ca = Ca::new();
    let first = ca.issue();
    put_secret(c, &ca, &first).await;
    let (before, _) = template(c).await;
    c.patch_spec_ok(&format!(r#"{{"clientTlsSecretName":"{SECRET}"}}"#));
    let revision = eventually("a broker revision naming the TLS Secret", LONG, || async {
        match template(c).await.0 {
            Some(r) if Some(&r) != before.as_ref() => Poll::Done(r),
            other => Poll::Saw(other),
        }
    })
    .await;
    rolled_to(c, &revision, LONG).await;

    let mut old = BTreeMap::new();
    for pod in brokers() {
        let (session, presented) = tls_session(c, &ca, &pod).await;
        assert!(presented == first.der, "{pod} presents another certificate");
        old.insert(pod, session);
    }
    let processes = broker_processes(c).await;
    let revisions = pod_revisions(c).await;

    let renewed = ca.issue();
    put_secret(c, &ca, &renewed).await;
    let replaced = Instant::now();
    // Each poll the old sessions send a NOP first, as a client answering heartbeats would.
    let state = tokio::sync::Mutex::new((old, brokers()));
    eventually(
        "every broker presenting the renewed certificate",
        RENEWAL,
        || async {
            let mut guard = state.lock().await;
            let (old, waiting) = &mut *guard;
            for session in old.values_mut() {
                send(session, b"NOP\n").await;
            }
            let mut still = Vec::new();
            for pod in std::mem::take(waiting) {
                if tls_session(c, &ca, &pod).await.1 != renewed.der {
                    still.push(pod);
                }
            }
            *waiting = still;
            if waiting.is_empty() {
                Poll::Done(())
            } else {
                Poll::Saw(format!("{waiting:?} still present the old certificate"))
            }
        },
    )
    .await;
    let (mut old, _) = state.into_inner();
    figure(
        "client TLS Secret replaced -> every broker presents the new certificate",
        replaced.elapsed().as_secs_f64(),
        "s",
    );

    for (pod, session) in &mut old {
        let body = b"published over a session from before the renewal";
        let mut cmd = b"PUB tls-renewal\n".to_vec();
        cmd.extend_from_slice(&u32::try_from(body.len()).unwrap_or(0).to_be_bytes());
        cmd.extend_from_slice(body);
        send(session, &cmd).await;
        let (kind, got) = answer(session).await;
        assert_eq!(
            (kind, got.as_slice()),
            (FRAME_RESPONSE, &b"OK"[..]),
            "{pod}: the session from before the renewal: {}",
            String::from_utf8_lossy(&got)
        );
    }
    assert_eq!(
        broker_processes(c).await,
        processes,
        "a broker Pod was replaced or its broker restarted by the renewal"
    );
    assert_eq!(
        pod_revisions(c).await,
        revisions,
        "the renewal started a rollout"
    );
}
