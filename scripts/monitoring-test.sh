#!/usr/bin/env bash
# `make monitoring-test`: the Prometheus rules, the Grafana dashboard and the Argo CD health
# check, each tested with the tool that runs it for real (docs/monitoring.md, docs/argocd.md):
#   1. promtool check rules on the PrometheusRule's spec (everything below its `spec:` line);
#   2. promtool test rules: config/prometheus/tests/*.yaml fire and silence every alert;
#   3. every series the rules and the dashboards name is exported by a real rustqueued,
#      rustqueue-discovery and rustqueue-gateway started on loopback, or registered by the
#      operator; and `promtool check metrics` finds nothing to say about those binaries'
#      /metrics (counters end in _total, gauges do not, units in the name);
#   4. the Argo CD health check, run by gopher-lua as Argo CD runs it, on the statuses captured
#      from the testbed (config/argocd/testdata/*.json), each read as the health expected.
#
# Usage: scripts/monitoring-test.sh --bin-dir DIR   (DIR holds rustqueued, rustqueue-discovery
# and rustqueue-gateway)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

bin_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    *) die "unknown argument '$1' (expected --bin-dir DIR)" ;;
  esac
done
[ -n "$bin_dir" ] || die "--bin-dir DIR is required (the debug build of rustqueued, rustqueue-discovery and rustqueue-gateway)"

"$ROOT/scripts/deps.sh" promtool argocd-health
promtool="$RUSTQUEUE_CACHE/promtool-$PROMTOOL_VERSION-$PROMTOOL_TAGS/bin/promtool"
start=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "promtool check rules (config/prometheus/prometheus-rule.yaml)"
awk 'found { sub(/^  /, ""); print } /^spec:/ { found = 1 }' \
  config/prometheus/prometheus-rule.yaml >"$work/rules.yaml"
grep -q '^groups:' "$work/rules.yaml" || die "no spec.groups in config/prometheus/prometheus-rule.yaml"
"$promtool" check rules "$work/rules.yaml"

log "promtool test rules (config/prometheus/tests)"
cp config/prometheus/tests/*_test.yaml "$work/"
# Every alert must have a test that fires it and one that finds it quiet.
python3 - "$work/rules.yaml" config/prometheus/tests/*_test.yaml <<'PY'
import re, sys
rules = set(re.findall(r"^\s*- alert: (\S+)", open(sys.argv[1]).read(), re.M))
fired, quiet = set(), set()
for f in sys.argv[2:]:
    text = open(f).read()
    for name, alerts in re.findall(r"alertname: (\S+)\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n  - name|\Z)", text, re.S):
        (quiet if alerts.strip() == "[]" else fired).add(name)
bad = [f"{a}: {'never fired' if a not in fired else 'never shown quiet'}" for a in sorted(rules) if a not in fired or a not in quiet]
bad += [f"{a}: tested but not in the rules" for a in sorted((fired | quiet) - rules)]
if bad:
    sys.exit("alert tests incomplete:\n  " + "\n  ".join(bad))
print(f"{len(rules)} alerts, each fired and shown quiet")
PY
"$promtool" test rules "$work"/*_test.yaml

log "series named by the rules and the dashboards"
mkdir "$work/expositions"
python3 scripts/check-metric-refs.py \
  --rustqueued "$bin_dir/rustqueued" --discovery "$bin_dir/rustqueue-discovery" \
  --gateway "$bin_dir/rustqueue-gateway" --save-expositions "$work/expositions" \
  config/prometheus/prometheus-rule.yaml rustqueued=config/grafana/rustqueue-broker.json \
  operator=config/grafana/rustqueue-operator.json \
  rustqueue-discovery=config/grafana/rustqueue-discovery.json \
  rustqueue-gateway=config/grafana/rustqueue-gateway.json

log "promtool check metrics: each binary's real /metrics against Prometheus' naming rules"
for f in "$work"/expositions/*.prom; do
  "$promtool" check metrics <"$f" || die "$(basename "$f" .prom)'s /metrics breaks Prometheus' naming rules (above)"
  echo "  $(basename "$f" .prom): $(grep -c '^# TYPE' "$f") metric families, clean"
done

log "Argo CD health (gopher-lua) on the captured statuses"
python3 - "$RUSTQUEUE_CACHE/argocd-health" config/argocd/testdata <<'PY'
import json, pathlib, subprocess, sys
evaluator, data = sys.argv[1], pathlib.Path(sys.argv[2])
expected = json.loads((data / "expected.json").read_text())
files = sorted(p.name for p in data.glob("*.json") if p.name != "expected.json")
if sorted(expected) != files:
    sys.exit(f"expected.json lists {sorted(expected)}, testdata holds {files}")
out = subprocess.run([evaluator, "-doc", "docs/argocd.md", *(str(data / f) for f in files)],
                     check=True, capture_output=True, text=True).stdout
bad = []
for line in out.splitlines():
    got = json.loads(line)
    want = expected[pathlib.Path(got["file"]).name]
    if got["status"] != want["status"] or not got["message"].startswith(want["message_starts_with"]):
        bad.append(f"{got['file']}: got {got['status']} {got['message']!r}, want {want}")
    else:
        print(f"  {pathlib.Path(got['file']).name}: {got['status']}: {got['message'][:70]}")
if bad:
    sys.exit("\n".join(bad))
PY
log "monitoring-test passed in $((SECONDS - start))s"
