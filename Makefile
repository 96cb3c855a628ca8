# quotaqual — build, test, bench, lint.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/quotaqual/quotaqual/internal/version.Version=$(VERSION)
BIN      := bin/quotaqual

.PHONY: build test bench lint run image clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/quotaqual

# The whole suite: unit, conformance (real valkey-server), end-to-end (real processes), and the
# full qualification on every topology this machine supports.
test: build
	$(GO) test -count=1 -timeout 15m ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./ledger/... ./gateway/...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

run: build
	./$(BIN) run

clean:
	rm -rf bin quotaqual-evidence
