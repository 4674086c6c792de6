# idem's developer commands. `make help` lists them.

IDEM_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
GO_TEST_FLAGS ?= -race -count=1 -timeout 20m
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X main.version=$(VERSION)

.DEFAULT_GOAL := help
.PHONY: help build generate check-generate lint test run test-node demo

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build idemd into bin/.
	go build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

generate: ## Regenerate gen/ from proto/ with the pinned buf and plugins.
	rm -rf gen
	go tool buf generate

check-generate: ## Fail if gen/ differs from what `make generate` would write.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	go tool buf generate --output "$$tmp" && \
	diff -r "$$tmp/gen" gen && echo "gen/ is up to date"

lint: ## gofmt check, go vet and buf lint.
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	go tool buf lint

test: lint check-generate ## Lint, check gen/ for drift, run every test with -race against Postgres, then the Node worker's tests.
	go test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory test-node

test-node: ## Run the Node.js worker's tests (examples/node-worker). Without node/npm they are skipped with a notice; in CI (CI=true) that is an error.
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		if [ "$$CI" = "true" ]; then \
			echo "test-node: node and npm are required in CI (CI=true) to run the tests of examples/node-worker" >&2; \
			exit 1; \
		fi; \
		echo ""; \
		echo "########################################################################"; \
		echo "##  NOTICE: node/npm not found: the Node.js worker tests DID NOT RUN.  ##"; \
		echo "##  Install Node.js >= 18 and run 'make test-node' before you push.   ##"; \
		echo "########################################################################"; \
		echo ""; \
		exit 0; \
	fi; \
	cd examples/node-worker && \
	{ [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && \
	npm test

demo: ## Exactly-once payments over NATS JetStream with workers killed at random (examples/payments); DEMO_FLAGS adds flags.
	go build -ldflags "$(LDFLAGS)" -o bin/idemd ./cmd/idemd
	go run ./examples/payments -idemd bin/idemd -database-url "$(IDEM_DATABASE_URL)" $(DEMO_FLAGS)

run: ## Run idemd on 127.0.0.1:7070 against IDEM_DATABASE_URL (default: the local Postgres).
	go run -ldflags "$(LDFLAGS)" ./cmd/idemd serve --database-url "$(IDEM_DATABASE_URL)"
