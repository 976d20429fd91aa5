# RustQueue. The README's two commands are `make run` and `make test`; the rest are the
# parts they are built from. See docs/development.md.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
export RUSTQUEUE_CACHE ?= $(HOME)/.cache/rustqueue

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install pinned external tools into ~/.cache/rustqueue (idempotent)
	scripts/deps.sh all

.PHONY: build
build: ## build every binary (release)
	$(CARGO) build --release --workspace --bins

.PHONY: run
run: ## start a local broker with default settings and print how to use it
	scripts/run.sh

.PHONY: fmt
fmt: ## format the code
	$(CARGO) fmt --all

.PHONY: fmt-check
fmt-check:
	$(CARGO) fmt --all -- --check

.PHONY: lint
lint: fmt-check ## rustfmt check and clippy with warnings denied
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings

.PHONY: unit
unit: ## unit and integration tests of every crate (includes crash tests)
	$(CARGO) test --workspace --all-features --locked

.PHONY: test
test: lint unit ## the whole suite: what .ci/run runs
	@echo "make test: all stages passed"

.PHONY: ci
ci: test
