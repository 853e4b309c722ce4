# faceagent build, test and benchmark entry points.
# `make test` is what CI runs (through .ci/run); keep it under ~15 minutes on 2 cores.

GO        ?= go
PKGS      ?= ./...
# Every package must build for these gateway targets with CGO disabled.
CROSS_TARGETS := linux/arm/6 linux/arm/7 linux/arm64/-
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $$($(GO) env GOPATH)/bin/staticcheck)

.PHONY: all build test fmt-check vet staticcheck unit bench fuzz cross generate

all: build

build:
	$(GO) build $(PKGS)

test: fmt-check vet staticcheck unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(STATICCHECK) $(PKGS)

unit:
	$(GO) test -race -timeout 12m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# Runs every fuzz target for FUZZTIME each. go test accepts one -fuzz target per package
# invocation, so the targets are discovered and run one at a time.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

cross:
	@set -e; for t in $(CROSS_TARGETS); do \
	  os=$${t%%/*}; rest=$${t#*/}; arch=$${rest%%/*}; arm=$${rest#*/}; \
	  echo "== $$os/$$arch $${arm}"; \
	  if [ "$$arm" = "-" ]; then arm=""; fi; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build $(PKGS); \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) vet $(PKGS) >/dev/null; \
	done

generate:
	$(GO) generate $(PKGS)
