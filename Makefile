# Shoal's everyday commands. `make help` lists them.

GO        ?= go
BIN       := bin/shoal
BENCH_BIN := bin/shoal-bench
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
# `make run ADDR=0.0.0.0:8000` overrides the listen address; by default serve takes it from
# SHOAL_ADDR, the config file or its default, 127.0.0.1:8000.
ADDR      ?=
# Stockfish 11's repository (eight real commits), kept outside this one: `make demo SOURCE=1`
# plays a patch of it, and make test hands it to the tests that build engines from source
# (SHOAL_TEST_SF_FIXTURE), which skip without it, except in CI.
SF_FIXTURE ?= ../shared/fixtures/stockfish-sf11.git.tar.gz
TEST_ENV   := SHOAL_TEST_SF_FIXTURE=$(abspath $(SF_FIXTURE))

.DEFAULT_GOAL := help
.PHONY: help build run demo test test-race test-norace lint fmt bench bench-go fuzz clean FORCE

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-12s %s\n", $$1, $$2}'

build: ## build bin/shoal (the product) and bin/shoal-bench (the bench, the fleet simulator, the demo)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/shoal
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BENCH_BIN) ./cmd/shoal-bench

run: build ## build and serve on the embedded database in ./data
	$(BIN) serve $(if $(ADDR),--addr $(ADDR))

demo: build ## serve on a temporary database and watch a few hundred simulated workers decide an SPRT test; ENGINE=/usr/games/stockfish: local workers decide one with real games; SOURCE=1: a Stockfish 11 patch submitted by branch, built from source and played
	$(BENCH_BIN) demo $(if $(ENGINE),--engine $(ENGINE))$(if $(SOURCE), --source $(SF_FIXTURE))

test: test-race test-norace ## vet, then every test with the race detector, then the race-free end-to-end pass

test-race:
	$(GO) vet ./...
	$(TEST_ENV) $(GO) test -race -count=1 ./...

# Tests that build the binary, run long end-to-end scenarios (fleets of simulated workers, real
# engines built from source) or drive a real browser carry //go:build !race and are named
# TestBinary..., TestE2E..., TestBuildE2E... or TestBrowser...; the browser test saves its
# screenshots under artifacts/screenshots. The pass takes longer than go test's default 10
# minutes on a slow machine, hence its own timeout.
test-norace:
	$(TEST_ENV) $(GO) test -count=1 -timeout 30m -run 'Binary|E2E|Browser' ./cmd/shoal/ ./cmd/shoal-bench/ ./worker/

lint: ## gofmt, go vet, and golangci-lint (depguard keeps the package layering) if installed
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }
	$(GO) vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; else echo 'golangci-lint not installed: skipped'; fi

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

# `make bench BASELINE=<git ref>` also builds that commit (bin/shoal-baseline) and runs steady
# and each storm against it and this build alternately (four legs each), in the same run, for
# this build's ratios to it.
# The full run also climbs the capacity ladder (200,000 to 1,000,000 equivalent workers, until
# a step breaks a target) and restarts the server under 500,000: about 35 minutes on two cores
# with four steps to 750,000, up to 3 more for the fifth. The ceiling runs first: its bare
# handler is the yardstick of every CPU ratio in the report.
# The report goes to bench-out/ (ignored by git); PUBLISH=1 replaces the committed one in
# docs/benchmarks, the profiles staying in bench-out/profiles, so that docs/ keeps figures only.
BASELINE  ?=
PUBLISH   ?=
BENCH_OUT := $(if $(PUBLISH),docs/benchmarks,bench-out)
BENCH_LADDER = ,capacity,reconnect --capacity-scales 20,30,50,75,100
bench: build $(if $(BASELINE),bin/shoal-baseline) ## the performance report in bench-out/ (PUBLISH=1: docs/benchmarks): the journal's cost, a takeover, the capacity ladder and a restart under 500,000 included; QUICK=1 for small sizes (no ladder, no restart), BASELINE=<ref> to compare
	$(BENCH_BIN) bench $(if $(QUICK),--quick) $(if $(BASELINE),--baseline bin/shoal-baseline) --scenarios ceiling,steady,storm,critical-section,durability$(if $(QUICK),,$(BENCH_LADDER)) --out $(BENCH_OUT)$(if $(PUBLISH), --profiles bench-out/profiles)

bin/shoal-baseline: FORCE
	rm -rf bin/baseline-src && mkdir -p bin/baseline-src
	git archive $(BASELINE) | tar -x -C bin/baseline-src
	cd bin/baseline-src && $(GO) build -trimpath -o ../shoal-baseline ./cmd/shoal
	rm -rf bin/baseline-src

FORCE:

bench-go: ## Go benchmarks of the hot paths (request_task, update_task, SPRT update, credential check, decoding)
	$(GO) test -run '^$$' -bench . -benchmem ./...

FUZZTIME ?= 30s
# Every fuzz target is found by name, so a new one is fuzzed without editing this file.
fuzz: ## run every fuzz target (func Fuzz... in a _test.go) for FUZZTIME (30s) each
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		for name in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go | cut -d' ' -f2); do \
			echo "$(GO) test -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) $$dir/"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$dir/; \
		done; \
	done

clean: ## remove build output and unpublished bench reports (not ./data)
	rm -rf bin bench-out
