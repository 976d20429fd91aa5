//! The headless broker Service `<n>-brokers`: stable DNS per broker Pod for the StatefulSet,
//! published before readiness so discovery and peers can reach a draining broker.

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use rustqueue_api::labels;

use super::pod::service_port;
use super::{Owner, names, selector_labels};

/// The headless Service.
pub fn headless_service(owner: &Owner<'_>) -> Service {
    Service {
        metadata: owner.metadata(
            &names::brokers_service(owner.name),
            labels::COMPONENT_BROKER,
        ),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(owner.name, labels::COMPONENT_BROKER)),
            ports: Some(vec![
                service_port("tcp", labels::BROKER_TCP_PORT),
                service_port("http", labels::BROKER_HTTP_PORT),
            ]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::owner;
    use super::*;

    #[test]
    fn the_broker_service_is_headless_and_publishes_unready_pods() {
        let s = headless_service(&owner());
        assert_eq!(s.metadata.name.as_deref(), Some("queue-brokers"));
        let spec = s.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports: Vec<i32> = spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [4150, 4151]);
        assert_eq!(
            spec.selector.unwrap()["app.kubernetes.io/component"],
            "broker"
        );
    }
}
