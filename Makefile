# jobplane: `make run` starts the standalone server, `make test` checks
# everything CI checks. Tools (buf and the protoc plugins) are pinned in
# tools.mod and run through `go tool`, so nothing but Go is needed.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO   ?= go
BUF  := $(GO) tool -modfile=tools.mod buf
ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: run
run: ## run the standalone server on 127.0.0.1:8080 (extra flags: ARGS='...')
	$(GO) run ./server/cmd/jobplane standalone $(ARGS)

.PHONY: build
build: ## build the jobplane binary into bin/
	$(GO) build -o bin/jobplane ./server/cmd/jobplane

.PHONY: generate
generate: ## regenerate gen/ from proto/
	$(BUF) generate

.PHONY: lint
lint: ## buf lint, buf format, buf breaking against main, go vet, gofmt
	$(BUF) lint
	$(BUF) format -d --exit-code
	@if git rev-parse --verify --quiet main >/dev/null && git cat-file -e main:buf.yaml 2>/dev/null; then \
		echo "buf breaking --against .git#branch=main"; \
		$(BUF) breaking --against '.git#branch=main'; \
	else \
		echo "buf breaking: main has no contract yet, nothing to compare"; \
	fi
	$(GO) vet ./...
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

.PHONY: check-generated
check-generated: ## fail if gen/ differs from what proto/ generates
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BUF) generate -o "$$tmp"; \
	if ! diff -r gen "$$tmp/gen"; then \
		echo "gen/ is stale: run 'make generate' and commit it with proto/"; exit 1; \
	fi; \
	echo "gen/ is up to date"

.PHONY: test
test: lint check-generated ## everything CI runs: lint, generated-code check, go test -race, conformance
	$(GO) test -race -count=1 ./...
	$(MAKE) conformance

.PHONY: conformance
conformance: ## build the reference server and run the conformance runner against it
	$(GO) build -o bin/jobplane ./server/cmd/jobplane
	$(GO) build -o bin/jobplane-conformance ./conformance/cmd/jobplane-conformance
	bin/jobplane-conformance --server-command '$(CURDIR)/bin/jobplane jobmanager --hastore {hastore} --listen {listen}' $(ARGS)

.PHONY: bench
bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...
