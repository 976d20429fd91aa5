//! The kubelet's atomic writer for the file-backed volumes (configMap, secret, downwardAPI,
//! projected). Each version of a volume's files goes into a fresh hidden directory
//! `..<stamp>`; the symlink `..data` is swapped to it with one `rename`; each visible name is a
//! symlink through `..data`:
//!
//! ```text
//!   tls.crt -> ..data/tls.crt      ..data -> ..1764668400.123456789/    (old ..<stamp> removed)
//! ```
//!
//! A reader sees the old set of files or the new one, never a mix, which is what a renewed
//! certificate and its key rely on (cert-manager rewrites both in one Secret update). Only
//! entries inside the volume's directory change, so a container that mounted the directory
//! sees the update while it runs; a `subPath` mount holds the file it bound, as with a real
//! kubelet.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};
use std::time::{SystemTime, UNIX_EPOCH};

/// One file of a volume: its bytes and its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct File {
    pub(crate) data: Vec<u8>,
    pub(crate) mode: u32,
}

/// A volume's files by their path inside it.
pub(crate) type Payload = BTreeMap<String, File>;

/// The symlink naming the directory in force.
const DATA: &str = "..data";
/// The symlink `..data` is replaced with (renamed over it).
const DATA_TMP: &str = "..data_tmp";

fn io(what: &str, path: &Path, e: &std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Checks a payload path as the API server's validation does: relative, no `..` element, not
/// starting with `..` (those names are the writer's own).
fn checked(rel: &str) -> Result<&str, String> {
    let p = Path::new(rel);
    let plain = p.components().all(|c| matches!(c, Component::Normal(_)));
    if rel.is_empty() || !plain || rel.starts_with("..") {
        return Err(format!("invalid path {rel:?} in a volume"));
    }
    Ok(rel)
}

/// The first element of each path: the names a reader sees at the top of the volume.
fn visible_names(payload: &Payload) -> Result<BTreeSet<String>, String> {
    payload
        .keys()
        .map(|k| {
            let top = checked(k)?.split('/').next().unwrap_or(k);
            Ok(top.to_owned())
        })
        .collect()
}

/// Whether `version` holds exactly `payload`'s paths with its bytes (modes are left out: the
/// fsGroup pass changes them after every write).
fn holds(version: &Path, payload: &Payload) -> bool {
    let mut found = BTreeSet::new();
    let mut stack = vec![version.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            return false;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(version) {
                found.insert(rel.to_string_lossy().into_owned());
            }
        }
    }
    found.len() == payload.len()
        && payload
            .iter()
            .all(|(k, f)| std::fs::read(version.join(k)).ok().as_deref() == Some(&f.data[..]))
}

/// A new, unused `..<seconds>.<nanoseconds>` directory name under `dir`.
fn new_version_name(dir: &Path) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let base = format!("..{}.{:09}", now.as_secs(), now.subsec_nanos());
    let mut name = base.clone();
    let mut n = 0;
    while dir.join(&name).exists() {
        n += 1;
        name = format!("{base}_{n}");
    }
    name
}

/// Makes `dir` hold `payload`, atomically for readers; `Ok(false)` when it already did.
pub(crate) fn write(dir: &Path, payload: &Payload) -> Result<bool, String> {
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, &e))?;
    let visible = visible_names(payload)?;
    let current = std::fs::read_link(dir.join(DATA)).ok();
    if let Some(cur) = &current
        && holds(&dir.join(cur), payload)
    {
        return Ok(false);
    }

    let version = new_version_name(dir);
    let vdir = dir.join(&version);
    std::fs::create_dir(&vdir).map_err(|e| io("creating", &vdir, &e))?;
    for (rel, f) in payload {
        let path = vdir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("creating", parent, &e))?;
        }
        std::fs::write(&path, &f.data).map_err(|e| io("writing", &path, &e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode))
            .map_err(|e| io("chmod", &path, &e))?;
    }

    // The swap: one rename of a symlink over `..data`.
    let tmp = dir.join(DATA_TMP);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&version, &tmp).map_err(|e| io("symlink", &tmp, &e))?;
    std::fs::rename(&tmp, dir.join(DATA)).map_err(|e| io("renaming", &tmp, &e))?;

    for name in &visible {
        let link = dir.join(name);
        let target = Path::new(DATA).join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(&target) {
            continue;
        }
        remove_entry(&link)?;
        std::os::unix::fs::symlink(&target, &link).map_err(|e| io("symlink", &link, &e))?;
    }
    // What the new version no longer holds, and the old version itself.
    for e in std::fs::read_dir(dir).map_err(|e| io("reading", dir, &e))? {
        let e = e.map_err(|e| io("reading", dir, &e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let old_version = name.starts_with("..") && name != DATA && name != version;
        if old_version || (!name.starts_with("..") && !visible.contains(&name)) {
            remove_entry(&e.path())?;
        }
    }
    Ok(true)
}

/// Removes a file, symlink or directory tree; absent is fine.
fn remove_entry(path: &Path) -> Result<(), String> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let r = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    r.map_err(|e| io("removing", path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str)]) -> Payload {
        files
            .iter()
            .map(|(k, v)| {
                let f = File {
                    data: v.as_bytes().to_vec(),
                    mode: 0o644,
                };
                ((*k).to_owned(), f)
            })
            .collect()
    }

    fn read(dir: &Path, rel: &str) -> String {
        std::fs::read_to_string(dir.join(rel)).unwrap()
    }

    fn hidden_versions(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("..") && n != DATA
            })
            .count()
    }

    #[test]
    fn files_are_symlinks_through_data_and_a_new_version_swaps_them_together() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tls");
        assert!(
            write(
                &dir,
                &payload(&[("tls.crt", "cert 1"), ("tls.key", "key 1")])
            )
            .unwrap()
        );
        assert_eq!(
            std::fs::read_link(dir.join("tls.crt")).unwrap(),
            Path::new("..data/tls.crt")
        );
        let first = std::fs::read_link(dir.join(DATA)).unwrap();

        assert!(
            write(
                &dir,
                &payload(&[("tls.crt", "cert 2"), ("tls.key", "key 2")])
            )
            .unwrap()
        );
        assert_eq!(
            (read(&dir, "tls.crt"), read(&dir, "tls.key")),
            ("cert 2".into(), "key 2".into())
        );
        assert_ne!(std::fs::read_link(dir.join(DATA)).unwrap(), first);
        assert!(
            !dir.join(&first).exists(),
            "the old version is removed after the swap"
        );
        assert_eq!(hidden_versions(&dir), 1);
        assert!(!dir.join(DATA_TMP).exists());
    }

    #[test]
    fn an_unchanged_payload_is_not_rewritten() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cfg");
        let p = payload(&[("a", "1"), ("sub/b", "2")]);
        assert!(write(&dir, &p).unwrap());
        let version = std::fs::read_link(dir.join(DATA)).unwrap();
        assert!(!write(&dir, &p).unwrap());
        assert_eq!(std::fs::read_link(dir.join(DATA)).unwrap(), version);
        assert_eq!(read(&dir, "sub/b"), "2");
    }

    #[test]
    fn a_key_that_leaves_the_payload_leaves_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cfg");
        write(&dir, &payload(&[("a", "1"), ("gone", "x")])).unwrap();
        write(&dir, &payload(&[("a", "1")])).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("gone")).is_err());
        assert_eq!(read(&dir, "a"), "1");
    }

    #[test]
    fn paths_that_could_escape_or_collide_with_the_writers_names_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["../x", "/etc/x", "..data", "a/../b", ""] {
            assert!(write(tmp.path(), &payload(&[(bad, "x")])).is_err(), "{bad}");
        }
    }
}
