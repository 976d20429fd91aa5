#!/usr/bin/env bash
# Installs the pinned external tools (scripts/versions.env) into ~/.cache/rustqueue.
# Idempotent: a finished install is marked with a .done stamp and skipped next time.
# Usage: scripts/deps.sh [nsqd|nsqlookupd|nsqadmin|python|node|k8s|kubectl|crane|coredns|nftables|openssl|pyyaml|chromium|helm|olm-validate|promtool|versitygw|otelcol|argocd-health|cargo-deny|all]...   (default: all)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
go_tools_without_dwarf

deps_nsqd() {
  local name="nsqd-$NSQD_VERSION"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/nsqlookupd" ] && return 0
  log "building official nsqd $NSQD_VERSION (one time)"
  # Not `go install pkg@version`: that also asks the proxy for the module's version list
  # (deprecation check), which the registry mirror refuses. Download the exact version and
  # build inside it with its own go.mod instead.
  local src
  src="$(cd "$RUSTQUEUE_CACHE" && go mod download -json "github.com/nsqio/nsq@$NSQD_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
  (cd "$src" && go build -o "$RUSTQUEUE_CACHE/$name/bin/" ./apps/nsqd ./apps/nsqlookupd ./apps/nsq_tail)
  finish "$name"
}

# Builds one official NSQ app from the downloaded module at its own pinned version, into its
# own cache entry `<app>-<version>`, the same way as nsqd.
nsq_app() {
  local app="$1" version="$2" name="$1-$2"
  cached "$name" && return 0
  log "building official $app $version (one time)"
  local src
  src="$(cd "$RUSTQUEUE_CACHE" && go mod download -json "github.com/nsqio/nsq@$version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
  (cd "$src" && go build -o "$RUSTQUEUE_CACHE/$name/bin/" "./apps/$app")
  finish "$name"
}

# Official nsqlookupd, the lookup parity peer (e2e/compat/lookupd).
deps_nsqlookupd() { nsq_app nsqlookupd "$NSQLOOKUPD_VERSION"; }

# Official nsqadmin: what an NSQ fleet's operators look at (e2e/compat/fleet).
deps_nsqadmin() { nsq_app nsqadmin "$NSQADMIN_VERSION"; }

deps_python() {
  local name="pynsq-$PYNSQ_VERSION-tornado-$TORNADO_VERSION"
  cached "$name" && return 0
  log "creating the pynsq $PYNSQ_VERSION virtualenv (one time)"
  rm -rf "${RUSTQUEUE_CACHE:?}/$name"
  python3 -m venv "$RUSTQUEUE_CACHE/$name"
  "$RUSTQUEUE_CACHE/$name/bin/pip" install --quiet --disable-pip-version-check \
    "pynsq==$PYNSQ_VERSION" "tornado==$TORNADO_VERSION" python-snappy
  finish "$name"
}

deps_node() {
  local name="nsqjs-$NSQJS_VERSION"
  cached "$name" && return 0
  log "installing nsqjs $NSQJS_VERSION (one time)"
  rm -rf "${RUSTQUEUE_CACHE:?}/$name"
  mkdir -p "$RUSTQUEUE_CACHE/$name"
  (cd "$RUSTQUEUE_CACHE/$name" && npm init -y >/dev/null &&
    npm install --silent --no-audit --no-fund "nsqjs@$NSQJS_VERSION")
  finish "$name"
}

# go-containerregistry's crane: assembles the OCI images (`make images`) and serves the testbed's
# local registry (`crane registry serve`). Built inside the downloaded module, as for nsqd.
deps_crane() {
  go_module_tool crane "$CRANE_VERSION" github.com/google/go-containerregistry ./cmd/crane
}

# Builds the command PKG of Go module MODULE at VERSION into $RUSTQUEUE_CACHE/NAME-VERSION/bin/NAME,
# inside the downloaded module with its own go.mod (static, trimmed), once. Extra arguments are
# environment assignments for the build (GOWORK=off ...); GO_LDFLAGS adds to the linker flags,
# GO_TAGS sets build tags and names the cache entry with them (NAME-VERSION-TAGS), and
# GO_TOOL_CHECK, when set, is the flag the new binary is run with once (--version).
go_module_tool() {
  local tool=$1 version=$2 module=$3 pkg=$4
  shift 4
  local name="$tool-$version${GO_TAGS:+-$GO_TAGS}"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/$tool" ] && return 0
  log "building $tool $version (one time)"
  local src start=$SECONDS
  src="$(cd "$RUSTQUEUE_CACHE" && go mod download -json "$module@$version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
  (cd "$src" && env CGO_ENABLED=0 "$@" go build -trimpath -tags "${GO_TAGS:-}" \
    -ldflags "-s -w ${GO_LDFLAGS:-}" -o "$RUSTQUEUE_CACHE/$name/bin/$tool" "$pkg")
  if [ -n "${GO_TOOL_CHECK:-}" ]; then "$RUSTQUEUE_CACHE/$name/bin/$tool" "$GO_TOOL_CHECK" >&2; fi
  finish "$name"
  log "$tool $version built in $((SECONDS - start))s"
}

# CoreDNS as the testbed's cluster DNS: a main of our own that links only the plugins the testbed's
# Corefile names (bind, ready, health, errors, log, cache, kubernetes), the documented way to build
# CoreDNS with a chosen plugin set, instead of every cloud provider's SDK. Its k8s.io modules are
# raised to the control plane's version so most of them are already in the Go build cache.
deps_coredns() {
  local name="coredns-$COREDNS_VERSION"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/coredns" ] && return 0
  log "building CoreDNS $COREDNS_VERSION (one time)"
  local dest="$RUSTQUEUE_CACHE/$name" staging="v0.${K8S_VERSION#v1.}" start=$SECONDS
  rm -rf "${dest:?}"
  mkdir -p "$dest/src" "$dest/bin"
  printf '%s\n' "module rustqueue.local/coredns" "" "go 1.26.0" "" "require (" \
    "	github.com/coredns/coredns $COREDNS_VERSION" "	k8s.io/api $staging" \
    "	k8s.io/apimachinery $staging" "	k8s.io/client-go $staging" ")" >"$dest/src/go.mod"
  cat >"$dest/src/main.go" <<'GO'
// CoreDNS for the RustQueue e2e testbed (generated by scripts/deps.sh): upstream coremain with
// the plugins the testbed's Corefile uses, in CoreDNS's own plugin order (plugin.cfg).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
GO
  (cd "$dest/src" && go mod tidy &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/bin/coredns" .)
  "$dest/bin/coredns" -version >&2
  finish "$name"
  log "CoreDNS $COREDNS_VERSION built in $((SECONDS - start))s"
}

# kube-proxy (nftables mode) needs the nft tool; the testbed runs it in its network namespace.
deps_nftables() {
  command -v nft >/dev/null && return 0
  log "installing nftables (apt)"
  apt-get update -qq && apt-get install -y -qq nftables >/dev/null
}

# Debian's Chromium: the headless browser the console's pages are tested in (playwright-core
# drives it; no browser is downloaded by npm).
deps_chromium() {
  command -v chromium >/dev/null && return 0
  log "installing chromium (apt)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}

# Kubernetes control plane for the e2e testbed (one multi-call Go binary; see build-k8s.sh).
deps_k8s() {
  "$ROOT/scripts/build-k8s.sh"
}

# kubectl at the testbed's Kubernetes version, for the operator e2e (`kubectl apply -k`,
# `kubectl wait`) and for people poking at a testbed. Built from the published staging module
# k8s.io/kubectl v0.<minor>.<patch> with a main equal to upstream cmd/kubectl's.
deps_kubectl() {
  local name="kubectl-$K8S_VERSION"
  cached "$name" && return 0
  log "building kubectl $K8S_VERSION (one time)"
  local dest="$RUSTQUEUE_CACHE/$name" staging="v0.${K8S_VERSION#v1.}"
  rm -rf "${dest:?}"
  mkdir -p "$dest/src" "$dest/bin"
  printf '%s\n' "module rustqueue.local/kubectl" "" "go 1.25" "" "require (" \
    "	k8s.io/component-base $staging" "	k8s.io/kubectl $staging" ")" >"$dest/src/go.mod"
  cat >"$dest/src/main.go" <<'GO'
// kubectl for the RustQueue e2e testbed (generated by scripts/deps.sh): upstream cmd/kubectl.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
  local v="k8s.io/component-base/version"
  (cd "$dest/src" && go mod tidy &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $v.gitVersion=$K8S_VERSION" \
      -o "$dest/bin/kubectl" .)
  "$dest/bin/kubectl" version --client >&2
  finish "$name"
}

# The client matrix (e2e/compat) makes its TLS material with the openssl CLI (a Debian package).
deps_openssl() {
  command -v openssl >/dev/null && return 0
  log "installing openssl (apt)"
  apt-get update -qq && apt-get install -y -qq openssl >/dev/null
}

# promtool, to check config/prometheus's rules and run their unit tests (`make monitoring-test`).
# Built inside the downloaded prometheus module with its own go.mod, as for crane.
# Prometheus's own `remove_all_sd` build tag leaves out every service-discovery plugin but file
# and http (plugins/*.go): the rules and metrics checks use none of them, and the cloud SDKs they
# pull in were more than half of the build (cold: 4.1 CPU-minutes with the tag, 9.2 without).
deps_promtool() {
  # The module ships a go.work naming folders its zip leaves out: build with the go.mod alone.
  GO_TOOL_CHECK=--version GO_TAGS="$PROMTOOL_TAGS" \
    go_module_tool promtool "$PROMTOOL_VERSION" github.com/prometheus/prometheus ./cmd/promtool GOWORK=off
}

# versitygw, the S3-compatible server broker/tier's tests start (posix backend over a temporary
# directory). Built inside the downloaded module, as crane is; its version is stamped the way
# its own Makefile does, so `versitygw --version` names the pin.
deps_versitygw() {
  GO_TOOL_CHECK=--version \
    GO_LDFLAGS="-X=main.Version=$VERSITYGW_VERSION -X=main.Build=module -X=main.BuildTime=none" \
    go_module_tool versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw ./cmd/versitygw
}

# The Argo CD health evaluator (config/argocd/health): docs/argocd.md's Lua run by gopher-lua,
# the engine Argo CD embeds. Built from the repo's source into a cache entry keyed by the
# gopher-lua version and a hash of the source, so an edit to main.go rebuilds it.
deps_argocd_health() {
  local src="$ROOT/config/argocd/health" sum
  grep -q "github.com/yuin/gopher-lua $GOPHER_LUA_VERSION\$" "$src/go.mod" ||
    die "$src/go.mod does not require gopher-lua $GOPHER_LUA_VERSION (scripts/versions.env)"
  sum="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)"
  local name="argocd-health-$GOPHER_LUA_VERSION-$sum"
  if ! { cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/argocd-health" ]; }; then
    log "building the Argo CD health evaluator on gopher-lua $GOPHER_LUA_VERSION"
    mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$RUSTQUEUE_CACHE/$name/bin/argocd-health" .)
    finish "$name"
  fi
  # The tests run $RUSTQUEUE_CACHE/argocd-health: point it at this tree's build, also when
  # another checkout's source left it pointing elsewhere.
  ln -sfn "$RUSTQUEUE_CACHE/$name/bin/argocd-health" "$RUSTQUEUE_CACHE/argocd-health"
}

# PyYAML for scripts/install-manifests.py and scripts/test-chart.py (a Debian package).
deps_pyyaml() {
  python3 -c 'import yaml' 2>/dev/null && return 0
  log "installing PyYAML (apt)"
  apt-get update -qq && apt-get install -y -qq python3-yaml >/dev/null
}

# Helm, for the chart in config/helm/rustqueue: built inside the downloaded module, as crane is.
deps_helm() {
  local name="helm-$HELM_VERSION"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/helm" ] && return 0
  log "building helm $HELM_VERSION (one time)"
  local src start=$SECONDS
  src="$(cd "$RUSTQUEUE_CACHE" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  mkdir -p "$RUSTQUEUE_CACHE/$name/bin"
  # As helm's own Makefile: the Kubernetes version `helm template` and `helm lint` assume
  # without a cluster is the client-go minor it is built with (else 1.20, older than charts allow).
  local client_go major minor
  client_go="$(cd "$src" && go list -m -f '{{.Version}}' k8s.io/client-go)"
  major=$(( $(echo "${client_go#v}" | cut -d. -f1) + 1 ))   # client-go v0.37.x is Kubernetes 1.37
  minor="$(echo "$client_go" | cut -d. -f2)"
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$major -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
    -o "$RUSTQUEUE_CACHE/$name/bin/helm" ./cmd/helm)
  "$RUSTQUEUE_CACHE/$name/bin/helm" version --short >&2
  finish "$name"
  log "helm $HELM_VERSION built in $((SECONDS - start))s"
}

# The OLM bundle validator: olm/validate/main.go linked against the pinned operator-framework
# api. The cache entry is keyed by that version and by the program's hash, so editing the
# program rebuilds it.
deps_olm_validate() {
  local sum name
  sum="$(sha256sum "$ROOT/olm/validate/main.go" | cut -c1-12)"
  name="olm-validate-$OPERATOR_FRAMEWORK_API_VERSION-$sum"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/olm-validate" ] && return 0
  log "building olm-validate against operator-framework/api $OPERATOR_FRAMEWORK_API_VERSION (one time)"
  local dest="$RUSTQUEUE_CACHE/$name" start=$SECONDS
  rm -rf "${dest:?}"
  mkdir -p "$dest/src" "$dest/bin"
  cp "$ROOT/olm/validate/main.go" "$dest/src/"
  printf '%s\n' "module rustqueue.local/olm-validate" "" "go 1.26.0" "" \
    "require github.com/operator-framework/api $OPERATOR_FRAMEWORK_API_VERSION" >"$dest/src/go.mod"
  (cd "$dest/src" && go mod tidy &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dest/bin/olm-validate" .)
  finish "$name"
  log "olm-validate built in $((SECONDS - start))s"
}

# cargo-deny for `make deny` (deny.toml), from the crate registry with its own lock file. It
# compiles in a target directory of its own, removed afterwards: `make test` sets
# CARGO_TARGET_DIR for the workspace, whose lock the suite's builds hold. It is built
# unoptimised and without debug info: its release profile (fat LTO, one codegen unit) costs
# 3.9 CPU-minutes to build, this 1.6, and the check it runs takes 3 s instead of 1.3.
deps_cargo_deny() {
  local name="cargo-deny-$CARGO_DENY_VERSION-debug"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/cargo-deny" ] && return 0
  log "building cargo-deny $CARGO_DENY_VERSION (one time)"
  local start=$SECONDS
  rm -rf "${RUSTQUEUE_CACHE:?}/$name"
  CARGO_TARGET_DIR="$RUSTQUEUE_CACHE/$name/build" CARGO_PROFILE_DEV_DEBUG=0 cargo install \
    --debug --quiet --locked --root "$RUSTQUEUE_CACHE/$name" "cargo-deny@$CARGO_DENY_VERSION"
  rm -rf "${RUSTQUEUE_CACHE:?}/$name/build"
  finish "$name"
  log "cargo-deny $CARGO_DENY_VERSION built in $((SECONDS - start))s"
}

# The OpenTelemetry Collector of the trace tests (docs/observability.md): a main of our own with
# the OTLP receiver and the file exporter only, the way the collector's builder (ocb) assembles a
# distribution, instead of the contrib distribution's hundreds of components. The tests start it
# on loopback ports and read the spans it writes as OTLP JSON lines.
deps_otelcol() {
  local name="otelcol-$OTELCOL_VERSION"
  cached "$name" && [ -x "$RUSTQUEUE_CACHE/$name/bin/otelcol" ] && return 0
  log "building the OpenTelemetry Collector $OTELCOL_VERSION (OTLP receiver, file exporter; one time)"
  local dest="$RUSTQUEUE_CACHE/$name" core="go.opentelemetry.io/collector" start=$SECONDS
  rm -rf "${dest:?}"
  mkdir -p "$dest/src" "$dest/bin"
  printf '%s\n' "module rustqueue.local/otelcol" "" "go 1.26.0" "" "require (" \
    "	github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter $OTELCOL_VERSION" \
    "	$core/component $OTELCOL_STABLE_VERSION" "	$core/confmap $OTELCOL_STABLE_VERSION" \
    "	$core/confmap/provider/fileprovider $OTELCOL_STABLE_VERSION" \
    "	$core/exporter $OTELCOL_STABLE_VERSION" "	$core/receiver $OTELCOL_STABLE_VERSION" \
    "	$core/otelcol $OTELCOL_VERSION" "	$core/receiver/otlpreceiver $OTELCOL_VERSION" \
    "	$core/service $OTELCOL_VERSION" ")" >"$dest/src/go.mod"
  cat >"$dest/src/main.go" <<'GO'
// A minimal OpenTelemetry Collector for the RustQueue trace tests (generated by scripts/deps.sh):
// the OTLP receiver and the file exporter, configured from a file.
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// version is the collector release it is built from (set by the linker).
var version = "unknown"

func components() (otelcol.Factories, error) {
	var err error
	factories := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if factories.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return factories, err
	}
	if factories.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory()); err != nil {
		return factories, err
	}
	return factories, nil
}

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol", Description: "OTLP receiver and file exporter", Version: version},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
				DefaultScheme:     "file",
			},
		},
	}
	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
GO
  (cd "$dest/src" && go mod tidy &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$OTELCOL_VERSION" \
      -o "$dest/bin/otelcol" .)
  "$dest/bin/otelcol" --version >&2
  finish "$name"
  log "otelcol $OTELCOL_VERSION built in $((SECONDS - start))s"
}

# locked TOOL FUNCTION: runs FUNCTION holding TOOL's lock, so two stages of `make test` that
# need the same tool at once build it once (the second waits, then finds it cached). apt-get
# installs share one lock: dpkg allows one at a time.
locked() {
  local lock="$1"
  case "$1" in nftables | openssl | pyyaml | chromium) lock=apt ;; esac
  mkdir -p "$RUSTQUEUE_CACHE/.locks"
  (
    flock 9
    local start=$SECONDS
    "$2"
    # a cold run says which tools dominate; a cached one stays quiet
    [ $((SECONDS - start)) -lt 2 ] || log "$1 ready in $((SECONDS - start))s"
  ) 9>"$RUSTQUEUE_CACHE/.locks/$lock"
}

main() {
  mkdir -p "$RUSTQUEUE_CACHE"
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=(all)
  for t in "${targets[@]}"; do
    case "$t" in
      # what the images and the Kubernetes scenarios need first, promtool (minutes) last
      all) main crane k8s kubectl coredns nftables python pyyaml helm argocd-health nsqd nsqlookupd nsqadmin node openssl chromium olm-validate versitygw otelcol promtool ;;
      nsqd | nsqlookupd | nsqadmin | python | node | k8s | kubectl | crane | coredns | nftables | openssl | pyyaml | chromium | helm | promtool | versitygw | otelcol) locked "$t" "deps_$t" ;;
      olm-validate) locked "$t" deps_olm_validate ;;
      argocd-health) locked "$t" deps_argocd_health ;;
      cargo-deny) locked "$t" deps_cargo_deny ;;
      *) die "unknown tool '$t' (expected: nsqd nsqlookupd nsqadmin python node k8s kubectl crane coredns nftables openssl pyyaml chromium helm olm-validate promtool versitygw otelcol argocd-health cargo-deny all)" ;;
    esac
  done
}
main "$@"
