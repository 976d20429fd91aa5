//! Starting one container run as a local process:
//!
//! `unshare --mount --uts --propagation private -- sh -c <MOUNT_SCRIPT> ... -- argv...`
//!
//! The shell sets the Pod's hostname, bind-mounts each volume (and the termination-message
//! file) at its mountPath inside the private mount namespace, then `exec`s the program, so the
//! process we track *is* the container's main process and every mount disappears with it.
//! Each run is its own process group, so SIGTERM/SIGKILL reach its children too.
//!
//! A container from an OCI image ([`image_command`]) gets its own root filesystem: an overlay
//! of the unpacked image (read-only lower layer, shared) and a per-run upper directory, with
//! `/proc`, a minimal `/dev`, `/sys` (read-only), the volumes, `/etc/hosts` and
//! `/etc/hostname` mounted in it; `readOnlyRootFilesystem` remounts it read-only; then
//! `setpriv` (bounding set, `no_new_privs`) and `chroot --userspec --groups` exec the
//! entrypoint inside it as the container's user. No shell from the image is used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use k8s_openapi::api::core::v1::Container;

use super::volumes::Sources;

/// Mounts the volumes then execs the program. Arguments: hostname, mount count, then per
/// mount `src dst ro|rw`, then `--` and the argv.
const MOUNT_SCRIPT: &str = r#"set -e
hostname "$1" 2>/dev/null || true
shift
n=$1
shift
while [ "$n" -gt 0 ]; do
  [ -e "$2" ] || mkdir -p "$2"
  mount --bind "$1" "$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi
  shift 3
  n=$((n - 1))
done
shift
exec "$@"
"#;

/// Builds the container's root, mounts into it, then execs the rest. Arguments: hostname,
/// lower, upper, work, root, `ro|rw`, mount count, per mount `src dst ro|rw`, `--`, argv.
const IMAGE_SCRIPT: &str = r#"set -e
hostname "$1" 2>/dev/null || true
root=$5 ro=$6
mount -t overlay overlay -o "lowerdir=$2,upperdir=$3,workdir=$4" "$root"
shift 6
mkdir -p "$root/proc" "$root/dev" "$root/sys" "$root/etc"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,mode=0755,size=65536k tmpfs "$root/dev"
for d in null zero full random urandom tty; do
  touch "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir -p "$root/dev/shm"
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=65536k shm "$root/dev/shm"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys" 2>/dev/null || true
n=$1
shift
while [ "$n" -gt 0 ]; do
  t="$root$2"
  if [ -d "$1" ]; then
    mkdir -p "$t"
  else
    mkdir -p "$(dirname "$t")"
    [ -e "$t" ] || : >"$t"
  fi
  mount --bind "$1" "$t"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$t"; fi
  shift 3
  n=$((n - 1))
done
if [ "$ro" = ro ]; then mount -o remount,bind,ro "$root"; fi
shift
exec "$@"
"#;

/// The per-run root filesystem of an image container.
#[derive(Debug, Clone)]
pub(crate) struct RootFs {
    /// The unpacked image (overlay lower layer).
    pub(crate) image: PathBuf,
    /// Per-run directory holding `upper`, `work` and the mountpoint `root`.
    pub(crate) run_dir: PathBuf,
    pub(crate) read_only: bool,
}

impl RootFs {
    pub(crate) fn root(&self) -> PathBuf {
        self.run_dir.join("root")
    }
}

/// Builds the command for one run of an image container; `exec` is the privilege-dropping
/// prefix (`setpriv ... -- chroot ... <root>`) followed by the argv inside the image.
pub(crate) fn image_command(
    hostname: &str,
    rootfs: &RootFs,
    mounts: &[Mount],
    exec: &[String],
    env: &BTreeMap<String, String>,
    log: std::fs::File,
) -> Result<tokio::process::Command, String> {
    let (upper, work, root) = (
        rootfs.run_dir.join("upper"),
        rootfs.run_dir.join("work"),
        rootfs.root(),
    );
    for d in [&upper, &work, &root] {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let mut cmd = unshare_sh(IMAGE_SCRIPT, hostname);
    cmd.arg(&rootfs.image)
        .arg(&upper)
        .arg(&work)
        .arg(&root)
        .arg(if rootfs.read_only { "ro" } else { "rw" });
    finish(cmd, mounts, exec, env, "/", log)
}

/// `unshare --mount --uts` running `/bin/sh -c <script> sh <hostname> ...` (the caller adds
/// the script's other arguments).
fn unshare_sh(script: &str, hostname: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("unshare");
    cmd.args(["--mount", "--uts", "--propagation", "private", "--"])
        .args(["/bin/sh", "-c", script, "sh", hostname]);
    cmd
}

/// Adds the mounts (count, then `src dst ro|rw` each), `--` and `argv` to an [`unshare_sh`]
/// command and gives it only `env`, `dir`, no stdin and `log` as stdout and stderr, in a
/// process group of its own.
fn finish(
    mut cmd: tokio::process::Command,
    mounts: &[Mount],
    argv: &[String],
    env: &BTreeMap<String, String>,
    dir: &str,
    log: std::fs::File,
) -> Result<tokio::process::Command, String> {
    let log2 = log.try_clone().map_err(|e| format!("log file: {e}"))?;
    cmd.arg(mounts.len().to_string());
    for m in mounts {
        cmd.arg(&m.src)
            .arg(&m.dst)
            .arg(if m.read_only { "ro" } else { "rw" });
    }
    cmd.arg("--").args(argv);
    cmd.env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .kill_on_drop(false);
    Ok(cmd)
}

/// One bind mount inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub(crate) src: PathBuf,
    pub(crate) dst: PathBuf,
    pub(crate) read_only: bool,
}

/// The container's mounts, parents before children (like the kubelet's sort by path depth).
pub(crate) fn mounts(
    c: &Container,
    sources: &Sources,
    termination_file: &Path,
) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        let base = sources
            .get(&vm.name)
            .ok_or_else(|| format!("volumeMount {:?} names no volume of the Pod", vm.name))?;
        let src = match vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                if sub.split('/').any(|p| p == "..") {
                    return Err(format!("subPath {sub:?} must not contain '..'"));
                }
                let p = base.join(sub);
                if !p.exists() {
                    std::fs::create_dir_all(&p).map_err(|e| format!("subPath {sub:?}: {e}"))?;
                }
                p
            }
            None => base.clone(),
        };
        out.push(Mount {
            src,
            dst: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only == Some(true),
        });
    }
    let term_path = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    out.push(Mount {
        src: termination_file.to_path_buf(),
        dst: PathBuf::from(term_path),
        read_only: false,
    });
    out.sort_by_key(|m| m.dst.components().count());
    Ok(out)
}

/// Builds the command for one run; the caller spawns it.
pub(crate) fn command(
    hostname: &str,
    mounts: &[Mount],
    argv: &[String],
    env: &BTreeMap<String, String>,
    working_dir: Option<&str>,
    log: std::fs::File,
) -> Result<tokio::process::Command, String> {
    let cmd = unshare_sh(MOUNT_SCRIPT, hostname);
    finish(cmd, mounts, argv, env, working_dir.unwrap_or("/"), log)
}

/// Argv that runs `argv` inside the mount and UTS namespaces of process `pid` (exec probes,
/// preStop hooks); for an image container also in its root directory, working directory and
/// user (`as_user`: uid, gid).
pub(crate) fn nsenter(pid: u32, as_user: Option<(u32, u32)>, argv: &[String]) -> Vec<String> {
    let mut out = vec![
        "nsenter".to_string(),
        "-t".into(),
        pid.to_string(),
        "-m".into(),
        "-u".into(),
    ];
    if let Some((uid, gid)) = as_user {
        out.extend([
            "-r".into(),
            "-w".into(),
            "-S".into(),
            uid.to_string(),
            "-G".into(),
            gid.to_string(),
        ]);
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_ordered_parents_first_and_honour_sub_path_and_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/app/conf", "readOnly": true},
                {"name": "data", "mountPath": "/etc", "subPath": "x"},
            ]
        }))
        .unwrap();
        let sources = Sources::from([
            ("cfg".to_string(), tmp.path().join("cfg")),
            ("data".to_string(), tmp.path().join("data")),
        ]);
        let m = mounts(&c, &sources, &tmp.path().join("term")).unwrap();
        assert_eq!(m[0].dst, PathBuf::from("/etc"));
        assert_eq!(m[0].src, tmp.path().join("data/x"));
        assert!(tmp.path().join("data/x").is_dir(), "subPath is created");
        assert_eq!(m.last().unwrap().dst, PathBuf::from("/etc/app/conf"));
        assert!(m.last().unwrap().read_only);
        assert!(m.iter().any(|m| m.dst == Path::new("/dev/termination-log")));
    }

    #[test]
    fn unknown_volume_names_are_rejected() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]
        }))
        .unwrap();
        assert!(mounts(&c, &Sources::new(), Path::new("/tmp/t")).is_err());
    }
}
