# quotaqual — build, test, bench, lint.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/quotaqual/quotaqual/internal/version.Version=$(VERSION)
BIN      := bin/quotaqual

.PHONY: deps build test bench lint run image kind-node-image clean mutants peers peers-table

# Installs valkey-server (bookworm-backports), nftables, iproute2, util-linux when missing.
deps:
	@bash .ci/install-deps

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/quotaqual

# The whole suite: unit, conformance (real valkey-server), end-to-end (real processes), and the
# full qualification on every topology this machine supports. Two packages at once (Go's
# default on 2 cores): with three, a clean-clone run missed timing bounds on docker
# (gateway-crash's release by 150 ms) and a gateway test's inspection timed out — the
# machine's load, not the code.
test: deps build
	$(GO) test -count=1 -timeout 45m ./...

# Every figure is a ratio to a floor or a peer measured in the same run (docs/performance.md):
# the ledger and gateway benchmarks; BenchmarkOverhead again with the gateway alone on
# GOMAXPROCS=1 (its own CPU budget: on 2 cores its second P competes with Valkey at 1 client);
# the peer engines beside quotaqual's admission on one valkey-server (those not built by
# `make peers` are skipped, named); then the targets table. Every stage runs even when one
# before it failed (a benchmark failing on a loaded machine hides no other figure); make bench
# fails at the end if any did. The raw output is kept in bin/bench.txt.
bench: deps build
	@mkdir -p bin; rc=0; \
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./ledger/... ./gateway/... | tee bin/bench.txt" || rc=1; \
	bash -o pipefail -c "QUOTAQUAL_BENCH_GATEWAY_GOMAXPROCS=1 $(GO) test -run '^$$' -bench '^BenchmarkOverhead$$' -benchtime 2s -count 1 ./gateway/ | tee -a bin/bench.txt" || rc=1; \
	bash -o pipefail -c "$(GO) run ./internal/peers/peerbench/cmd/peerbench | tee -a bin/bench.txt" || rc=1; \
	echo; echo "targets (issue 25), each a ratio to its floor in this run:"; \
	$(GO) run ./internal/benchtargets/cmd/benchtargets < bin/bench.txt || rc=1; \
	if [ $$rc != 0 ]; then echo "make bench: a stage above failed (see its output)"; fi; \
	exit $$rc

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

run: deps build
	./$(BIN) run

# The mutation matrix (MUTANTS.md): the default qualification (netns) against every
# deliberately broken gateway and ledger variant, white-box and black-box: the catalogue of
# internal/mutant, which only the -tags quotaqual_mutants binary carries (never bin/quotaqual),
# and the blind set of internal/mutant/blind, patches each built into a gateway binary of its
# own and qualified by the unpatched bin/quotaqual. Runs one after another (~1 h);
# MUTANTS_FLAGS='-origin blind' or '-mutant NAME' runs a part.
mutants: deps
	@start=$$(date +%s); \
	CGO_ENABLED=0 $(GO) build -tags quotaqual_mutants -trimpath -ldflags '$(LDFLAGS)' -o bin/quotaqual-mutants ./cmd/quotaqual && \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/quotaqual && \
	$(GO) run ./internal/mutant/cmd/mutants -tagged bin/quotaqual-mutants -plain $(BIN) -out MUTANTS.md -build-time $$(( $$(date +%s) - start ))s $(MUTANTS_FLAGS)

# Container image for the docker topology: a static Linux binary on scratch, so nothing is
# pulled (no registry needed). With a registry: docker build -f Dockerfile.multistage -t quotaqual:dev .
# The local Valkey image (quotaqual-valkey:8) is built by docker/valkey/build.sh, or by the
# topology itself when missing.
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$$(docker version --format '{{.Server.Arch}}') \
		$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/image/quotaqual ./cmd/quotaqual
	docker build -t quotaqual:$(VERSION) -t quotaqual:dev .

# The kind node image the kind topology runs on, built locally from Debian packages and the Go
# module proxy (no registry): hack/kind-node-image/build-node-image.sh. Long (tens of minutes on 2
# cores) the first time; a no-op when the image exists. Build outputs stay in BUILD_DIR
# (default /var/tmp/quotaqual-kind-build), outside the repository.
kind-node-image:
	bash hack/kind-node-image/build-node-image.sh

# The third-party rate-limit engines qualified through the gateway seam (internal/peers: envoy
# ratelimit, gubernator), pinned there, built from the Go module proxy into the cache directory
# ($QUOTAQUAL_PEERS_DIR, else ~/.cache/quotaqual/peers/<name>@<version>/): minutes the first
# time, a no-op after. `make run` and `make test` do not need them; the tests that do skip
# without them.
peers: build
	./$(BIN) peers build

# docs/peers.md from real runs of every peer profile (netns, --profile reference): tens of
# minutes on 2 cores.
peers-table: peers
	./$(BIN) peers table --out docs/peers.md

clean:
	rm -rf bin quotaqual-evidence
