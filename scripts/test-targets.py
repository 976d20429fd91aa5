#!/usr/bin/env python3
"""Which cargo test targets each stage of `make test` runs (scripts/test-suite.sh).

Every stage builds nothing of its own: `make build` compiles every test target of the workspace
once (`cargo test --workspace --all-features --no-run`), and each stage runs its share with the
same package selection and features, so nothing is compiled twice. A test target that needs
more than a compiler (official nsqd, a Kubernetes control plane, root and /dev/fuse) is claimed
below by the stage that provides it; every other test target, every library's and binary's
unit tests and the doc tests are `unit`'s. A new file under some crate's `tests/` therefore runs
in `unit` unless it is claimed here, by name or with its whole package ("*": the engine's,
discovery's and the gateway's go to `service-test`).

Usage: scripts/test-targets.py STAGE   prints the cargo target options of STAGE
       scripts/test-targets.py --check  fails when a claim names no target, or when one target
                                        name belongs to two stages (`--test NAME` selects every
                                        package's target of that name)
       ... --record FILE                reads `cargo test --no-run --message-format=json` on
                                        stdin and writes each test executable to FILE
       ... --exe FILE TARGET KIND       prints the executable FILE records for the target named
                                        TARGET of KIND (lib, bin, test)
"""

import json
import subprocess
import sys
from collections import defaultdict

# stage -> {package: [test target names] or "*" for all of the package's test targets but
# those some stage names one by one}
CLAIMS = {
    # official nsqd v1.3.0 as the peer (scripts/deps.sh nsqd)
    "bench-test": {"rustqueue-bench": ["against_nsqd"]},
    # versitygw started by each test (scripts/deps.sh versitygw): the bucket layer, the engine's
    # uploads and read-through, and rustqueued with [tiering]. A stage of its own so that these
    # minutes of mostly waiting (retries, outages) run beside `unit`, not after it. The
    # minute without the bucket is tier-outage-test's (below).
    "tier-test": {
        "rustqueue-tier": ["bucket_round_trip", "bucket_damage", "bucket_faults"],
        "rustqueue-engine": [
            "tiering_uploads", "tiering_outage", "tiering_restore", "tiering_read_through",
            "tiering_rollback_fence", "tiering_deleted_topic", "tiering_checkpoint_age",
        ],
        "rustqueue-server": [
            "storage_restore", "storage_verify_remote", "tiering_small_volume",
            "tiering_full_volume", "config_tiering",
        ],
    },
    # The minute without the bucket: it publishes durably one message at a time at 500/s and
    # checks 90 % of that rate, so it runs once the clusters and the power cuts have ended
    # (scripts/test-suite.sh, AFTER); beside `unit` and four clusters it fell to 40 % of it.
    "tier-outage-test": {"rustqueue-server": ["tiering_bucket_down"]},
    # The engine's, discovery's and the gateway's integration tests (each starts brokers or
    # discovery services of its own on loopback): about half of what `unit` ran, in a lane
    # of their own beside it, so the two halves end together instead of one after the other.
    # `protective_eviction` names a target of both the engine and the server.
    "service-test": {
        "rustqueue-engine": "*",
        "rustqueue-discovery": "*",
        "rustqueue-gateway": "*",
        "rustqueue-server": ["protective_eviction"],
    },
    # root and /dev/fuse: the lazy FUSE file system, and rustqueued cut on it
    "powercut-test": {"rustqueue-powercut": "*", "rustqueue-server": ["power_cut"]},
    # the testbed's Kubernetes control plane, root (network namespaces, mounts)
    "e2e-testbed": {"rustqueue-testbed": "*"},
    # the testbed plus the images: the operator and Kodo scenarios, the Helm install
    "e2e-operator": {"rustqueue-e2e": ["operator"]},
    "e2e-install": {"rustqueue-e2e": ["install"]},
    # Debian's Chromium and the console's built pages (make console-ui)
    "console-browser": {"rustqueue-console": ["pages"]},
}


# Stages whose tests need nothing but the test build: a target of one of them builds its
# package's binaries before the images do (image-bins below).
COMPILER_ONLY = {"unit", "service-test"}

# The packages whose binaries the OCI images hold.
IMAGE_PACKAGES = {"rustqueue-server", "rustqueue-operator", "rustqueue-discovery", "rustqueue-gateway",
                  "rustqueue-console"}
# Binaries the scenarios run themselves from $RUSTQUEUE_E2E_BIN_DIR beside the images' (the
# operator scenario drives rustqueuectl as `kubectl rustqueue`); built with them.
SCENARIO_PACKAGES = IMAGE_PACKAGES | {"rustqueue-ctl"}


def test_targets():
    """(package, target name) of every integration test target in the workspace."""
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    members = set(meta["workspace_members"])
    out = []
    for pkg in meta["packages"]:
        if pkg["id"] not in members:
            continue
        for t in pkg["targets"]:
            if "test" in t["kind"]:
                out.append((pkg["name"], t["name"]))
    return sorted(out)


def stage_of(targets):
    """Map each (package, target) to its stage; raise on a claim that names nothing."""
    owner = {}
    named = {(pkg, n) for claims in CLAIMS.values() for pkg, names in claims.items() if names != "*" for n in names}
    for stage, claims in CLAIMS.items():
        for pkg, names in claims.items():
            mine = [t for t in targets if t[0] == pkg and (names == "*" or t[1] in names)]
            wanted = {pkg} if names == "*" else {(pkg, n) for n in names}
            found = {pkg for pkg, _ in mine} if names == "*" else set(mine)
            if found != wanted:
                raise SystemExit(f"test-targets: stage {stage} claims {sorted(wanted - found)}, which no package has")
            for t in mine:
                # "*" takes the package's targets that no stage names one by one
                if names != "*" or t not in named:
                    owner[t] = stage
    for t in targets:
        owner.setdefault(t, "unit")
    return owner


def check(owner):
    stages_of_name = defaultdict(set)
    for (pkg, name), stage in owner.items():
        stages_of_name[name].add(stage)
    clashes = {n: s for n, s in stages_of_name.items() if len(s) > 1}
    if clashes:
        raise SystemExit(
            "test-targets: these test target names belong to several stages, so `--test NAME` "
            f"cannot tell them apart; rename one: {clashes}"
        )


def record(path):
    """Keep every test executable cargo reports (and pass the build's own messages through)."""
    exes = []
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            sys.stdout.write(line)
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
            exes.append(
                {
                    "package_id": msg["package_id"],
                    "target": msg["target"]["name"],
                    "kind": msg["target"]["kind"],
                    "executable": msg["executable"],
                }
            )
        elif msg.get("reason") == "build-finished" and not msg.get("success"):
            raise SystemExit("test-targets: the test build failed (above)")
    with open(path, "w") as f:
        json.dump(exes, f, indent=1)
    print(f"test-targets: {len(exes)} test executables recorded in {path}")


def exe(path, target, kind):
    with open(path) as f:
        exes = json.load(f)
    hits = [e["executable"] for e in exes if e["target"] == target and kind in e["kind"]]
    if len(hits) != 1:
        raise SystemExit(f"test-targets: {len(hits)} {kind} test executables of {target} in {path}; run the build that records it (`make test-build`, or `make e2e-build` for the scenarios)")
    print(hits[0])


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--record":
        return record(sys.argv[2])
    if len(sys.argv) == 5 and sys.argv[1] == "--exe":
        return exe(*sys.argv[2:])
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    owner = stage_of(test_targets())
    check(owner)
    arg = sys.argv[1]
    if arg == "image-bins":
        # the binaries the images hold (and the scenarios run) come with their packages'
        # integration tests
        first = {}
        for (pkg, name) in sorted(owner):
            if pkg in SCENARIO_PACKAGES and owner[(pkg, name)] in COMPILER_ONLY:
                first.setdefault(pkg, name)
        missing = SCENARIO_PACKAGES - first.keys()
        if missing:
            raise SystemExit(f"test-targets: no test target of {sorted(COMPILER_ONLY)} builds the binaries of {sorted(missing)}")
        print(" ".join(f"--test {n}" for n in sorted(first.values())))
        return
    if arg == "--check":
        for stage in ["unit", *CLAIMS]:
            names = sorted({n for (_, n), s in owner.items() if s == stage})
            print(f"{stage}: {len(names)} test targets")
        return
    if arg != "unit" and arg not in CLAIMS:
        raise SystemExit(f"test-targets: unknown stage {arg!r} (unit, {', '.join(CLAIMS)})")
    names = sorted({n for (_, n), s in owner.items() if s == arg})
    opts = ["--lib", "--bins"] if arg == "unit" else []
    print(" ".join(opts + [f"--test {n}" for n in names]))


if __name__ == "__main__":
    main()
