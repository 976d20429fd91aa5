#!/usr/bin/env python3
"""Writes an SPDX 2.3 JSON software bill of materials for the release: the workspace's crates
and every crate they compile in (cargo metadata's resolved graph, normal and build
dependencies, Linux x86_64), each with its version, declared licence and a package URL.

Usage: scripts/sbom.py --version V --out FILE
"""
import argparse
import datetime
import json
import re
import subprocess
import uuid


def spdx_id(name, version):
    return "SPDXRef-Package-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{name}-{version}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked",
         "--filter-platform", "x86_64-unknown-linux-gnu"],
        check=True, capture_output=True, text=True).stdout)
    by_id = {p["id"]: p for p in meta["packages"]}
    members = set(meta["workspace_members"])
    # Reachable from the workspace through normal and build edges (dev-only edges excluded).
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    seen, todo = set(), list(members)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        for d in nodes[i]["deps"]:
            if any(k["kind"] in (None, "build") for k in d["dep_kinds"]):
                todo.append(d["pkg"])
    packages, relationships = [], []
    for i in sorted(seen, key=lambda i: (by_id[i]["name"], by_id[i]["version"])):
        p = by_id[i]
        ref = spdx_id(p["name"], p["version"])
        packages.append({
            "name": p["name"],
            "SPDXID": ref,
            "versionInfo": p["version"],
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": p.get("license") or "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "supplier": "NOASSERTION",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": f"pkg:cargo/{p['name']}@{p['version']}",
            }],
        })
        if i in members:
            relationships.append({"spdxElementId": "SPDXRef-DOCUMENT",
                                  "relationshipType": "DESCRIBES", "relatedSpdxElement": ref})
        for d in nodes[i]["deps"]:
            if d["pkg"] in seen and any(k["kind"] in (None, "build") for k in d["dep_kinds"]):
                q = by_id[d["pkg"]]
                relationships.append({"spdxElementId": ref, "relationshipType": "DEPENDS_ON",
                                      "relatedSpdxElement": spdx_id(q["name"], q["version"])})
    doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"rustqueue-{a.version}",
        "documentNamespace": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'rustqueue-' + a.version)}",
        "creationInfo": {
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "creators": ["Tool: rustqueue scripts/sbom.py"],
        },
        "packages": packages,
        "relationships": relationships,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{a.out}: {len(packages)} packages")


if __name__ == "__main__":
    main()
