//! The install paths carry the generated CRDs too: the Helm chart's `crds/` and the OLM bundle's
//! `manifests/` must hold, byte for byte, every CRD `rustqueue-operator crd` prints (`make crds`
//! regenerates them through scripts/install-manifests.py; see docs/install.md).

use std::path::PathBuf;

fn repo_file(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_helm_chart_ships_the_generated_crds() {
    for (file, yaml) in rustqueue_operator::crd_files() {
        assert!(
            repo_file(&format!("config/helm/rustqueue/crds/{file}")) == yaml,
            "config/helm/rustqueue/crds/{file} is stale: run `make crds`"
        );
    }
}

#[test]
fn the_olm_bundle_ships_the_generated_crds() {
    for (file, yaml) in rustqueue_operator::crd_files() {
        assert!(
            repo_file(&format!("olm/manifests/{file}")) == yaml,
            "olm/manifests/{file} is stale: run `make crds`"
        );
    }
}
