#!/usr/bin/env python3
"""Every series the alert rules and the Grafana dashboard name must be one our binaries export.

What counts as exported:
- rustqueued: a real broker started on loopback (temporary data directory, per-topic and
  per-channel series on), given a topic, a channel and a message, then its /metrics read;
- rustqueue-discovery: a real one in static mode pointed at that broker, its /metrics read;
- rustqueue-gateway: a real one using that discovery, its /metrics read;
- the operator (it needs an API server to start): the metric names registered in its metrics
  source, as string literals.

A name referenced as `<histogram>_bucket`, `_sum` or `_count` counts through its `# TYPE` line.
Exit 1 names every referenced series that nothing exports (a renamed or removed metric).

Usage: check-metric-refs.py --rustqueued BIN --discovery BIN --gateway BIN
                            [--save-expositions DIR] [COMPONENT=]FILE...
A FILE prefixed with a component (rustqueued, rustqueue-discovery, rustqueue-gateway, operator) may name
only that component's series; an unprefixed one any of them.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\brustqueue_[a-z0-9_]+\b")
# Registrations in source files the check cannot run: `"rustqueue_..."` string literals.
LITERAL = re.compile(r'"(rustqueue_[a-z0-9_]+)"')
SOURCES = {"operator": [ROOT / "operator/controller/src/metrics.rs"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=2):
    req = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def wait_for(url, proc, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before serving {url}")
        try:
            return http("GET", url)
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not serve {url} within {seconds}s")


def exposition_names(text):
    """Series names of a Prometheus text exposition, plus histogram/summary base names."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def scrape_binaries(rustqueued, discovery, gateway, save_dir=None):
    exported = {}

    def keep(component, text):
        exported[component] = exposition_names(text)
        if save_dir:
            Path(save_dir, f"{component}.prom").write_text(text)

    with tempfile.TemporaryDirectory(prefix="metric-refs-") as tmp:
        tcp, web, lookup = free_port(), free_port(), free_port()
        gw_tcp, gw_web = free_port(), free_port()
        config = Path(tmp, "rustqueue.toml")
        # No disk-pressure throttling: the data directory is on the shared host disk, and a
        # nearly full build machine must not turn this check into a 429 (as the compat
        # harnesses do).
        config.write_text(
            "[metrics]\ndetailed_queue_metrics = true\n"
            "[storage]\ndisk_high_watermark_percent = 100\n"
            "disk_low_watermark_percent = 99\nmin_free_bytes = 1\n"
        )
        env = dict(
            os.environ,
            RUSTQUEUE_CONFIG=str(config),
            RUSTQUEUE_DATA_PATH=str(Path(tmp, "data")),
            RUSTQUEUE_TCP_ADDRESS=f"127.0.0.1:{tcp}",
            RUSTQUEUE_HTTP_ADDRESS=f"127.0.0.1:{web}",
            RUST_LOG="warn",
        )
        procs = []
        try:
            broker = subprocess.Popen([rustqueued], env=env, stdout=subprocess.DEVNULL)
            procs.append(broker)
            base = f"http://127.0.0.1:{web}"
            wait_for(f"{base}/ping", broker, "rustqueued")
            http("POST", f"{base}/topic/create?topic=refs")
            http("POST", f"{base}/channel/create?topic=refs&channel=c")
            http("POST", f"{base}/pub?topic=refs", b"hello")
            keep("rustqueued", http("GET", f"{base}/metrics"))

            disco = subprocess.Popen(
                [discovery, "--address", f"127.0.0.1:{lookup}",
                 "--static-brokers", f"127.0.0.1:{web}"],
                env=dict(os.environ, RUST_LOG="warn"),
                stdout=subprocess.DEVNULL,
            )
            procs.append(disco)
            text = wait_for(f"http://127.0.0.1:{lookup}/metrics", disco, "rustqueue-discovery")
            keep("rustqueue-discovery", text)

            gw = subprocess.Popen(
                [gateway, "--tcp-address", f"127.0.0.1:{gw_tcp}",
                 "--http-address", f"127.0.0.1:{gw_web}",
                 "--discovery-urls", f"http://127.0.0.1:{lookup}"],
                env=dict(os.environ, RUST_LOG="warn"),
                stdout=subprocess.DEVNULL,
            )
            procs.append(gw)
            text = wait_for(f"http://127.0.0.1:{gw_web}/metrics", gw, "rustqueue-gateway")
            keep("rustqueue-gateway", text)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    return exported


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rustqueued", required=True)
    ap.add_argument("--discovery", required=True)
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--save-expositions", metavar="DIR",
                    help="also write each binary's /metrics text to DIR/<component>.prom")
    ap.add_argument("files", nargs="+", help="[COMPONENT=]FILE: rules and dashboards to check")
    args = ap.parse_args()

    exported = scrape_binaries(args.rustqueued, args.discovery, args.gateway, args.save_expositions)
    for component, files in SOURCES.items():
        exported[component] = {m for f in files for m in LITERAL.findall(f.read_text())}
    for component, names in exported.items():
        ours = {n for n in names if n.startswith("rustqueue_")}
        if not ours:
            sys.exit(f"found no rustqueue_ series for {component}: the check itself is broken")
        print(f"{component}: {len(ours)} series names")
    everything = set().union(*exported.values())

    missing = []
    for arg in args.files:
        component, _, f = arg.rpartition("=")
        if component and component not in exported:
            sys.exit(f"unknown component {component!r} (one of {', '.join(exported)})")
        known = exported[component] if component else everything
        refs = set(NAME.findall(Path(f).read_text()))
        if not refs:
            sys.exit(f"{f} names no rustqueue_ series: the check itself is broken")
        bad = [
            r for r in sorted(refs)
            if r not in known and re.sub(r"_(bucket|sum|count)$", "", r) not in known
        ]
        missing += [(f, r, component) for r in bad]
        print(f"{f}: {len(refs)} series names, {len(refs) - len(bad)} exported")
    for f, ref, by in missing:
        who = f"{by} does not export" if by else "no RustQueue binary exports"
        print(f"error: {f} references {ref}, which {who}", file=sys.stderr)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
