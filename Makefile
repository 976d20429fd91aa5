# RustQueue. The README's two commands are `make run` and `make test`; the rest are the
# parts they are built from. See docs/development.md.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# What the release builds below stamp into `rustqueued --version` (broker/server/build.rs), so
# that benchmark results and bug reports name their build. The test build is not stamped and so
# does not recompile for a new commit. A revision already in the environment is kept.
RUSTQUEUE_REVISION ?= $(shell git describe --always --dirty 2>/dev/null)
RELEASE_CARGO = RUSTQUEUE_REVISION=$(RUSTQUEUE_REVISION) $(CARGO)
export RUSTQUEUE_CACHE ?= $(HOME)/.cache/rustqueue

.PHONY: help
help: ## list every target with what it does
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install pinned external tools into ~/.cache/rustqueue (idempotent)
	scripts/deps.sh all

.PHONY: build
build: ## build every binary (release)
	$(RELEASE_CARGO) build --release --workspace --bins

.PHONY: run
run: ## start a local broker with default settings and print how to use it
	scripts/run.sh

.PHONY: fmt
fmt: ## format the code
	$(CARGO) fmt --all

.PHONY: fmt-check
fmt-check: ## rustfmt check only
	$(CARGO) fmt --all -- --check

# Every test stage runs with one package selection and one feature set, the whole workspace with
# all features, so `test-build` compiles each test target once and no later stage recompiles
# anything (selecting packages with -p resolves other features and rebuilds). Which test targets
# each stage runs: scripts/test-targets.py.
CARGO_TEST := $(CARGO) test --workspace --all-features --locked
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
# Clippy's check artifacts live in their own directory, so it runs beside the debug build
# instead of waiting for its lock.
CLIPPY_TARGET_DIR ?= $(TARGET_DIR)/clippy
# unit leaves out the testbed's and the power-cut crate's own tests (root, network namespaces,
# /dev/fuse); leaving them out resolves the same features, so nothing recompiles.
UNIT_EXCLUDE := --exclude rustqueue-testbed --exclude rustqueue-powercut
stage_targets = $(shell scripts/test-targets.py $(1))

# What a stage needs built before it runs, besides what its own cargo test compiles: the debug
# binaries (compat, monitoring), the recorded test executables (e2e-testbed), the images and the
# scenarios' releases (e2e). Inside `make test` the build stages have run first and several
# stages run at once, so there these are empty: no stage rebuilds another's files.
ifeq ($(RUSTQUEUE_SUITE),)
TESTS_BUILT := test-build
SCENARIOS_BUILT := e2e-build e2e-images
IMAGES_BUILT := images
endif
TESTBED_DEPS := deps-k8s deps-crane deps-cluster-net

.PHONY: lint
lint: fmt-check ## rustfmt check and clippy with warnings denied
	CARGO_TARGET_DIR=$(CLIPPY_TARGET_DIR) $(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings

.PHONY: test-build
test-build: ## compile every test target and debug binary of the workspace once (the stages below run them)
	scripts/test-targets.py --check >/dev/null
	$(CARGO_TEST) --no-run --message-format=json-render-diagnostics | scripts/test-targets.py --record $(TARGET_DIR)/test-executables.json

# The e2e scenarios' test binaries alone (and, for debug images, the binaries they hold, in the
# same cargo run): the longest stage can start before the rest compiles. The executables are
# recorded, and the scenario stages run them directly (e2e_exe): through `cargo test` each of
# them waited for the test build's lock on the target directory, 3m45s in a warm `make test`,
# before a binary that was already built could start.
E2E_EXECUTABLES = $(TARGET_DIR)/e2e-executables.json
.PHONY: e2e-build
e2e-build: ## compile the Kubernetes scenarios' test binaries (a part of test-build, first)
	$(CARGO_TEST) --no-run --message-format=json-render-diagnostics --test operator --test install $(if $(filter debug,$(IMAGE_PROFILE)),$(call stage_targets,image-bins)) \
	  | scripts/test-targets.py --record $(E2E_EXECUTABLES)

# e2e_exe,TARGET: the scenario test binary TARGET that e2e-build recorded. A recipe runs it
# from its package's directory (`cd e2e/k8s`), as `cargo test` does; arguments follow.
e2e_exe = "$$(cd $(CURDIR) && scripts/test-targets.py --exe $(E2E_EXECUTABLES) $(1) test)"

.PHONY: unit service-test
unit: deps-argocd-health deps-versitygw deps-otelcol ## unit and integration tests that need no nsqd, no Kubernetes, no root, no /dev/fuse (the fed-metrics test starts versitygw, the trace tests the OpenTelemetry Collector, from the cache; service-test and the tier stages run the rest)
	$(CARGO_TEST) $(UNIT_EXCLUDE) $(call stage_targets,unit)
	$(CARGO_TEST) --exclude rustqueue-powercut --doc
# The other half of what needs nothing but a compiler, in its own stage of `make test` beside
# `unit` (scripts/test-targets.py names the targets).
service-test: ## the engine's, discovery's and the gateway's integration tests (brokers and discovery services on loopback)
	$(CARGO_TEST) $(call stage_targets,service-test)

# broker/tier against a real S3-compatible server: versitygw (scripts/versions.env), built into
# the cache once (about 2 min of CPU cold, like crane) and started by each test on loopback;
# and the engine's uploads of sealed segments and the [tiering] section over the same server.
# Its own stage of `make test` (scripts/test-targets.py names the targets), beside `unit`.
.PHONY: deps-versitygw tier-test
deps-versitygw: ## build versitygw, the S3-compatible server of the tier tests, into the cache
	scripts/deps.sh versitygw
tier-test: deps-versitygw ## tiering against a real versitygw: the bucket layer (round trips, damage, kills, pauses, refusals), segment uploads, read-through, checkpoints and the restore, [tiering] config
	$(CARGO_TEST) $(call stage_targets,tier-test)
# The minute without the bucket under durable load, alone: `make test` runs it once the
# clusters and the power cuts have ended (scripts/test-suite.sh).
.PHONY: tier-outage-test
tier-outage-test: deps-versitygw ## a minute without the bucket (versitygw stopped) under steady durable publishing: nothing stalls or is lost, uploads catch up
	$(CARGO_TEST) $(call stage_targets,tier-outage-test)

# Traces over OTLP (docs/observability.md): rustqueued sending its publish and delivery spans to
# a real OpenTelemetry Collector (OTLP receiver + file exporter, built from its Go modules into
# the cache once: about 20 s of downloads and 1-2 min of CPU) that each test starts on loopback,
# and the sampler variables. `unit` runs these too; this target runs them alone.
TRACE_TESTS := --test otlp_traces
.PHONY: deps-otelcol trace-test
deps-otelcol: ## build the OpenTelemetry Collector of the trace tests (OTLP receiver, file exporter) into the cache
	scripts/deps.sh otelcol
trace-test: deps-otelcol ## rustqueued's publish and delivery spans at a real OpenTelemetry Collector, and the sampler variables
	$(CARGO_TEST) $(TRACE_TESTS)

.PHONY: crash
crash: ## crash tests alone: 1,200 simulated storage crash points + real SIGKILL failpoints in storage and console management (unit runs them too)
	$(CARGO_TEST) --test crash_sim --test crash_sigkill --test console_manage_sigkill

# cargo-deny (pinned in scripts/versions.env, built into the cache once, unoptimised: under 2 min of CPU)
# checks Cargo.lock's licences, bans and sources against deny.toml in about 3 s. `advisories`
# is not run: its database cannot be fetched here (deny.toml).
CARGO_DENY = $(RUSTQUEUE_CACHE)/cargo-deny-$(shell . scripts/versions.env && echo $$CARGO_DENY_VERSION)-debug/bin/cargo-deny
.PHONY: deny
deny: ## cargo deny check licenses bans sources (deny.toml); builds the pinned cargo-deny once
	scripts/deps.sh cargo-deny
	$(CARGO_DENY) --workspace --all-features --locked check --hide-inclusion-graph licenses bans sources

.PHONY: check
check: lint deny ## the fast inner loop: rustfmt, clippy, cargo-deny and every crate's in-source unit tests (no nsqd, no Kubernetes)
	$(CARGO_TEST) $(UNIT_EXCLUDE) --lib --bins

# rustqueue-bench's tests against the real nsqd: installed first, never skipped.
.PHONY: bench-test
bench-test: deps-nsqd deps-versitygw ## rustqueue-bench proved against official nsqd v1.3.0 (load, ledger, compare), and its tiered cases against versitygw
	$(CARGO_TEST) $(call stage_targets,bench-test)

# Power cuts through a FUSE file system that drops what was not fsynced (docs/durability.md):
# the lazy file system's own semantics, then 54 cuts of a loaded rustqueued (18 per ack mode,
# about 50 s) with the ledger checked and the figures printed. Needs root and /dev/fuse and
# fails, never skips, without them.
.PHONY: powercut-test powercut
powercut-test: ## power-cut tests: the lazy FUSE file system, then 54 cuts of rustqueued under load (prints lost/acked per ack mode)
	$(CARGO_TEST) $(call stage_targets,powercut-test) -- --nocapture
powercut: powercut-test ## the same as powercut-test

# The whole suite: scripts/test-suite.sh runs the stages above and below in waves, prints
# `[k/N] stage` as each starts and a table of stage times at the end. `.ci/run` calls exactly this.
.PHONY: test
test: ## the whole suite: what .ci/run runs (needs root; see README)
	scripts/test-suite.sh

.PHONY: ci
ci: test ## same as test


# --- operator CRD: generated from operator/api; drift fails crdgen and config tests ----------
.PHONY: crds
crds: ## regenerate crds/ and config/crd/ from the Rust types (RustQueue, RustQueueTopic, RustQueueChannel)
	$(CARGO) run --quiet --locked -p rustqueue-operator -- crd --dir crds
	cp crds/rustqueue.io_*.yaml config/crd/
	scripts/install-manifests.py
	scripts/crd-doc.py

# --- console web pages: React + Carbon, built with the machine's Node.js (docs/console.md) -------
.PHONY: console-ui
console-ui: ## build the console's web pages into operator/console/ui/dist (npm ci once per lockfile, type check, unit tests, vite build)
	scripts/console-ui.sh build

# The pages in Debian's headless Chromium (playwright-core), served by the real console backend
# collecting from three real rustqueued with management on: every page in both themes with an
# axe scan, numbers against the snapshot, theme and language across a reload, a topic created
# through the dialogs. Screenshots in $(TARGET_DIR)/console-screenshots. Inside `make test`
# the console-ui stage has built the pages.
.PHONY: console-browser
console-browser: $(TESTS_BUILT) ## the console's web pages in headless Chromium against the real backend and brokers (screenshots in target/console-screenshots)
	scripts/deps.sh chromium
	$(if $(RUSTQUEUE_SUITE),,scripts/console-ui.sh build)
	$(CARGO_TEST) $(call stage_targets,console-browser) -- --nocapture

# --- release: what a user downloads (docs/install.md, "Release artifacts") ---------------------
.PHONY: release
release: ## the release into target/release-artifacts: binaries tarball, source, Helm chart, image tarballs, SPDX SBOM, SHA256SUMS (release build)
	scripts/deps.sh helm crane
	scripts/console-ui.sh build
	scripts/release.sh

# The release assembled from the suite's own build (debug binaries and images, so nothing
# compiles twice) and checked as a user would: sums, contents, versions, a broker started from
# the example configuration.
.PHONY: release-test
release-test: $(TESTS_BUILT) $(IMAGES_BUILT) ## assemble the release from this build and check it as a user would
	scripts/deps.sh helm
	scripts/test-release.sh --bin-dir $(TARGET_DIR)/debug --images $(IMAGES_TARGET)/images

# --- benchmarks: not part of `make test`; see docs/benchmarks.md ------------------------------
NSQD_BIN ?= $(RUSTQUEUE_CACHE)/nsqd-$(shell . scripts/versions.env && echo $$NSQD_VERSION)/bin/nsqd
VERSITYGW_BIN ?= $(RUSTQUEUE_CACHE)/versitygw-$(shell . scripts/versions.env && echo $$VERSITYGW_VERSION)/bin/versitygw
BENCH_TARGET := $(or $(CARGO_TARGET_DIR),target)

.PHONY: deps-nsqd
deps-nsqd: ## install official nsqd (the parity and benchmark peer) into the cache
	scripts/deps.sh nsqd


.PHONY: bench
bench: deps-nsqd deps-versitygw ## RustQueue vs nsqd side by side, with the disk, restart and idle-topics cases (~8 min a round on a loaded machine, under 25 for BENCH_ROUNDS=3); BENCH_DURATION/_ROUNDS/_CASES/_PROFILES/_BACKLOG_MESSAGES/_RESTART_MESSAGES/_IDLE_TOPICS/_TIERED_MESSAGES; BENCH_SWEEPS=1 adds the curves (SVG)
	$(RELEASE_CARGO) build --release -p rustqueue-server -p rustqueue-gateway -p rustqueue-discovery -p rustqueue-bench
	$(BENCH_TARGET)/release/rustqueue-bench compare --nsqd $(NSQD_BIN) \
	  --rustqueued $(BENCH_TARGET)/release/rustqueued --versitygw $(VERSITYGW_BIN) \
	  --markdown docs/benchmarks.md --notes bench/notes.md

# --- official-client matrix: see e2e/compat/README.md -----------------------------------------
COMPAT_TARGET := $(or $(CARGO_TARGET_DIR),target)
COMPAT_RESULTS ?= $(COMPAT_TARGET)/compat-results

.PHONY: compat
compat: $(TESTS_BUILT) ## go-nsq, pynsq and nsqjs against rustqueued and official nsqd v1.3.0 (parity)
	scripts/deps.sh nsqd python node openssl
	@status=0; rm -rf $(COMPAT_RESULTS); \
	for target in nsqd rustqueued; do \
	  COMPAT_RESULTS_DIR=$(COMPAT_RESULTS) RUSTQUEUED_BIN=$(COMPAT_TARGET)/debug/rustqueued \
	    e2e/compat/run.sh $$target go python node || status=1; \
	done; \
	python3 e2e/compat/lib/matrix.py $(COMPAT_RESULTS); exit $$status

# The client matrix is part of the whole suite: the debug rustqueued, built together with the
# operator (a release build would add minutes, and the matrix measures behaviour, not speed),
# plus about 4 minutes of official-client runs against it and against nsqd.

.PHONY: compat-lookupd
compat-lookupd: $(TESTS_BUILT) ## lookup parity: go-nsq, pynsq and nsqjs via official nsqlookupd v1.3.0 + nsqd, and via rustqueue-discovery + rustqueued (+ go-nsq, pynsq and nsqjs publishing through rustqueue-gateway)
	scripts/deps.sh nsqd nsqlookupd python node
	@status=0; for target in nsqlookupd discovery; do \
	  RUSTQUEUED_BIN=$(COMPAT_TARGET)/debug/rustqueued DISCOVERY_BIN=$(COMPAT_TARGET)/debug/rustqueue-discovery \
	  GATEWAY_BIN=$(COMPAT_TARGET)/debug/rustqueue-gateway \
	    e2e/compat/lookupd/run.sh $$target go python node || status=1; \
	done; exit $$status

# The Kodo profile on loopback (e2e/kodo/README.md): three rustqueued, discovery in Kodo mode,
# three Kodo gateways behind a Service stand-in, and the go-nsq Kodo stand-in with a ledger.
.PHONY: compat-kodo
compat-kodo: $(TESTS_BUILT) ## Kodo profile on loopback: go-nsq Kodo stand-in via /nodes through 3 Kodo gateways, a broker SIGKILLed mid-publish, ledger missing = 0
	RUSTQUEUED_BIN=$(COMPAT_TARGET)/debug/rustqueued DISCOVERY_BIN=$(COMPAT_TARGET)/debug/rustqueue-discovery \
	  GATEWAY_BIN=$(COMPAT_TARGET)/debug/rustqueue-gateway e2e/kodo/run.sh

# rustqueued registering with official nsqlookupd beside official nsqd, seen by official
# nsqadmin, consumed by pynsq through the lookupd (about 20 s): see docs/compatibility.md.
# The same package set as compat-lookupd, so the two share one build (rustqueue-server alone
# resolves other features and would rebuild it).
PYNSQ_PY := $(RUSTQUEUE_CACHE)/$(shell . scripts/versions.env && echo pynsq-$$PYNSQ_VERSION-tornado-$$TORNADO_VERSION)/bin/python
.PHONY: compat-fleet
compat-fleet: $(TESTS_BUILT) ## rustqueued in an NSQ fleet: official nsqlookupd, nsqd and nsqadmin v1.3.0, pynsq via the lookupd
	scripts/deps.sh nsqd nsqlookupd nsqadmin python
	. scripts/versions.env && $(PYNSQ_PY) e2e/compat/fleet/fleet.py \
	  --nsq-bin $(RUSTQUEUE_CACHE)/nsqd-$$NSQD_VERSION/bin \
	  --nsqlookupd $(RUSTQUEUE_CACHE)/nsqlookupd-$$NSQLOOKUPD_VERSION/bin/nsqlookupd \
	  --nsqadmin $(RUSTQUEUE_CACHE)/nsqadmin-$$NSQADMIN_VERSION/bin/nsqadmin \
	  --rustqueued $(COMPAT_TARGET)/debug/rustqueued

# --- Kubernetes testbed: see docs/e2e.md --------------------------------------------------------
# The control plane (etcd, kube-apiserver, -controller-manager, -scheduler) is built once from
# the Go module proxy into ~/.cache/rustqueue/k8s-<version>; the testbed's tests need it.
.PHONY: deps-k8s
deps-k8s: ## build the testbed's Kubernetes binaries and kubectl into the cache
	scripts/deps.sh k8s kubectl


.PHONY: e2e
e2e: e2e-testbed e2e-operator e2e-storage e2e-kodo e2e-tiering e2e-install ## Kubernetes e2e: the testbed self-test, the operator, storage, Kodo and tiering scenarios, the Helm install

# The testbed's own tests: its library's unit tests need root (network namespaces, address
# locks, chown), so they run here from the executable `test-build` recorded, not in `unit`.
.PHONY: e2e-testbed
e2e-testbed: $(TESTBED_DEPS) $(TESTS_BUILT) ## the testbed self-test: real control plane + process kubelet + provisioner
	cd e2e/testbed && $$(cd $(CURDIR) && scripts/test-targets.py --exe $(TARGET_DIR)/test-executables.json rustqueue_testbed lib)
	$(CARGO_TEST) $(call stage_targets,e2e-testbed)

# The operator installed with kubectl from config/, two replicas, the sample on three
# Nodes, pynsq consuming (also by the brokers' DNS names), a broker Pod replaced, leader
# failover, rollouts, a CEL refusal. Brokers and operator run from the very images `make images`
# built (pushed into the testbed's registry; the scenario's other releases are derived from
# them by e2e/k8s/fixture-images.sh: `make e2e-images`). With KUBECONFIG set it runs on that
# cluster instead: see docs/e2e.md. The Kodo scenario is the same test binary's other test, on a
# testbed of its own, and so is the storage half of the operator's steps (e2e-storage), so `make
# test` runs the three side by side.
# Every step prints its progress; the scenario's measured figures (the operator's reaction
# times, quoted in docs/benchmarks.md) are collected as JSON lines in E2E_FIGURES.
E2E_FIGURES = $(IMAGES_TARGET)/e2e-figures.jsonl
E2E_KODO_FIGURES = $(IMAGES_TARGET)/e2e-kodo-figures.jsonl
E2E_ENV = RUSTQUEUE_E2E_IMAGES=$(IMAGES_TARGET)/images RUSTQUEUE_E2E_BIN_DIR=$(IMAGE_BIN_DIR)
.PHONY: e2e-images e2e-operator e2e-storage e2e-kodo e2e-tiering
e2e-images: images ## the scenario's extra releases derived from the built image (rustqueue:next, :level1, :broken)
	e2e/k8s/fixture-images.sh --images $(IMAGES_TARGET)/images

e2e-operator: $(TESTBED_DEPS) deps-helm deps-argocd-health $(SCENARIOS_BUILT) ## the operator scenario on the testbed, from the images (kubectl apply -k config/default, ...)
	scripts/deps.sh python nsqadmin
	rm -f $(E2E_FIGURES)
	cd e2e/k8s && $(E2E_ENV) RUSTQUEUE_E2E_FIGURES=$(E2E_FIGURES) \
	  $(call e2e_exe,operator) --nocapture --exact the_operator_runs_the_sample_and_changes_it_one_safe_step_at_a_time
	@echo "==> figures of this run (also in $(E2E_FIGURES)):"; sed 's/^/    /' $(E2E_FIGURES)

E2E_STORAGE_FIGURES = $(IMAGES_TARGET)/e2e-storage-figures.jsonl
e2e-storage: $(TESTBED_DEPS) deps-helm deps-argocd-health $(SCENARIOS_BUILT) ## the operator's storage scenario on its own testbed: feature levels, the rollback fence, failover mid-rollout, maintenance, claims, scale-down
	scripts/deps.sh python
	rm -f $(E2E_STORAGE_FIGURES)
	cd e2e/k8s && $(E2E_ENV) RUSTQUEUE_E2E_FIGURES=$(E2E_STORAGE_FIGURES) \
	  $(call e2e_exe,operator) --nocapture --exact the_operator_changes_storage_and_brokers_one_safe_step_at_a_time
	@echo "==> figures of this run (also in $(E2E_STORAGE_FIGURES)):"; sed 's/^/    /' $(E2E_STORAGE_FIGURES)

e2e-kodo: $(TESTBED_DEPS) deps-helm deps-argocd-health $(SCENARIOS_BUILT) ## the Kodo profile scenario on its own testbed: enabled under a publishing fleet, a broker killed mid-publish, decommissioned
	scripts/deps.sh python
	rm -f $(E2E_KODO_FIGURES)
	cd e2e/k8s && $(E2E_ENV) RUSTQUEUE_E2E_FIGURES=$(E2E_KODO_FIGURES) \
	  $(call e2e_exe,operator) --nocapture --exact the_kodo_profile_moves_a_kodo_fleet_on_and_off_without_losing_a_message
	@echo "==> figures of this run (also in $(E2E_KODO_FIGURES)):"; sed 's/^/    /' $(E2E_KODO_FIGURES)

E2E_TIERING_FIGURES = $(IMAGES_TARGET)/e2e-tiering-figures.jsonl
e2e-tiering: $(TESTBED_DEPS) deps-helm deps-argocd-health $(SCENARIOS_BUILT) ## the tiering scenario on its own testbed with a real versitygw: a missing bucket Secret, tiering rolled on, a lost broker volume restored from the bucket
	scripts/deps.sh python versitygw
	rm -f $(E2E_TIERING_FIGURES)
	cd e2e/k8s && $(E2E_ENV) RUSTQUEUE_E2E_FIGURES=$(E2E_TIERING_FIGURES) \
	  $(call e2e_exe,operator) --nocapture --exact the_operator_restores_a_lost_broker_volume_from_the_bucket
	@echo "==> figures of this run (also in $(E2E_TIERING_FIGURES)):"; sed 's/^/    /' $(E2E_TIERING_FIGURES)

# --- protocol fuzz smoke: the cargo-fuzz targets, built on stable ------------------------------
.PHONY: fuzz-smoke
fuzz-smoke: ## run each protocol decoder fuzz target (command, identify, mpub) for FUZZ_SECONDS (10)
	scripts/fuzz-smoke.sh

# --- rustqueuectl, the operator's command line and kubectl plugin: see docs/cli.md --------------
# One binary; `kubectl-rustqueue` is a link to it, so kubectl finds it as the plugin `rustqueue`.
PREFIX ?= $(HOME)/.local
CLI_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
CLI_DIST := $(TARGET_DIR)/cli
.PHONY: install-cli cli-dist
install-cli: ## build rustqueuectl (release) and install it and the kubectl plugin kubectl-rustqueue into PREFIX/bin (~/.local/bin)
	$(RELEASE_CARGO) build --release --locked -p rustqueue-ctl --bins
	install -d $(PREFIX)/bin
	install -m 0755 $(TARGET_DIR)/release/rustqueuectl $(PREFIX)/bin/rustqueuectl
	ln -sf rustqueuectl $(PREFIX)/bin/kubectl-rustqueue
	@echo "installed $(PREFIX)/bin/rustqueuectl and $(PREFIX)/bin/kubectl-rustqueue"
	@echo "with $(PREFIX)/bin on PATH: rustqueuectl status, or kubectl rustqueue status"

# The release tarball (rustqueuectl, kubectl-rustqueue, completions) and the krew
# manifest with its sha256 filled in, for this machine's platform.
cli-dist: ## the rustqueuectl release tarball and its krew manifest in target/cli
	$(RELEASE_CARGO) build --release --locked -p rustqueue-ctl --bins
	operator/ctl/dist.sh --bin $(TARGET_DIR)/release/rustqueuectl --version $(CLI_VERSION) --out $(CLI_DIST)

# --- OCI images and the testbed's small conveniences: see docs/images.md and docs/e2e.md --------
# Images are assembled without a Docker daemon from real Debian packages with crane (pinned in
# scripts/versions.env); images/Dockerfile builds the same layout for people with Docker.
IMAGES_TARGET := $(abspath $(or $(CARGO_TARGET_DIR),target))
IMAGE_TAG ?= dev
export IMAGE_TAG
# Which build the images hold: `release` (what users run), or `debug`, the test build's own
# binaries (`make test` uses these: the same code without optimisation, so its images cost no
# second compilation of every dependency; the storage crash failpoints are compiled in and do
# nothing unless RUSTQUEUE_CRASH_FAILPOINT is set, which no Pod sets).
IMAGE_PROFILE ?= release
IMAGE_BIN_DIR = $(IMAGES_TARGET)/$(IMAGE_PROFILE)
ifeq ($(IMAGE_PROFILE),release)
IMAGE_BUILD = $(RELEASE_CARGO) build --release --locked -p rustqueue-server -p rustqueue-operator -p rustqueue-discovery -p rustqueue-gateway -p rustqueue-console -p rustqueue-ctl --bins
else ifeq ($(IMAGE_PROFILE),debug)
# cargo builds a package's binaries with its integration tests: one test target of each
IMAGE_BUILD = $(CARGO_TEST) --no-run $(call stage_targets,image-bins)
else
$(error IMAGE_PROFILE must be release or debug, not $(IMAGE_PROFILE))
endif

.PHONY: images
images: ## OCI images of rustqueued, rustqueue-operator, rustqueue-discovery, rustqueue-gateway and rustqueue-console (no Docker; IMAGE_PROFILE=release, or debug): OCI layout + docker-save tarballs in target/images
	scripts/deps.sh crane
	$(if $(RUSTQUEUE_SUITE),,scripts/console-ui.sh build)
	$(IMAGE_BUILD)
	scripts/build-images.sh --bin-dir $(IMAGE_BIN_DIR) --out $(IMAGES_TARGET)/images

.PHONY: images-test
images-test: $(IMAGES_BUILT) ## inspect the images: user 65532, entrypoint, no shell, runs from the image alone; prints sizes
	scripts/test-images.sh --out $(IMAGES_TARGET)/images

# The testbed runs Pods from OCI images pulled from its own registry (crane registry serve).
.PHONY: deps-crane
deps-crane: ## install the pinned crane (image plumbing, the testbed's registry)
	scripts/deps.sh crane


# `up` from the very build `make test` makes: the same packages and features, so nothing
# recompiles (a plain `cargo run -p rustqueue-testbed` resolves other features). cargo builds
# the testbed binary with the testbed's integration tests; one of them is enough.
TESTBED_TARGET := $(abspath $(or $(CARGO_TARGET_DIR),target))
TESTBED_BUILD = $(CARGO_TEST) --no-run --test pod_lifecycle
.PHONY: testbed-up
testbed-up: deps-k8s deps-crane ## start a testbed for poking at (TESTBED_ARGS="--nodes 5 ..."); prints the pinned kubectl's commands; Ctrl-C tears down
	$(TESTBED_BUILD)
	$(TESTBED_TARGET)/debug/rustqueue-testbed up $(TESTBED_ARGS)

# --- Service networking and cluster DNS in the testbed: see docs/e2e.md ------------------------
# kube-proxy (part of the k8s multi-call binary) runs in nftables mode and needs `nft`; CoreDNS
# (pinned in scripts/versions.env) is built from its Go module with the kubernetes plugin.
.PHONY: deps-cluster-net
deps-cluster-net: ## install CoreDNS and nftables (the testbed's cluster DNS, kube-proxy's tool)
	scripts/deps.sh coredns nftables

testbed-up: deps-cluster-net

# --- install paths: Helm chart, OLM bundle, a local cluster; see docs/install.md -----------------
# The chart's CRD and values schema and the OLM bundle are generated from config/ and crds/ by
# scripts/install-manifests.py (`make crds` runs it too); the tests below fail when they drift.
.PHONY: bundle
bundle: ## regenerate the OLM bundle (olm/) and the chart's CRD and values schema from config/ and crds/
	scripts/install-manifests.py

.PHONY: deps-helm
deps-helm: ## install the pinned helm (built from its Go module) into the cache
	scripts/deps.sh pyyaml helm

# No cluster: lint --strict, template with default and non-default values, RBAC and Pod equal to
# config/'s, bad values refused by values.schema.json (about 10 s).
.PHONY: chart-test
chart-test: deps-helm ## the Helm chart without a cluster: up to date, lint --strict, templates, schema refusals
	scripts/install-manifests.py --check
	scripts/crd-doc.py --check
	scripts/test-chart.py

# The operator-framework's validators (default bundle checks plus the operatorframework suite's
# OperatorHub, good-practices and deprecated-API checks), linked by olm/validate (a few seconds).
OLM_VALIDATE = $(RUSTQUEUE_CACHE)/olm-validate-$(shell . scripts/versions.env && echo $$OPERATOR_FRAMEWORK_API_VERSION)-$(shell sha256sum olm/validate/main.go | cut -c1-12)/bin/olm-validate
.PHONY: bundle-test
bundle-test: ## the OLM bundle: up to date with config/ and crds/, and valid for operator-framework's validators
	scripts/deps.sh pyyaml olm-validate
	scripts/install-manifests.py --check
	$(OLM_VALIDATE) -strict -k8s-version $(shell . scripts/versions.env && echo $${K8S_VERSION#v}) olm

# helm install / upgrade / uninstall on a 1-Node testbed from the images `make images` built,
# the installed operator bringing a 1-broker RustQueue to Ready (about 40 s on its own testbed).
# It is a test binary of rustqueue-e2e, so `make test` runs it within e2e-operator (which runs
# every binary of that crate); this target runs it alone.
.PHONY: e2e-install
e2e-install: $(TESTBED_DEPS) deps-helm $(SCENARIOS_BUILT) ## the Helm chart on the testbed: dry run, install, upgrade, uninstall
	cd e2e/k8s && RUSTQUEUE_E2E_IMAGES=$(IMAGES_TARGET)/images $(call e2e_exe,install)

# --- monitoring: Prometheus rules, Grafana dashboard, Argo CD health; see docs/monitoring.md ---
# promtool (pinned in scripts/versions.env) checks and unit-tests config/prometheus; a real
# rustqueued, rustqueue-discovery and rustqueue-gateway (the compat stages' debug build, so
# nothing recompiles) prove every series the rules and the dashboard name exists; gopher-lua,
# the engine Argo CD embeds, reads the statuses captured from the testbed. About 10 s once
# promtool is cached.
.PHONY: monitoring-test
monitoring-test: $(TESTS_BUILT) ## promtool check + test of config/prometheus, the rules' and dashboard's series against real binaries, Argo CD health on captured statuses
	scripts/monitoring-test.sh --bin-dir $(COMPAT_TARGET)/debug

# The Argo CD health tests (operator/controller/tests/argocd_health.rs and the e2e scenario)
# run docs/argocd.md through config/argocd/health, built into the cache by deps.sh.
.PHONY: deps-argocd-health
deps-argocd-health: ## build the Argo CD health evaluator (gopher-lua) into the cache
	scripts/deps.sh argocd-health


# A 3-broker RustQueue on a testbed from the images, until Ctrl-C; the testbed comes from the build
# `make test` made (as testbed-up's), so nothing recompiles.
.PHONY: cluster
cluster: deps-k8s deps-crane deps-cluster-net deps-nsqd images ## a local Kubernetes with the operator and a 3-broker RustQueue, from the images; prints how to use it; Ctrl-C tears down
	$(TESTBED_BUILD)
	scripts/cluster.sh --images $(IMAGES_TARGET)/images --testbed $(TESTBED_TARGET)/debug/rustqueue-testbed
