//! Names the operator, its rendered objects and the broker agree on: label and annotation
//! keys, ports, mount paths and environment variables.

/// API group of the RustQueue custom resources.
pub const GROUP: &str = "rustqueue.io";
/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "rustqueue-operator";

/// `app.kubernetes.io/name`; always [`APP_NAME`].
pub const NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/instance`; the RustQueue object name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/managed-by`; always [`FIELD_MANAGER`].
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/component`; one of the `COMPONENT_*` values.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// Value of [`NAME`].
pub const APP_NAME: &str = "rustqueue";
/// Component of broker Pods, their StatefulSet, Service and PVCs.
pub const COMPONENT_BROKER: &str = "broker";
/// Component of the runtime ServiceAccount, Role and RoleBinding.
pub const COMPONENT_RUNTIME: &str = "runtime";
/// Component of the discovery Deployment, its Pods, Service and PDB.
pub const COMPONENT_DISCOVERY: &str = "discovery";
/// Component of the producer gateway DaemonSet, its Pods and Service.
pub const COMPONENT_GATEWAY: &str = "gateway";
/// Component of the console Deployment, its Pod, Service, RBAC and NetworkPolicy.
pub const COMPONENT_CONSOLE: &str = "console";
/// Component of the Kodo gateway Pods (guarded by their own NetworkPolicy).
pub const COMPONENT_KODO_GATEWAY: &str = "kodo-gateway";

/// Label of discovery Pods (and key of the discovery Service selector): which publishers
/// `/nodes` lists, `direct` (the brokers) or `kodo` (the Kodo Gateways).
pub const DISCOVERY_PUBLISHER_MODE: &str = "rustqueue.io/discovery-publisher-mode";

/// Pod-template annotation: hash of everything that should roll a broker Pod.
pub const REVISION_ANNOTATION: &str = "rustqueue.io/revision";
/// Default Node label that marks a Node eligible for a broker.
pub const DEFAULT_ELIGIBLE_NODE_SELECTOR: &str = "rustqueue.io/eligible=true";

/// HTTP port of discovery (nsqlookupd's HTTP port).
pub const DISCOVERY_HTTP_PORT: u16 = 4161;
/// NSQ TCP port of a broker.
pub const BROKER_TCP_PORT: u16 = 4150;
/// HTTP port of a broker (NSQ-compatible and `/v1/*` endpoints).
pub const BROKER_HTTP_PORT: u16 = 4151;
/// NSQ TCP port of the producer gateway (producers connect here as to a broker).
pub const GATEWAY_TCP_PORT: u16 = 4150;
/// HTTP port of the producer gateway (`/pub`, `/mpub`, ... forwarded to a broker).
pub const GATEWAY_HTTP_PORT: u16 = 4151;
/// HTTP port of the console (its API, UI, `/healthz` and `/readyz`).
pub const CONSOLE_HTTP_PORT: u16 = 4180;
/// Port of the operator's `/healthz`, `/readyz`, `/metrics`.
pub const OPERATOR_HTTP_PORT: u16 = 8080;

/// Where a broker's PVC is mounted.
pub const DATA_PATH: &str = "/data";
/// Where the broker ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/rustqueue";
/// Key (file name) of the broker TOML in the ConfigMap.
pub const CONFIG_FILE: &str = "rustqueue.toml";
/// Where the auth Secret is mounted; token files are `<dir>/<scope>-token`.
pub const SECRETS_DIR: &str = "/run/secrets/rustqueue";
/// Where the bucket's credentials (`spec.tiering.credentialsSecret`) are mounted in broker
/// Pods: [`TIERING_ACCESS_KEY_FILE`] and [`TIERING_SECRET_KEY_FILE`] under it.
pub const TIERING_SECRETS_DIR: &str = "/run/secrets/rustqueue-tiering";
/// The file holding the access key id, under [`TIERING_SECRETS_DIR`].
pub const TIERING_ACCESS_KEY_FILE: &str = "access-key-id";
/// The file holding the secret access key, under [`TIERING_SECRETS_DIR`].
pub const TIERING_SECRET_KEY_FILE: &str = "secret-access-key";

/// Broker environment variables the operator sets.
pub mod env {
    /// Pod name (fieldRef); the broker derives its node id from the ordinal.
    pub const POD_NAME: &str = "POD_NAME";
    /// Pod namespace (fieldRef).
    pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
    /// Pod IP (fieldRef `status.podIP`); listeners bind to it.
    pub const POD_IP: &str = "POD_IP";
    /// NSQ TCP listen address.
    pub const TCP_ADDRESS: &str = "RUSTQUEUE_TCP_ADDRESS";
    /// HTTP listen address.
    pub const HTTP_ADDRESS: &str = "RUSTQUEUE_HTTP_ADDRESS";
    /// Address advertised to clients.
    pub const BROADCAST_ADDRESS: &str = "RUSTQUEUE_BROADCAST_ADDRESS";
    /// Data directory.
    pub const DATA_PATH: &str = "RUSTQUEUE_DATA_PATH";
    /// Message index cache size.
    pub const MESSAGE_INDEX_CACHE_BYTES: &str = "RUSTQUEUE_MESSAGE_INDEX_CACHE_BYTES";
}

/// The console's environment (docs/console.md): what the operator sets on `<n>-console` and
/// `rustqueue-console` reads.
pub mod console_env {
    /// Listen address, `$(POD_IP):4180` as the operator renders it.
    pub const ADDRESS: &str = "RUSTQUEUE_CONSOLE_ADDRESS";
    /// The RustQueue the console watches (in `POD_NAMESPACE`).
    pub const NAME: &str = "RUSTQUEUE_NAME";
    /// File holding the console token (re-read on every use).
    pub const TOKEN_FILE: &str = "RUSTQUEUE_CONSOLE_TOKEN_FILE";
    /// Seconds between collections (1..5).
    pub const POLL_SECONDS: &str = "RUSTQUEUE_CONSOLE_POLL_SECONDS";
    /// Minutes of rate history (1..60).
    pub const HISTORY_MINUTES: &str = "RUSTQUEUE_CONSOLE_HISTORY_MINUTES";
    /// Seconds between full catalog fetches of an unchanged broker (poll..300).
    pub const CATALOG_REFRESH_SECONDS: &str = "RUSTQUEUE_CONSOLE_CATALOG_REFRESH_SECONDS";
    /// The brokers' HTTP port.
    pub const BROKER_HTTP_PORT: &str = "RUSTQUEUE_BROKER_HTTP_PORT";
    /// `true` opens the management API (the RustQueue's `consoleManagementEnabled`).
    pub const MANAGEMENT_ENABLED: &str = "RUSTQUEUE_CONSOLE_MANAGEMENT_ENABLED";
    /// Seconds an unlocked management session lasts (60..1800).
    pub const MANAGEMENT_UNLOCK_SECONDS: &str = "RUSTQUEUE_CONSOLE_MANAGEMENT_UNLOCK_SECONDS";
    /// Seconds a deleted topic or channel stays fenced (60..86400).
    pub const TOMBSTONE_SECONDS: &str = "RUSTQUEUE_CONSOLE_TOMBSTONE_SECONDS";
}
