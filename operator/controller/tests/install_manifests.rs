//! The install paths carry the generated CRD too: the Helm chart's `crds/` and the OLM bundle's
//! `manifests/` must be byte for byte what `rustqueue-operator crd` prints (`make crds`
//! regenerates them through scripts/install-manifests.py; see docs/install.md).

use std::path::PathBuf;

fn repo_file(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_helm_chart_ships_the_generated_crd() {
    assert!(
        repo_file("config/helm/rustqueue/crds/rustqueue.io_rustqueues.yaml")
            == rustqueue_operator::crdgen::crd_yaml(),
        "config/helm/rustqueue/crds is stale: run `make crds`"
    );
}

#[test]
fn the_olm_bundle_ships_the_generated_crd() {
    assert!(
        repo_file("olm/manifests/rustqueue.io_rustqueues.yaml")
            == rustqueue_operator::crdgen::crd_yaml(),
        "olm/manifests is stale: run `make crds`"
    );
}
