# idem's developer commands. `make help` lists them.

# The local Postgres, for the targets that need one when IDEM_DATABASE_URL is
# unset. `make run` does not: without IDEM_DATABASE_URL it runs on SQLite.
LOCAL_POSTGRES_URL := postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
GO_TEST_FLAGS ?= -race -count=1 -timeout 20m
# VERSION is what the binaries say they are: the nearest v* tag (git
# describe), or before the first tag the Go pseudo-version of the commit
# (v0.0.0-20261201175430-12a4554a1b2c, what the go command calls that
# commit), +dirty with uncommitted changes; devel outside a git checkout.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || \
	{ p=$$(TZ=UTC git log -1 --abbrev=12 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h 2>/dev/null) && [ -n "$$p" ] && \
	  { git diff-index --quiet HEAD -- 2>/dev/null && echo "$$p" || echo "$$p+dirty"; }; } || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# buf has a module of its own (tools/go.mod): its requirements, a newer Go
# and pre-release protobuf among them, stay out of the go.mod that an SDK
# user's module reads. The protoc plugins are tools of idem's module, so that
# gen/ is made by the protobuf version the SDK runs with.
BUF := go tool -modfile=tools/go.mod buf
# golangci-lint is a tool of the same module; .golangci.yml says which
# linters run.
GOLANGCI_LINT := go tool -modfile=$(CURDIR)/tools/go.mod golangci-lint
# Modules of their own, for what pulls in dependencies an SDK user never
# needs: the benchmark tool (Redis, HDR histograms) and the demo (NATS).
GO_MODULES := cmd/idem-bench examples/payments

.DEFAULT_GOAL := help
.PHONY: help build install version generate check-generate generate-ts check-generate-ts lint test run clean-data test-ts test-node test-python test-scenarios demo console check-console test-console console-screenshots

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build idemd, idem and idem-bench into bin/.
	@$(call go-build-progress,build,-ldflags "$(LDFLAGS)" -o bin/,./cmd/...)
	go build -C cmd/idem-bench -ldflags "$(LDFLAGS)" -o "$(CURDIR)/bin/" .

install: ## Install idemd and idem into $(go env GOBIN), or $(go env GOPATH)/bin, and say whether that is on your PATH.
	go install -ldflags "$(LDFLAGS)" ./cmd/idemd ./cmd/idem
	@dir=$$(go env GOBIN); [ -n "$$dir" ] || dir="$$(go env GOPATH | cut -d: -f1)/bin"; \
	case ":$$PATH:" in \
	*":$$dir:"*) \
		echo "make install: idemd and idem are in $$dir, which is on your PATH"; \
		for b in idemd idem; do \
			found=$$(command -v $$b 2>/dev/null || true); \
			if [ -n "$$found" ] && [ "$$found" != "$$dir/$$b" ] && ! cmp -s "$$found" "$$dir/$$b"; then \
				echo "make install: but \`$$b\` runs $$found, another build, which comes first on your PATH; remove it, or put $$dir before it"; \
			fi; \
		done ;; \
	*) \
		echo "make install: idemd and idem are in $$dir, which is not on your PATH; to run them by name, add it:"; \
		echo "  export PATH=\"$$dir:\$$PATH\"" ;; \
	esac

version: ## Print the version that build, install and release stamp (docker build takes it as --build-arg VERSION).
	@echo "$(VERSION)"

generate: ## Regenerate gen/ from proto/ with the pinned buf and plugins.
	rm -rf gen
	$(BUF) generate

check-generate: ## Fail if gen/ differs from what `make generate` would write.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(BUF) generate --output "$$tmp" && \
	diff -r "$$tmp/gen" gen && echo "gen/ is up to date"

# The TypeScript package's generated code has a buf template of its own, so
# that `make generate` needs nothing but Go; these need Node and npm too.
TS_DIR := clients/typescript
TS_GEN := $(TS_DIR)/src/gen

# ts-deps installs the TypeScript package's dependencies as its lockfile
# pins them, unless they are already.
define ts-deps
{ [ $(TS_DIR)/node_modules/.package-lock.json -nt $(TS_DIR)/package-lock.json ] || (cd $(TS_DIR) && npm ci --no-audit --no-fund); }
endef

# need-node ends a recipe when node or npm is missing: with a notice that
# $(1) did not run, or with an error in CI (CI=true).
define need-node
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	if [ "$$CI" = "true" ]; then \
		echo "$(1): node and npm are required in CI (CI=true)" >&2; \
		exit 1; \
	fi; \
	echo ""; \
	echo "########################################################################"; \
	echo "##  NOTICE: node/npm not found: $(1) DID NOT RUN."; \
	echo "##  Install Node.js >= 20 and run 'make $(1)' before you push."; \
	echo "########################################################################"; \
	echo ""; \
	exit 0; \
fi
endef

generate-ts: ## Regenerate clients/typescript/src/gen from proto/ with the pinned buf and the lockfile's protoc-gen-es.
	@$(ts-deps)
	rm -rf $(TS_GEN)
	$(BUF) generate --template $(TS_DIR)/buf.gen.yaml

check-generate-ts: ## Fail if clients/typescript/src/gen differs from what `make generate-ts` would write.
	@$(ts-deps)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(BUF) generate --template $(TS_DIR)/buf.gen.yaml --output "$$tmp" && \
	diff -r "$$tmp/$(TS_GEN)" $(TS_GEN) && echo "$(TS_GEN) is up to date"

lint: ## gofmt check, go vet, golangci-lint (staticcheck, errcheck, unused, ineffassign; .golangci.yml), buf lint, and buf breaking against the proto at the merge base with main (the previous commit when on main).
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	@for m in $(GO_MODULES); do echo "go vet ./... (in $$m)"; (cd $$m && go vet ./...) || exit 1; done
	$(GOLANGCI_LINT) run ./...
	@for m in $(GO_MODULES); do echo "golangci-lint run ./... (in $$m)"; (cd $$m && $(GOLANGCI_LINT) run ./...) || exit 1; done
	$(BUF) lint
	@base=$$(git merge-base HEAD main 2>/dev/null || true); \
	if [ -z "$$base" ] || [ "$$base" = "$$(git rev-parse HEAD)" ]; then base=$$(git rev-parse -q --verify HEAD~1 || true); fi; \
	if [ -z "$$base" ]; then \
		if [ "$$(git rev-parse --is-shallow-repository 2>/dev/null)" = "true" ]; then \
			echo "buf breaking: this clone is shallow and has no earlier commit; fetch more history (git fetch --deepen=1) to check the API" >&2; exit 1; \
		fi; \
		echo "buf breaking: the first commit has nothing to compare with; skipped"; \
	else \
		echo "$(BUF) breaking --against .git#ref=$$base"; \
		$(BUF) breaking --against ".git#ref=$$base"; \
	fi

test: lint check-generate ## Lint, check gen/ for drift, run every test with -race (on IDEM_TEST_DATABASE_URL, the local Postgres, or a throwaway one the tests start), idem's module and then those of cmd/idem-bench and examples/payments, then the TypeScript package's, the Node and Python workers' and the console's tests (its drift check, and in Chromium).
	go test $(GO_TEST_FLAGS) ./...
	@for m in $(GO_MODULES); do echo "go test ./... (in $$m)"; (cd $$m && go test $(GO_TEST_FLAGS) ./...) || exit 1; done
	@$(MAKE) --no-print-directory test-ts
	@$(MAKE) --no-print-directory test-node
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-console

# console-node checks that node and npm are there for the console's target
# $(1), and installs console/'s packages as its lockfile has them. Without
# node the target is skipped with a notice; in CI (CI=true) that is an
# error. Building idemd never needs it: console/dist is committed.
define console-node
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	if [ "$$CI" = "true" ]; then echo "$(1): node and npm are required in CI (CI=true) for the console (console/)" >&2; exit 1; fi; \
	echo ""; \
	echo "########################################################################"; \
	echo "##  NOTICE: node/npm not found: make $(1) DID NOT RUN."; \
	echo "##  Install Node.js >= 18 and run 'make $(1)' before you push."; \
	echo "########################################################################"; \
	echo ""; \
	exit 0; \
fi; \
cd console && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
endef

console: ## Build the operator console from console/src into console/dist, which idemd embeds (commit it).
	@$(call console-node,console) && node build.mjs

check-console: ## Fail if console/dist differs from what `make console` would write (needs node; skipped with a notice without it).
	@$(call console-node,check-console) && node build.mjs --check

test-console: ## The console's drift check, then its tests in headless Chromium (/usr/bin/chromium; CHROMIUM_BIN for another) against a real idemd. Without node or Chromium they are skipped with a notice; in CI (CI=true) that is an error.
	@$(call console-node,test-console) && \
	if [ ! -x "$${CHROMIUM_BIN:-/usr/bin/chromium}" ]; then \
		if [ "$$CI" = "true" ]; then echo "test-console: no Chromium at $${CHROMIUM_BIN:-/usr/bin/chromium}: apt-get install chromium (or set CHROMIUM_BIN)" >&2; exit 1; fi; \
		node build.mjs --check || exit 1; \
		echo ""; \
		echo "########################################################################"; \
		echo "##  NOTICE: no Chromium: the console's browser tests DID NOT RUN."; \
		echo "##  apt-get install chromium and run 'make test-console' before you push."; \
		echo "########################################################################"; \
		echo ""; \
		exit 0; \
	fi; \
	npm test

console-screenshots: ## Retake docs/console-*.png: the console of an operator on a real idemd with sample records, in headless Chromium.
	@$(call console-node,console-screenshots) && node build.mjs --tests && go build -o build/idemd ../cmd/idemd && \
	node build/tools/screenshots.mjs ../docs

test-ts: ## Check clients/typescript/src/gen for drift and run the TypeScript package's tests against real idemd processes (both stores, both transports). Without node/npm they are skipped with a notice; in CI (CI=true) that is an error.
	@$(call need-node,test-ts); \
	$(ts-deps) && $(MAKE) --no-print-directory check-generate-ts && \
	cd $(TS_DIR) && go run ../../internal/testsupport/testdb/withpg npm test

test-node: ## Run the tests of the Node.js examples on the TypeScript package (examples/node-worker, and examples/double-charge/typescript against bin/idemd). Without node/npm they are skipped with a notice; in CI (CI=true) that is an error.
	@$(call need-node,test-node); \
	$(ts-deps) && (cd $(TS_DIR) && npm run --silent build) && \
	go build -o bin/idemd ./cmd/idemd && \
	(cd examples/double-charge/typescript && \
	 { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && \
	 IDEMD_BIN="$(CURDIR)/bin/idemd" npm test) && \
	cd examples/node-worker && \
	{ [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && \
	go run ../../internal/testsupport/testdb/withpg npm test

test-python: ## Run the Python package's tests (clients/python: every scenario on both stores, the wheel installed offline) and the Python examples' (examples/python-worker, and examples/double-charge/python against bin/idemd). Without python3 (>= 3.8) they are skipped with a notice; in CI (CI=true) that is an error.
	@if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' >/dev/null 2>&1; then \
		if [ "$$CI" = "true" ]; then \
			echo "test-python: python3 >= 3.8 is required in CI (CI=true) to run the tests of clients/python and examples/python-worker" >&2; \
			exit 1; \
		fi; \
		echo ""; \
		echo "########################################################################"; \
		echo "##  NOTICE: python3 >= 3.8 not found: the Python package's and the    ##"; \
		echo "##  Python worker's tests DID NOT RUN. Install Python 3 and run       ##"; \
		echo "##  'make test-python' before you push.                               ##"; \
		echo "########################################################################"; \
		echo ""; \
		exit 0; \
	fi; \
	cd clients/python && \
	PYTHONDONTWRITEBYTECODE=1 go run ../../internal/testsupport/testdb/withpg python3 -m unittest discover -s tests -v && \
	cd ../../examples/python-worker && \
	PYTHONDONTWRITEBYTECODE=1 go run ../../internal/testsupport/testdb/withpg python3 -m unittest discover -s tests -v && \
	cd ../.. && go build -o bin/idemd ./cmd/idemd && \
	cd examples/double-charge/python && \
	IDEMD_BIN="$(CURDIR)/bin/idemd" PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -v

test-scenarios: ## Run the Go SDK's side of clients/scenarios alone (make test runs it with the other Go tests): every scenario against a real idemd on PostgreSQL and on SQLite.
	go test $(GO_TEST_FLAGS) -run '^TestScenario' ./client

demo: ## Exactly-once payments over NATS JetStream with workers killed at random (examples/payments); DEMO_FLAGS adds flags.
	go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	go build -C examples/payments -o "$(CURDIR)/bin/payments-demo" .
	bin/payments-demo -idemd bin/idemd -database-url "$(or $(IDEM_DATABASE_URL),$(LOCAL_POSTGRES_URL))" $(DEMO_FLAGS)

run: ## Build idemd and idem (the CLI) into bin/, and run idemd on 127.0.0.1:7070 (IDEM_LISTEN; HTTP 7071, IDEM_HTTP_LISTEN; JSON 7072, IDEM_JSON_LISTEN): on PostgreSQL at IDEM_DATABASE_URL if set, otherwise on SQLite in ./idem-data (Go is all it needs).
	@echo "make run: building idemd and idem into bin/ (the first build compiles some $$(go list -deps ./cmd/idemd ./cmd/idem 2>/dev/null | wc -l | tr -d ' ') packages, minutes on 2 cores; later builds take seconds)"
	@$(call go-build-progress,run,-ldflags "$(LDFLAGS)" -o bin/,./cmd/idemd ./cmd/idem)
	bin/idemd serve $(if $(IDEM_DATABASE_URL),--database-url "$(IDEM_DATABASE_URL)")

# go-build-progress runs `go build -v $(2) $(3)` ($(3) the packages) and says
# how far it has got, so a cold build is not silent for minutes: a line at
# every tenth of the packages (go build -v names each as it starts compiling
# it), and one every 20 s without such a line (BUILD_PROGRESS_EVERY), naming
# the package begun last. go build's errors pass through as they are, and its
# exit status is the recipe's. $(1) prefixes the lines (the target's name).
BUILD_PROGRESS_EVERY ?= 20
define go-build-progress
total=$$(go list -deps $(3) 2>/dev/null | wc -l | tr -d ' '); \
{ (while sleep $(BUILD_PROGRESS_EVERY); do echo go-build-tick; done) & tick=$$!; \
  go build -v $(2) $(3) 2>&1; rc=$$?; kill $$tick 2>/dev/null; echo "go-build-exit $$rc"; } | \
awk -v total="$$total" -v prefix="make $(1)" ' \
	/^go-build-exit / { if (n > 0) printf "%s: compiled %d packages\n", prefix, n; exit $$2 } \
	/^go-build-tick$$/ { if (!shown && n > 0) printf "%s: still building: %d of about %d packages begun, the last %s\n", prefix, n, total, last; shown = 0; fflush(); next } \
	/^[A-Za-z0-9._~\/-]+$$/ { n++; last = $$0; if (n >= next_at) { printf "%s: compiling %d of about %d packages: %s\n", prefix, n, total, last; next_at = n + int(total / 10) + 1; shown = 1; fflush() } next } \
	{ print; fflush() }'
endef

clean-data: ## Delete ./idem-data, the records of `make run` on SQLite, to start the walkthrough afresh.
	rm -rf idem-data

.PHONY: release release-npm release-python
release: ## Cross-build idemd and idem for RELEASE_PLATFORMS (default linux and darwin, amd64 and arm64), static (CGO_ENABLED=0) and stamped with VERSION, with the SDK packages of RELEASE_SDKS (default python, the wheel and sdist, needing python3 >= 3.8; and typescript, the npm tarball, needing npm) of the same VERSION, into DIST (dist/) with SHA256SUMS.
	$(if $(filter python,$(RELEASE_SDKS)),@python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' >/dev/null 2>&1 || { echo "release: python3 >= 3.8 is needed to build the Python package (clients/python); RELEASE_SDKS=typescript leaves it out" >&2; exit 1; })
	rm -rf "$(DIST)" && mkdir -p "$(DIST)"
	$(foreach p,$(RELEASE_PLATFORMS),$(foreach c,idemd idem,$(call release-build,$(p),$(c))))
	$(if $(filter python,$(RELEASE_SDKS)),@$(MAKE) --no-print-directory release-python)
	$(if $(filter typescript,$(RELEASE_SDKS)),@$(MAKE) --no-print-directory release-npm)
	cd "$(DIST)" && $(SHA256SUM) idem* > SHA256SUMS
	@echo "$(DIST)/: $$(ls "$(DIST)" | wc -l | tr -d ' ') files; verify with: cd $(DIST) && $(SHA256SUM) -c SHA256SUMS"

# release-build builds the command $(2) for the platform $(1) (os/arch) as
# $(DIST)/$(2)_$(VERSION)_os_arch. The blank line ends each command, so that
# `make -n release` lists one build per line.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
RELEASE_SDKS ?= python typescript
DIST ?= dist
SHA256SUM := $(shell command -v sha256sum >/dev/null 2>&1 && echo sha256sum || echo "shasum -a 256")
# release-npm packs clients/typescript as $(DIST)/idemhq-idem-V.tgz, V being
# VERSION without its leading v (0.0.0-VERSION when that is not semver, as
# for a bare commit), from a copy whose package.json says V, with the
# repository's LICENSE.
release-npm: ## Pack the TypeScript package (@idemhq/idem) into DIST, with VERSION as its version.
	@command -v npm >/dev/null 2>&1 || { echo "release-npm: npm is required to pack clients/typescript" >&2; exit 1; }
	@$(ts-deps)
	@mkdir -p "$(DIST)"
	@v='$(VERSION)'; v=$${v#v}; \
	if ! printf '%s' "$$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$'; then \
		v="0.0.0-$$(printf '%s' '$(VERSION)' | tr -c '0-9A-Za-z.-' '-')"; \
	fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp -R $(addprefix $(TS_DIR)/,package.json package-lock.json prepare.mjs tsconfig.json tsconfig.build.json README.md src) "$$tmp/" && \
	{ [ ! -f LICENSE ] || cp LICENSE "$$tmp/"; } && \
	ln -s "$(CURDIR)/$(TS_DIR)/node_modules" "$$tmp/node_modules" && \
	cd "$$tmp" && npm pkg set version="$$v" && \
	npm pack --silent --pack-destination "$(abspath $(DIST))" >/dev/null && \
	echo "$(DIST)/idemhq-idem-$$v.tgz"

release-python: ## Build the Python package (idem-client: its wheel and sdist) into DIST, with VERSION as its version.
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' >/dev/null 2>&1 || { echo "release-python: python3 >= 3.8 is required to build clients/python" >&2; exit 1; }
	@mkdir -p "$(DIST)"
	@PYTHONDONTWRITEBYTECODE=1 python3 clients/python/build_backend/idem_build.py --out "$(DIST)" --version "$(VERSION)"

define release-build
CGO_ENABLED=0 GOOS=$(word 1,$(subst /, ,$(1))) GOARCH=$(word 2,$(subst /, ,$(1))) go build -trimpath -ldflags "-s -w $(LDFLAGS)" -o "$(DIST)/$(2)_$(VERSION)_$(subst /,_,$(1))" ./cmd/$(2)

endef

.PHONY: bench bench-pinned bench-ab bench-ab-pinned bench-build
# BENCH_URL is the Postgres the benchmarks run on.
BENCH_URL = $(or $(IDEM_DATABASE_URL),$(LOCAL_POSTGRES_URL))
# BENCH_REPLICAS is how many idemd replicas serve each Postgres service
# target of the bench runs, the workers spread over them round-robin.
BENCH_REPLICAS ?= 1
# BENCH_RUN is what bench's runs share: idemd started by idem-bench, the
# targets interleaved in four rounds of 2 s per target and scenario.
BENCH_RUN = bin/idem-bench --start-idemd --idemd-bin bin/idemd --compare \
	--database-url "$(BENCH_URL)" --duration 8s --rounds 4 --idemd-replicas $(BENCH_REPLICAS)
# BENCH_COALESCE_FLAGS turn the Go SDK's coalescing on in the service targets
# of bench's third run.
BENCH_COALESCE_FLAGS ?= --coalesce
# BENCH_PIN runs a command with Postgres on CPU 1 and the command on CPU 0
# (cmd/idem-bench/pinned.sh), Postgres's CPUs restored after.
BENCH_PIN = cmd/idem-bench/pinned.sh "$(BENCH_URL)"
# IDEMD_BIN_B is the other idemd build bench-ab compares bin/idemd with.
IDEMD_BIN_B ?=

# bench-runs are bench's three runs, each through $(1): nothing, or BENCH_PIN.
define bench-runs
	@echo "make $@ 1/3: C=32, unique, hot, replay and batch, every target"
	$(1) $(BENCH_RUN) --target service,service-sqlite,sql,redis --concurrency 32 \
		--scenario unique,hot,replay,batch --batch-size 100 $(BENCH_FLAGS)
	@echo "make $@ 2/3: C=1, unique and replay: one worker's latency, service against sql"
	$(1) $(BENCH_RUN) --target service,sql --concurrency 1 --scenario unique,replay $(BENCH_FLAGS)
	@echo "make $@ 3/3: C=32, unique with the Go SDK's coalescing ($(BENCH_COALESCE_FLAGS))"
	$(1) $(BENCH_RUN) --target service,service-sqlite,sql --concurrency 32 --scenario unique $(BENCH_COALESCE_FLAGS) $(BENCH_FLAGS)
endef

# bench-ab-runs are bench-ab's two runs, each through $(1).
define bench-ab-runs
	@[ -n "$(IDEMD_BIN_B)" ] || { echo "make $@: set IDEMD_BIN_B to the idemd build to compare bin/idemd with" >&2; exit 1; }
	@echo "make $@ 1/2: C=32, unique, replay and batch, bin/idemd (service) against $(IDEMD_BIN_B) (service-b)"
	$(1) $(BENCH_RUN) --target service,service-b --idemd-bin-b "$(IDEMD_BIN_B)" --concurrency 32 \
		--scenario unique,replay,batch --batch-size 100 $(BENCH_FLAGS)
	@echo "make $@ 2/2: C=1, unique and replay"
	$(1) $(BENCH_RUN) --target service,service-b --idemd-bin-b "$(IDEMD_BIN_B)" --concurrency 1 --scenario unique,replay $(BENCH_FLAGS)
endef

bench-build:
	go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	go build -C cmd/idem-bench -ldflags "$(LDFLAGS)" -o "$(CURDIR)/bin/" .

bench: bench-build ## Benchmark idem (idemd on Postgres and on SQLite) against direct SQL and a Redis lock, interleaved, with CPU per job by process and WAL per job, in three runs of about 4 minutes in all (docs/BENCHMARKS.md): C=32 unique, hot, replay and batch (100 messages a delivery); C=1 unique and replay; C=32 unique with the Go SDK's coalescing (BENCH_COALESCE_FLAGS). BENCH_FLAGS adds flags to each run; BENCH_REPLICAS=2 runs two idemd replicas per Postgres target.
	$(call bench-runs,)

bench-pinned: bench-build ## bench's runs with Postgres (postmaster and backends) on CPU 1 and idem-bench with its idemds on CPU 0, Postgres's CPUs restored after (cmd/idem-bench/pinned.sh: needs two CPUs, a local Postgres, and root or Postgres's user); BENCH_REPLICAS=2 for two idemd replicas.
	$(call bench-runs,$(BENCH_PIN))

bench-ab: bench-build ## A/B of bin/idemd (service) against another build (IDEMD_BIN_B=path, service-b), interleaved: C=32 unique, replay and batch, then C=1 unique and replay; BENCH_REPLICAS=2 for two replicas of each.
	$(call bench-ab-runs,)

bench-ab-pinned: bench-build ## bench-ab with Postgres on CPU 1 and the rest on CPU 0, as bench-pinned.
	$(call bench-ab-runs,$(BENCH_PIN))

.PHONY: bench-http
bench-http: ## The Go Idempotency-Key middleware (client/idemhttp): a no-op POST through it (http) against the same server without it (http-plain) and idem-bench's own unique jobs (service), interleaved, first requests and replays, at C=1 and at C=32; then what a captured 1 MiB response costs in allocations (go test -bench). About 3 minutes.
	go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	go build -C cmd/idem-bench -ldflags "$(LDFLAGS)" -o "$(CURDIR)/bin/" .
	@echo "make bench-http 1/3: C=1, unique and replay: the latency the middleware adds"
	$(BENCH_RUN) --target service,http,http-plain --concurrency 1 --scenario unique,replay $(BENCH_FLAGS)
	@echo "make bench-http 2/3: C=32, unique and replay: requests/s against idem-bench's unique jobs/s"
	$(BENCH_RUN) --target service,http,http-plain --concurrency 32 --scenario unique,replay $(BENCH_FLAGS)
	@echo "make bench-http 3/3: bytes allocated per request with a 1 MiB response (x-body: per response byte)"
	go test -run '^$$' -bench CapturedResponse -benchtime 200x ./client/idemhttp

.PHONY: bench-growth
bench-growth: ## Growth: unique on an empty table against one pre-filled with 5 million records (interleaved), then Claim latency while idemd's sweeper purges 1 million expired records; 5 to 10 minutes (docs/BENCHMARKS.md).
	go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	go build -C cmd/idem-bench -ldflags "$(LDFLAGS)" -o "$(CURDIR)/bin/" .
	bin/idem-bench --start-idemd --idemd-bin bin/idemd --compare \
		--database-url "$(or $(IDEM_DATABASE_URL),$(LOCAL_POSTGRES_URL))" \
		--target service,service-prefilled --prefill 5000000 \
		--concurrency 32 --duration 8s --rounds 4 --scenario unique $(BENCH_FLAGS)
	bin/idem-bench --start-idemd --idemd-bin bin/idemd \
		--database-url "$(or $(IDEM_DATABASE_URL),$(LOCAL_POSTGRES_URL))" \
		--target service --purge 1000000 --sweep-interval 1s \
		--concurrency 32 --duration 8s --rounds 4 --scenario unique $(BENCH_FLAGS)

.PHONY: bench-rate
bench-rate: ## docs/DESIGN.md §6's latency target: the service's closed-loop maximum (unique, C=32, 8 s), then an open loop at half that rate (BENCH_RATE sets the rate and skips the first run).
	@go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	@go build -C cmd/idem-bench -ldflags "$(LDFLAGS)" -o "$(CURDIR)/bin/" .
	@url="$(or $(IDEM_DATABASE_URL),$(LOCAL_POSTGRES_URL))"; rate="$(BENCH_RATE)"; \
	if [ -z "$$rate" ]; then \
		max=$$(bin/idem-bench --start-idemd --idemd-bin bin/idemd --target service --database-url "$$url" \
			--concurrency 32 --duration 8s --scenario unique --progress never --json | \
			sed -n 's/^ *"ops_per_sec": \([0-9.]*\).*/\1/p' | head -n 1); \
		[ -n "$$max" ] || { echo "bench-rate: the closed-loop run failed" >&2; exit 1; }; \
		rate=$$(awk -v m="$$max" 'BEGIN { printf "%d", m / 2 }'); \
		echo "closed-loop maximum $$max jobs/s; open loop at half of it, $$rate jobs/s"; \
	fi; \
	bin/idem-bench --start-idemd --idemd-bin bin/idemd --target service --database-url "$$url" \
		--concurrency 32 --duration 8s --scenario unique --rate "$$rate" $(BENCH_FLAGS)

.PHONY: robustness robustness-short soak
robustness: ## The robustness suite at full length (about 20 minutes): real idemd processes under faults, Patroni failovers and PgBouncer among them (installs Debian's patroni, etcd-server and pgbouncer where missing), every history checked for linearizability; numbers in docs/RELIABILITY.md.
	go test -tags robustness -count=1 -timeout 45m -run TestRobustness -v ./internal/testsupport/robustness -full $(ROBUSTNESS_FLAGS)

robustness-short: ## The short robustness suite that CI runs (each scenario for a few seconds; under 90 s).
	go test -tags robustness -count=1 -timeout 5m -run TestRobustness -v ./internal/testsupport/robustness $(ROBUSTNESS_FLAGS)

soak: ## 10^6 contended Claims against one idemd: double grants (must be 0), calls per second, idemd's RSS at start and end.
	go test -tags robustness -count=1 -timeout 40m -run TestSoak -v ./internal/testsupport/robustness -soak $(SOAK_FLAGS)
