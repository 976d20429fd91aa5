//! The rendered NetworkPolicies against the objects they guard on the cluster: the testbed does
//! not enforce policies, so the step checks what an enforcing CNI would act on, the selectors
//! and ports, against the Pods the API server actually holds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::ListParams;

use crate::cluster::{Cluster, NS, RQ};

/// Label-selector semantics (matchLabels and the four matchExpressions operators).
fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_label = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expression = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => panic!("unknown selector operator {other}"),
        }
    });
    by_label && by_expression
}

/// Every Pod of the instance (brokers, discovery, gateways, the console and any probe left) is
/// selected by exactly one of its three policies; the brokers' and the console's policies open
/// exactly the ports their containers declare.
pub async fn network_policies_guard_every_pod_of_the_instance(c: &Cluster) {
    c.ready(3).await;
    let api: Api<NetworkPolicy> = Api::namespaced(c.client.clone(), NS);
    let policies: BTreeMap<String, NetworkPolicy> = api
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RQ}")))
        .await
        .expect("list NetworkPolicies")
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    let names: Vec<&String> = policies.keys().collect();
    assert_eq!(
        names,
        [
            &format!("{RQ}-broker-ingress"),
            &format!("{RQ}-console"),
            &format!("{RQ}-internal")
        ],
        "the instance's NetworkPolicies"
    );
    let pods: Vec<Pod> = c
        .pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RQ}")))
        .await
        .expect("list Pods")
        .items;
    let components: std::collections::BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get("app.kubernetes.io/component")
        })
        .map(String::as_str)
        .collect();
    for component in ["broker", "discovery", "gateway", "console"] {
        assert!(
            components.contains(component),
            "no {component} Pod among {components:?}"
        );
    }
    for pod in &pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let guarding: Vec<&String> = policies
            .iter()
            .filter(|(_, p)| {
                let sel = p.spec.as_ref().and_then(|s| s.pod_selector.clone());
                selects(&sel.unwrap_or_default(), &labels)
            })
            .map(|(n, _)| n)
            .collect();
        assert_eq!(guarding.len(), 1, "Pod {name} is guarded by {guarding:?}");
        let own_policy = match labels
            .get("app.kubernetes.io/component")
            .map(String::as_str)
        {
            Some("broker") => format!("{RQ}-broker-ingress"),
            Some("console") => format!("{RQ}-console"),
            _ => continue,
        };
        assert_eq!(guarding[0], &own_policy, "Pod {name}");
        let declared: Vec<i32> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .map(|p| p.container_port)
            .collect();
        let rule = &policies[guarding[0]]
            .spec
            .as_ref()
            .unwrap()
            .ingress
            .clone()
            .unwrap()[0];
        let opened: Vec<i32> = rule
            .ports
            .iter()
            .flatten()
            .map(|p| match &p.port {
                Some(IntOrString::Int(n)) => *n,
                other => panic!("a {own_policy} port is not a number: {other:?}"),
            })
            .collect();
        assert_eq!(
            opened, declared,
            "Pod {name}: opened ports vs declared ports"
        );
    }
}
