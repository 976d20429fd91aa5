//! The one error type of the testbed library.

use std::path::PathBuf;

/// Why starting, driving or inspecting the testbed failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control-plane binaries are not built.
    #[error(
        "control-plane binaries not found in {0}: run `scripts/deps.sh k8s` (or `make deps`) first, \
         or point RUSTQUEUE_K8S_BIN at a directory holding etcd and kube-apiserver"
    )]
    MissingBinaries(PathBuf),
    /// Generating certificates or keys failed.
    #[error("generating certificates: {0}")]
    Pki(String),
    /// A file operation in the testbed's work directory failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Starting a control-plane process failed.
    #[error("starting {name}: {source}")]
    Spawn {
        /// The component.
        name: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A component did not become ready in time; its log tail is attached.
    #[error("{name} did not become ready within {secs}s; last log lines:\n{log_tail}")]
    NotReady {
        /// The component.
        name: String,
        /// How long we waited.
        secs: u64,
        /// The end of its log file.
        log_tail: String,
    },
    /// A control-plane process exited early; its log tail is attached.
    #[error("{name} exited early ({status}); last log lines:\n{log_tail}")]
    Exited {
        /// The component.
        name: String,
        /// Its exit status.
        status: String,
        /// The end of its log file.
        log_tail: String,
    },
    /// An external tool the testbed needs is not installed.
    #[error("{tool} not found at {path}: run `{install}`")]
    MissingTool {
        /// The tool.
        tool: &'static str,
        /// Where it was expected.
        path: PathBuf,
        /// The command that installs it.
        install: &'static str,
    },
    /// Pushing an image into the testbed's registry failed.
    #[error("image {reference}: {message}")]
    Image {
        /// The image reference.
        reference: String,
        /// What went wrong.
        message: String,
    },
    /// Building the kube client from the generated kubeconfig failed.
    #[error("kube client: {0}")]
    Kubeconfig(String),
    /// Setting up the testbed's private network namespace failed.
    #[error("testbed network: {0}")]
    Network(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The requested log does not exist.
    #[error("no log for {0}")]
    NoLog(String),
    /// Waiting for a condition timed out.
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: String,
        /// How long.
        secs: u64,
    },
}

impl Error {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
