# jobplane: `make run` starts the standalone server, `make test` checks
# everything CI checks. Tools (buf and the protoc plugins) are pinned in
# tools.mod and run through `go tool`; the TypeScript SDK (sdk/ts) installs
# its own from its lock file with npm, so Go and node/npm are all it needs.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO   ?= go
# The repository is three Go modules joined by go.work: the server (.),
# the SDK users link (sdk/, which requires no server module) and the
# generated code (gen/). Go commands name all three.
GO_PKGS := ./... ./sdk/... ./gen/...
BUF  := GOWORK=off $(GO) tool -modfile=tools.mod buf
ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# RUN_FLAGS are make run's own flags. make run is the local development
# cluster, on 127.0.0.1 only, so it allows exec (examples/exec.yaml and
# the README's tour use it); `jobplane standalone` itself keeps exec off
# unless it is given --allow-exec. `make run RUN_FLAGS=` runs it closed.
RUN_FLAGS ?= --allow-exec

.PHONY: run
# make run says what it does while it builds: the first build on a fresh
# machine compiles every dependency (minutes), and go build -v names each
# package as it compiles it (a warm build names none).
run: ui ## run the standalone server on 127.0.0.1:8080, exec allowed, its dashboard at http://127.0.0.1:8080/ui/ (extra flags: ARGS='...'; RUN_FLAGS= without exec)
	@echo "make run: building bin/jobplane; the first build compiles every dependency and takes a few minutes, naming each package it compiles"
	$(GO) build -v -o bin/jobplane ./server/cmd/jobplane
	@echo "make run: starting jobplane standalone (Ctrl-C stops it)"
	exec bin/jobplane standalone $(RUN_FLAGS) $(ARGS)

.PHONY: build
build: ui ## build the jobplane binary (with the dashboard) into bin/
	$(GO) build -o bin/jobplane ./server/cmd/jobplane

.PHONY: generate
generate: ts-deps ## regenerate gen/ from proto/ (Go, and TypeScript into gen/ts)
	rm -rf gen/jobplane
	$(BUF) generate
	$(BUF) generate --template buf.gen.ts.yaml

# ts-deps installs sdk/ts's pinned packages (protoc-gen-es, the
# google.rpc protos, the compiler) from its lock file when they are
# missing or the lock file is newer than the install.
.PHONY: ts-deps
ts-deps: sdk/ts/node_modules/.package-lock.json

sdk/ts/node_modules/.package-lock.json: sdk/ts/package-lock.json
	npm ci --prefix sdk/ts --no-audit --no-fund --ignore-scripts

# CONTRACT_BASELINE is the commit of the contract's first release,
# jobplane contract 1.1 (the three packages jobplane.v1,
# jobplane.cluster.v1 and jobplane.hastore.v1). `make lint` refuses any
# change that breaks it (buf breaking, FILE rules); a change that must
# break it is a new major version, and moves this line on purpose.
CONTRACT_BASELINE := 255dd81c84c8634b9e952d537af5022a72dcb91b

.PHONY: lint
lint: ## buf lint, buf format, buf breaking against the contract's baseline, go vet, gofmt
	$(BUF) lint
	$(BUF) format -d --exit-code
	@if git cat-file -e $(CONTRACT_BASELINE)^{commit} 2>/dev/null; then \
		echo "buf breaking --against .git#ref=$(CONTRACT_BASELINE)"; \
		$(BUF) breaking --against '.git#ref=$(CONTRACT_BASELINE)'; \
	else \
		echo "buf breaking: the baseline commit $(CONTRACT_BASELINE) is not in this clone (a shallow clone?); nothing compared"; \
	fi
	$(GO) vet $(GO_PKGS)
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

.PHONY: check-generated
check-generated: ts-deps ## fail if gen/ differs from what proto/ generates
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BUF) generate -o "$$tmp"; \
	$(BUF) generate --template buf.gen.ts.yaml -o "$$tmp"; \
	if ! diff -r -x go.mod -x go.sum gen "$$tmp/gen"; then \
		echo "gen/ is stale: run 'make generate' and commit it with proto/"; exit 1; \
	fi; \
	echo "gen/ is up to date"

# The tests of every package share one jobplane binary (and one built
# with -race for the CLI's tests), built here once, instead of each
# package building its own; localcluster.Long (JOBPLANE_TEST_LONG=1)
# asks for the long versions of the process tests.
TEST_BINS := JOBPLANE_BIN='$(CURDIR)/bin/jobplane' JOBPLANE_RACE_BIN='$(CURDIR)/bin/jobplane-race'

# bins builds the binaries the tests, conformance and bench run, in one
# go build; tools compiles buf once (go tool caches it) so that tests
# calling buf curl do not compile it on their clock. BUILT=1 (set by
# `make test` once it has built them) skips both.
.PHONY: bins tools
bins:
ifndef BUILT
	$(MAKE) ui
	$(GO) build -o bin/ ./server/cmd/jobplane ./conformance/cmd/jobplane-conformance ./bench/cmd/jobplane-bench
endif

tools:
ifndef BUILT
	$(BUF) --version >/dev/null
endif

.PHONY: test-bins
test-bins: bins tools jobmanager-ts
ifndef BUILT
	$(GO) build -race -o bin/jobplane-race ./server/cmd/jobplane
endif

# jobmanager-ts/ is the TypeScript JobManager, a second implementation of
# the contract written from it alone: `make conformance` runs the whole
# suite against it, and the Go tests run it in a mixed cluster and behind
# the broken-server proxies.
.PHONY: jobmanager-ts
jobmanager-ts: ## build the TypeScript JobManager (jobmanager-ts/, written from the contract alone) into jobmanager-ts/dist
ifndef BUILT
	npm ci --prefix jobmanager-ts --no-audit --no-fund --ignore-scripts
	npm run build --prefix jobmanager-ts
endif

.PHONY: test
test: ## everything CI runs: lint, generated-code check, go test -race (smoke versions of the long process tests), a short fuzz pass, the TypeScript tests, the dashboard's browser tests, conformance, a quick bench
	$(MAKE) test-bins
	$(MAKE) BUILT=1 lint check-generated test-go fuzz-smoke test-ts test-ui conformance bench-quick

.PHONY: test-go
test-go: test-bins ## go test -race of the three modules, with the smoke versions of the long process tests
	@# 20m per package: the broken-server smoke table (one case per break, one at a time) takes about 9 minutes of mostly waiting on this 2-core machine, near go test's default of 10.
	$(TEST_BINS) $(GO) test -race -count=1 -timeout 20m $(GO_PKGS)

.PHONY: test-long
test-long: test-bins ## go test -race with the long versions of the process tests (the whole broken-server and broken-store tables, ...)
	$(TEST_BINS) JOBPLANE_TEST_LONG=1 $(GO) test -race -count=1 -timeout 60m $(GO_PKGS)

# FUZZ_TARGETS are the fuzz targets, as package:FuzzName. Go fuzzes one
# target per invocation; plain `go test` runs each target's seed corpus
# (its f.Add seeds and testdata/fuzz/FuzzName) as a test.
FUZZ_TARGETS := \
	./sdk/jobgraph:FuzzPrepare \
	./server/internal/dispatcher:FuzzDispatcherRequest \
	./server/hastore/hastorerpc:FuzzHAStoreRequest \
	./server/hastore/etcdstore:FuzzKeys \
	./server/hastore/etcdmember:FuzzParsePeers \
	./server/internal/cli:FuzzParseJobFile
FUZZTIME       ?= 60s
FUZZ_SMOKE_TIME ?= 2s

.PHONY: fuzz
fuzz: ## fuzz every target for FUZZTIME each (default 60s); a failing input is written to its package's testdata/fuzz/FuzzName
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	done

.PHONY: fuzz-smoke
fuzz-smoke: ## a short fuzz pass over every target (FUZZ_SMOKE_TIME each), part of make test
	$(MAKE) fuzz FUZZTIME=$(FUZZ_SMOKE_TIME)

# UI_ASSETS are the dashboard's built files, which the jobplane binary
# embeds (server/internal/webui); `make ui` builds them from ui/ with its
# own packages, installed from its lock file.
UI_ASSETS := server/internal/webui/assets/index.html
.PHONY: ui ui-deps
ui: $(UI_ASSETS) ## build the dashboard (ui/) into server/internal/webui/assets, embedded by the next build of bin/jobplane
ui-deps: ui/node_modules/.package-lock.json
ui/node_modules/.package-lock.json: ui/package-lock.json
	npm ci --prefix ui --no-audit --no-fund --ignore-scripts
$(UI_ASSETS): ui/node_modules/.package-lock.json ui/index.html ui/tsconfig.json ui/scripts/build.mjs $(shell find ui/src gen/ts -type f 2>/dev/null)
	npm run build --prefix ui --silent

# chromium is Debian's package, which the dashboard's browser tests drive
# (playwright-core, no browser download); installed when missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || { echo "make chromium: installing Debian's chromium"; \
		export DEBIAN_FRONTEND=noninteractive; \
		$(SUDO) apt-get install -y -q chromium || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }; }

.PHONY: test-ui
test-ui: bins chromium ## the dashboard in a real browser (headless chromium) against a real standalone
	cd ui && JOBPLANE_BIN='$(CURDIR)/bin/jobplane' node --test --test-concurrency=1 test/*.test.mjs

.PHONY: ui-screenshots
ui-screenshots: bins chromium ## the browser tests, saving a screenshot of each page into docs/screenshots
	mkdir -p docs/screenshots
	cd ui && UI_SCREENSHOTS='$(CURDIR)/docs/screenshots' JOBPLANE_BIN='$(CURDIR)/bin/jobplane' node --test --test-concurrency=1 test/*.test.mjs

.PHONY: test-ts
test-ts: bins jobmanager-ts ## the TypeScript SDK's tests (sdk/ts, node's test runner) against a real jobmanager built into bin/ (and the TypeScript JobManager of jobmanager-ts/ with the node Worker)
	npm ci --prefix sdk/ts --no-audit --no-fund --ignore-scripts
	JOBPLANE_BIN='$(CURDIR)/bin/jobplane' npm test --prefix sdk/ts

.PHONY: soak
soak: ## the chaos loop of real processes (200 cycles or 20 minutes, CHAOS_OUT=dir keeps the history of a failure), then 10 minutes of a steady cluster on the default timings (a task lease), and 10 more without a task lease
	$(GO) test -race -count=1 -timeout 30m -run TestChaos ./internal/chaos -chaos.cycles=200 -chaos.duration=20m -v
	$(GO) test -race -count=1 -timeout 20m -run TestSteadyLeadership ./internal/failover -steady.duration=10m -v
	$(GO) test -race -count=1 -timeout 20m -run TestSteadyLeadership ./internal/failover -steady.duration=10m -steady.task-lease=0 -v

# CONFORMANCE_WIRE_RUN are the cases `make conformance` runs again over
# gRPC, gRPC-Web and TLS (the whole suite runs over Connect and h2c): a
# job through its whole life, a hand-written JSON call, the runner's own
# calls to the JobMaster and the ResourceManager, and a failover.
CONFORMANCE_WIRE_RUN ?= idempotency/retry-in-another-encoding,lifecycle/cancel-running,fencing/stale-offer-refused,fencing/stale-resource-manager-token-refused,fencing/tokens/resource-manager-heartbeat,recovery/standby-takes-over
JOBMANAGER_CMD := $(CURDIR)/bin/jobplane jobmanager --hastore {hastore} --listen {listen}
TLS_DIR := $(CURDIR)/bin/conformance-tls

# TE_CONFORMANCE_CMD and TS_WORKER_CMD start the TaskExecutors that the
# TaskExecutor mode checks: the Go reference and the node Worker.
TE_CONFORMANCE_CMD := $(CURDIR)/bin/jobplane taskexecutor --log-level warn --hastore {hastore} --listen {listen} --conformance-invokables
TS_WORKER_CMD := node $(CURDIR)/sdk/ts/dist/test/conformance-worker.js --hastore {hastore} --listen {listen} --id {id}
# TS_JOBMANAGER_CMD starts the TypeScript JobManager, with the features
# it declares in TS_JOBMANAGER_CONFIG.
# Its task lease is the reference's default, 10 s: its own 3 s leaves a
# new JobMaster about a second to adopt after a 2 s session TTL, which
# adoption/paused-leader missed once on a loaded machine.
TS_JOBMANAGER_CMD := node $(CURDIR)/jobmanager-ts/dist/main.js --hastore {hastore} --listen {listen} --task-lease 10s
TS_JOBMANAGER_CONFIG := $(CURDIR)/jobmanager-ts/conformance-features.json

.PHONY: ts-build
ts-build: ## install the TypeScript SDK's dependencies and compile it into sdk/ts/dist
	npm ci --prefix sdk/ts --no-audit --no-fund --ignore-scripts
	npm run build --prefix sdk/ts

.PHONY: conformance
conformance: bins ts-build jobmanager-ts ## build the reference server, store and TaskExecutors and run the conformance runner against them (a subset again over gRPC, gRPC-Web and TLS), and against the TypeScript JobManager (the whole suite over Connect, TLS, gRPC and gRPC-Web)
	bin/jobplane-conformance --trace --server-command '$(JOBMANAGER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --protocol grpc --run '$(CONFORMANCE_WIRE_RUN)' --server-command '$(JOBMANAGER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --protocol grpcweb --run '$(CONFORMANCE_WIRE_RUN)' --server-command '$(JOBMANAGER_CMD)' $(ARGS)
	rm -rf '$(TLS_DIR)' && bin/jobplane certs ca --out '$(TLS_DIR)' >/dev/null && \
		bin/jobplane certs issue --ca-dir '$(TLS_DIR)' --name server --hosts 127.0.0.1,localhost --out '$(TLS_DIR)' >/dev/null
	bin/jobplane-conformance --trace --tls-ca '$(TLS_DIR)/ca.pem' --run '$(CONFORMANCE_WIRE_RUN)' \
		--server-command '$(JOBMANAGER_CMD) --tls-cert $(TLS_DIR)/server.pem --tls-key $(TLS_DIR)/server-key.pem --tls-ca $(TLS_DIR)/ca.pem' $(ARGS)
	bin/jobplane-conformance --trace --store-command '$(CURDIR)/bin/jobplane hastore --log-level warn --listen {listen} --data-dir {data}' $(ARGS)
	bin/jobplane-conformance --trace --protocol grpc --store-command '$(CURDIR)/bin/jobplane hastore --log-level warn --listen {listen} --data-dir {data}' $(ARGS)
	bin/jobplane-conformance --trace --taskexecutor-command '$(TE_CONFORMANCE_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --protocol grpc --taskexecutor-command '$(TE_CONFORMANCE_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --taskexecutor-command '$(TS_WORKER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --config '$(TS_JOBMANAGER_CONFIG)' --server-command '$(TS_JOBMANAGER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --config '$(TS_JOBMANAGER_CONFIG)' --tls-ca '$(TLS_DIR)/ca.pem' \
		--server-command '$(TS_JOBMANAGER_CMD) --tls-cert $(TLS_DIR)/server.pem --tls-key $(TLS_DIR)/server-key.pem --tls-ca $(TLS_DIR)/ca.pem' $(ARGS)
	bin/jobplane-conformance --trace --config '$(TS_JOBMANAGER_CONFIG)' --protocol grpc --server-command '$(TS_JOBMANAGER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --config '$(TS_JOBMANAGER_CONFIG)' --protocol grpcweb --server-command '$(TS_JOBMANAGER_CMD)' $(ARGS)

.PHONY: conformance-wire
conformance-wire: bins ## the whole conformance suite against the reference server again over gRPC, gRPC-Web and TLS (make conformance runs a subset of them)
	bin/jobplane-conformance --trace --protocol grpc --server-command '$(JOBMANAGER_CMD)' $(ARGS)
	bin/jobplane-conformance --trace --protocol grpcweb --server-command '$(JOBMANAGER_CMD)' $(ARGS)
	rm -rf '$(TLS_DIR)' && bin/jobplane certs ca --out '$(TLS_DIR)' >/dev/null && \
		bin/jobplane certs issue --ca-dir '$(TLS_DIR)' --name server --hosts 127.0.0.1,localhost --out '$(TLS_DIR)' >/dev/null
	bin/jobplane-conformance --trace --tls-ca '$(TLS_DIR)/ca.pem' \
		--server-command '$(JOBMANAGER_CMD) --tls-cert $(TLS_DIR)/server.pem --tls-key $(TLS_DIR)/server-key.pem --tls-ca $(TLS_DIR)/ca.pem' $(ARGS)

.PHONY: mutants
mutants: ## mutation testing: plant each of the suite's mutants in the server, run the suite, update the table in conformance/README.md
	$(GO) run ./conformance/internal/mutants -readme conformance/README.md $(ARGS)

# BENCH_QUICK=1 makes `make bench` a smoke run: every row once and briefly,
# BENCHMARKS.md left alone; it fails only when a scenario cannot run at all.
BENCH_QUICK ?=
BENCH_PKGS  := ./server/internal/scheduler ./server/hastore/... ./server/localcluster

.PHONY: bench
bench: bins chromium ## benchmarks: print the table and rewrite BENCHMARKS.md (BENCH_QUICK=1: brief smoke run, no rewrite)
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m $(if $(BENCH_QUICK),-count=1 -benchtime=1x,-count=3) $(BENCH_PKGS) | tee bin/gobench.txt
	@# Failover (row 7): one run per store of FAILOVER_CYCLES cycles, each a few seconds of real processes.
	FAILOVER_CYCLES=$(if $(BENCH_QUICK),2,20) $(GO) test -run '^$$' -bench BenchmarkFailover -benchtime=1x -count=1 -timeout 60m ./internal/failover | tee -a bin/gobench.txt
	@# Adoption (row 8): ADOPT_CYCLES SIGKILLs and SIGTERMs of the leader with ADOPT_JOBS running jobs, and with one job (the floor).
	ADOPT_JOBS=$(if $(BENCH_QUICK),50,1000) ADOPT_CYCLES=$(if $(BENCH_QUICK),1,5) $(GO) test -run '^$$' -bench BenchmarkAdoption -benchtime=1x -count=1 -timeout 60m ./internal/failover | tee -a bin/gobench.txt
	@# Checkpoints (row 9): 9a one job of 100 subtasks checkpointing every second over CHECKPOINT_WINDOW, 9b CHECKPOINT_JOBS one-subtask jobs every 10 s over CHECKPOINT_JOBS_WINDOW (each beside the same jobs without checkpoints), 9c CHECKPOINT_KILLS SIGKILLs of a checkpointing job's TaskExecutor.
	CHECKPOINT_WINDOW=$(if $(BENCH_QUICK),5s,60s) CHECKPOINT_JOBS=$(if $(BENCH_QUICK),50,1000) CHECKPOINT_JOBS_WINDOW=$(if $(BENCH_QUICK),15s,60s) CHECKPOINT_KILLS=$(if $(BENCH_QUICK),2,20) $(GO) test -run '^$$' -bench BenchmarkCheckpoints -benchtime=1x -count=1 -timeout 60m ./internal/failover | tee -a bin/gobench.txt
	@# Recovery at scale (row 11): a SIGKILL of the leader with RECOVER_WAITING jobs waiting for slots and RECOVER_RUNNING running, taken over by the standby; beside it the same with one running job.
	RECOVER_WAITING=$(if $(BENCH_QUICK),2000,100000) RECOVER_RUNNING=$(if $(BENCH_QUICK),200,10000) $(GO) test -run '^$$' -bench BenchmarkRecoveryAtScale -benchtime=1x -count=1 -timeout 60m ./internal/failover | tee -a bin/gobench.txt
	@# The dashboard (row 12): its first page drawn in chromium with DASHBOARD_JOBS jobs in the cluster, beside the floor.
	cd ui && JOBPLANE_BIN=$(CURDIR)/bin/jobplane DASHBOARD_JOBS=$(if $(BENCH_QUICK),500,10000) DASHBOARD_RUNS=$(if $(BENCH_QUICK),1,5) node bench/firstpage.mjs | tee -a ../bin/gobench.txt
	bin/jobplane-bench -jobplane bin/jobplane -gobench bin/gobench.txt $(if $(BENCH_QUICK),-quick,-out BENCHMARKS.md) $(ARGS)

.PHONY: bench-quick
bench-quick: ## BENCH_QUICK=1 make bench: every row briefly, to catch breakage (figures not asserted)
	$(MAKE) bench BENCH_QUICK=1
