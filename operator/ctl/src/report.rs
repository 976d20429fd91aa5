//! `report`: a support bundle. Everything is collected into memory as named files, every value
//! of the auth Secret is redacted from every file ([`Bundle::redact`]), then one tar.gz is
//! written. What could not be collected is listed in `errors.txt` instead of failing the bundle.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;

/// What replaces a Secret value.
pub const REDACTED: &str = "<redacted>";

/// Named files of the bundle, in the order they were added.
#[derive(Debug, Default)]
pub struct Bundle {
    /// `(path inside the bundle, contents)`.
    pub files: Vec<(String, Vec<u8>)>,
    /// What could not be collected.
    pub errors: Vec<String>,
}

impl Bundle {
    /// Adds a file.
    pub fn add(&mut self, path: impl Into<String>, contents: impl Into<Vec<u8>>) {
        self.files.push((path.into(), contents.into()));
    }

    /// Adds `value` as YAML.
    pub fn add_yaml<T: serde::Serialize>(&mut self, path: &str, value: &T) {
        match serde_norway::to_string(value) {
            Ok(y) => self.add(path, y),
            Err(e) => self.errors.push(format!("{path}: {e}")),
        }
    }

    /// Adds the result of collecting `path`, or notes why it failed.
    pub fn add_or_note(&mut self, path: &str, got: anyhow::Result<Vec<u8>>) {
        match got {
            Ok(b) => self.add(path, b),
            Err(e) => self.errors.push(format!("{path}: {e:#}")),
        }
    }

    /// Replaces every occurrence of each secret (longest first) in every file.
    pub fn redact(&mut self, secrets: &[String]) {
        for (_, contents) in &mut self.files {
            for s in secrets.iter().filter(|s| !s.is_empty()) {
                *contents = replace_all(contents, s.as_bytes(), REDACTED.as_bytes());
            }
        }
    }

    /// Writes the bundle (with `errors.txt` when something failed) as `<root>/<path>` entries
    /// of a tar.gz; returns the entry names.
    pub fn write(mut self, root: &str, out: &Path) -> anyhow::Result<Vec<String>> {
        if !self.errors.is_empty() {
            let text = self.errors.join("\n") + "\n";
            self.add("errors.txt", text);
        }
        let file =
            std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        let mtime = jiff::Timestamp::now().as_second().max(0).unsigned_abs();
        let mut names = Vec::new();
        for (path, contents) in &self.files {
            let name = format!("{root}/{path}");
            let mut header = tar::Header::new_gnu();
            header.set_size(contents.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(mtime);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, &name, contents.as_slice())
                .with_context(|| format!("adding {name} to {}", out.display()))?;
            names.push(name);
        }
        let mut gz = tar
            .into_inner()
            .with_context(|| format!("writing {}", out.display()))?;
        gz.flush()?;
        gz.finish()
            .with_context(|| format!("writing {}", out.display()))?;
        Ok(names)
    }
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn every_secret_value_is_redacted_from_every_file() {
        let mut b = Bundle::default();
        b.add(
            "logs/a.log",
            "token=s3cr3t-admin and s3cr3t-admin again; s3cr3t",
        );
        b.add("x.yaml", "nothing here");
        b.redact(&["s3cr3t-admin".into(), "s3cr3t".into()]);
        assert_eq!(
            b.files[0].1,
            b"token=<redacted> and <redacted> again; <redacted>"
        );
        assert_eq!(b.files[1].1, b"nothing here");
    }

    #[test]
    fn the_bundle_is_a_tar_gz_with_errors_listed() {
        let dir = std::env::temp_dir().join(format!("rqctl-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("r.tar.gz");
        let mut b = Bundle::default();
        b.add("rustqueue.yaml", "kind: RustQueue\n");
        b.add_or_note("brokers/q-0/stats.json", Err(anyhow::anyhow!("refused")));
        let names = b.write("report", &out).unwrap();
        assert_eq!(names, ["report/rustqueue.yaml", "report/errors.txt"]);
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap());
        let mut tar = tar::Archive::new(gz);
        let mut seen = Vec::new();
        for e in tar.entries().unwrap() {
            let mut e = e.unwrap();
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            seen.push((e.path().unwrap().display().to_string(), s));
        }
        assert_eq!(seen[1].1, "brokers/q-0/stats.json: refused\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
