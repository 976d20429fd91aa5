#!/usr/bin/env python3
"""Checks that the release version, the workspace's (Cargo.toml), is what every part says:
each binary's --version, the Helm chart's version and appVersion, the OLM bundle's CSV and the
images' org.opencontainers.image.version label. Prints one line per part; exit 1 on a mismatch.

Usage: scripts/release-versions.py --version V --bin-dir DIR --images DIR
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINS = ["rustqueued", "rustqueue-operator", "rustqueue-discovery", "rustqueue-gateway",
        "rustqueuectl", "rustqueue-console"]


def binary_versions(bin_dir):
    for b in BINS:
        exe = pathlib.Path(bin_dir) / b
        if not exe.exists():
            yield b, None, f"{exe} is missing"
            continue
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30)
        m = re.search(r"\b(\d+\.\d+\.\d+\S*)", out.stdout + out.stderr)
        yield b, m.group(1) if m else None, (out.stdout + out.stderr).strip()


def yaml_field(path, key):
    for line in path.read_text().splitlines():
        m = re.match(rf"^\s*{key}:\s*\"?([^\"\s]+)\"?\s*$", line)
        if m:
            return m.group(1)
    return None


def image_labels(images):
    for t in sorted(pathlib.Path(images).glob("*.tar")):
        with tarfile.open(t) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))
            config = json.load(tar.extractfile(manifest[0]["Config"]))
        labels = (config.get("config") or {}).get("Labels") or {}
        yield t.name, labels.get("org.opencontainers.image.version")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", required=True)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--images", required=True)
    a = ap.parse_args()
    want = a.version
    found = []
    for b, v, raw in binary_versions(a.bin_dir):
        found.append((f"binary {b} --version", v, raw))
    chart = ROOT / "config/helm/rustqueue/Chart.yaml"
    found.append(("chart version", yaml_field(chart, "version"), str(chart)))
    found.append(("chart appVersion", yaml_field(chart, "appVersion"), str(chart)))
    for csv in sorted((ROOT / "olm/manifests").glob("*.clusterserviceversion.yaml")):
        text = csv.read_text()
        m = re.search(r"^  version: (\S+)$", text, re.M)
        found.append((f"OLM {csv.name} spec.version", m.group(1) if m else None, str(csv)))
    images = list(image_labels(a.images))
    if not images:
        found.append(("images", None, f"no image tarball in {a.images}"))
    for name, v in images:
        found.append((f"image {name} label", v, name))
    bad = 0
    for what, v, detail in found:
        ok = v == want
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {v}" + ("" if ok else f" (want {want}; {detail})"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
