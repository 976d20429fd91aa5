//! The image table: how the process kubelet turns a container image reference into a local
//! program. There is no container runtime; an image is a directory of executables plus an
//! optional default entrypoint (the Dockerfile `ENTRYPOINT`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One "image": a directory whose executables a container's `command[0]` is resolved in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Where `command[0]` (when relative) is looked up.
    pub dir: PathBuf,
    /// Used when the container has no `command` (like a Dockerfile ENTRYPOINT).
    pub entrypoint: Vec<String>,
}

impl Image {
    /// An image made of the executables in `dir`, without a default entrypoint.
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        Image {
            dir: dir.into(),
            entrypoint: Vec::new(),
        }
    }

    /// Sets the default entrypoint (used when a container gives no `command`).
    pub fn entrypoint<S: Into<String>>(mut self, argv: impl IntoIterator<Item = S>) -> Self {
        self.entrypoint = argv.into_iter().map(Into::into).collect();
        self
    }
}

/// Image references (exactly as written in Pod specs, e.g. `rustqueue:dev`) to local images.
#[derive(Clone, Debug, Default)]
pub struct ImageTable {
    images: BTreeMap<String, Image>,
}

/// Why a container's program could not be resolved (shown as the Waiting reason/message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveError {
    /// Kubelet-style reason (`ErrImagePull`, `CreateContainerError`).
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl ImageTable {
    /// Adds (or replaces) an image.
    pub fn insert(&mut self, reference: impl Into<String>, image: Image) {
        self.images.insert(reference.into(), image);
    }

    /// Looks an image reference up.
    pub fn get(&self, reference: &str) -> Option<&Image> {
        self.images.get(reference)
    }

    /// The full argv for a container: Kubernetes' command/args rules applied to the image's
    /// entrypoint, with `argv[0]` resolved to an executable path.
    pub fn resolve(
        &self,
        reference: &str,
        command: &[String],
        args: &[String],
    ) -> Result<Vec<String>, ResolveError> {
        let image = self.get(reference).ok_or_else(|| ResolveError {
            reason: "ErrImagePull",
            message: format!(
                "image {reference:?} is not in the testbed image table (known: {})",
                self.images.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        })?;
        let mut argv: Vec<String> = if command.is_empty() {
            image.entrypoint.clone()
        } else {
            command.to_vec()
        };
        argv.extend(args.iter().cloned());
        let Some(first) = argv.first_mut() else {
            return Err(ResolveError {
                reason: "CreateContainerError",
                message: format!("no command given and image {reference:?} has no entrypoint"),
            });
        };
        let program = Path::new(first.as_str());
        let resolved = if program.is_absolute() {
            program.to_path_buf()
        } else {
            let in_image = image.dir.join(program);
            if in_image.exists() {
                in_image
            } else if let Some(on_path) = which(first) {
                on_path
            } else {
                return Err(ResolveError {
                    reason: "CreateContainerError",
                    message: format!(
                        "executable {first:?} not found in image dir {} nor on PATH",
                        image.dir.display()
                    ),
                });
            }
        };
        *first = resolved.to_string_lossy().into_owned();
        Ok(argv)
    }
}

fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return None;
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ImageTable {
        let mut t = ImageTable::default();
        t.insert(
            "tools:1",
            Image::dir("/bin").entrypoint(["sh", "-c", "echo hi"]),
        );
        t
    }

    #[test]
    fn command_replaces_the_entrypoint_and_args_are_appended() {
        let argv = table()
            .resolve("tools:1", &["true".into()], &["x".into()])
            .unwrap();
        assert!(argv[0].ends_with("/true"), "{argv:?}");
        assert_eq!(argv[1], "x");
    }

    #[test]
    fn entrypoint_is_used_when_no_command_is_given() {
        let argv = table().resolve("tools:1", &[], &[]).unwrap();
        assert!(argv[0].ends_with("/sh"), "{argv:?}");
        assert_eq!(&argv[1..], ["-c", "echo hi"]);
    }

    #[test]
    fn unknown_image_is_an_image_pull_error() {
        let err = table()
            .resolve("nope:1", &["true".into()], &[])
            .unwrap_err();
        assert_eq!(err.reason, "ErrImagePull");
    }

    #[test]
    fn missing_executable_is_a_create_container_error() {
        let err = table()
            .resolve("tools:1", &["no-such-binary-xyz".into()], &[])
            .unwrap_err();
        assert_eq!(err.reason, "CreateContainerError");
    }
}
