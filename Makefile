# faceagent build, test and benchmark entry points.
# `make test` is what CI runs (through .ci/run); keep it under ~15 minutes on 2 cores.

GO        ?= go
PKGS      ?= ./...
# Every package must build for these gateway targets with CGO disabled.
CROSS_TARGETS := linux/arm/6 linux/arm/7 linux/arm64/-
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $$($(GO) env GOPATH)/bin/staticcheck)

# ---- release builds -------------------------------------------------------------------------
# The binaries shipped per board. A command whose directory holds no Go file yet is skipped with
# a note (they are being written in parallel); once it has code, a failing build fails the target.
COMMANDS  := agent/cmd/faceagent tools/sscli tools/facesim tools/taskctl tools/bench
PRESENT_COMMANDS = $(foreach c,$(COMMANDS),$(if $(filter-out %_test.go,$(wildcard $(c)/*.go)),$(c)))
MISSING_COMMANDS = $(filter-out $(PRESENT_COMMANDS),$(COMMANDS))

VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Tarball mtimes: the last commit's time (fixed for a given commit, and not 1970, which makes
# GNU tar warn on extraction).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# Stripped (-s -w), path-free (-trimpath), version stamped into agent/cmd/faceagent's
# `var version string` (tools that declare main.version get it too; -X ignores the rest).
LDFLAGS   := -s -w -X main.version=$(VERSION)
RELEASE_FLAGS = -trimpath -ldflags '$(LDFLAGS)'
BINDIR    ?= bin
DISTDIR   ?= dist
# Boards come from boards/*.toml through the same strict parser the agent uses.
BOARDENV  = $(GO) run ./boards/cmd/boardenv
BOARDS    ?= $(shell $(GO) run ./boards/cmd/boardenv 2>/dev/null | cut -d' ' -f1)

# Size budget of the stripped linux/arm GOARM=7 faceagent: 11 MB, read strictly as 11 * 10^6 bytes.
SIZE_LIMIT ?= 11000000

# ---- ARM under qemu -------------------------------------------------------------------------
ARM_TEST_PKGS := resp3 hlc agent/journal agent/outbox
QEMU_ARM      ?= $(shell command -v qemu-arm-static 2>/dev/null || command -v qemu-arm 2>/dev/null)
QEMU_ARM64    ?= $(shell command -v qemu-aarch64-static 2>/dev/null || command -v qemu-aarch64 2>/dev/null)
# .ci/qemu-exec lets tests that re-execute their own binary (the journal's lock and crash tests)
# do so under qemu-user without binfmt_misc. ARM_TEST_FLAGS=-short trims the run if needed.
ARM_TEST_FLAGS ?=

.PHONY: all build test fmt-check vet vet-arm staticcheck unit unit-norace bench fuzz attack cross cross-pkgs cross-boards \
	dist repro repro-quick size size-report test-arm smoke-arm generate clean soak

all: build

build:
	$(GO) build $(PKGS)

# vet-arm, test-arm, size and repro-quick cost about 2 minutes together (docs/benchmarks.md).
test: fmt-check vet vet-arm staticcheck rules unit unit-norace test-arm size repro-quick

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# vet-arm: every package, tests included, type-checks for 32-bit ARM (an untyped constant that
# overflows a 32-bit int only shows up here).
# It also runs internal/atomicalign (built for the host): a 64-bit sync/atomic operation on a
# field that is not 64-bit aligned on 32-bit ARM panics there at run time, and the host build
# never shows it.
vet-arm:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) vet $(PKGS)
	@mkdir -p $(BINDIR) && $(GO) build -o $(BINDIR)/atomicalign ./internal/atomicalign
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(BINDIR)/atomicalign $(PKGS) $(MOCHI_PKGS)

staticcheck:
	$(STATICCHECK) $(PKGS)

# rules: the Prometheus alerting rules parse, and each alert fires and stays quiet in its unit
# tests (configs/prometheus/alerts_test.yml). Needs promtool (Debian: prometheus). That the
# series they name exist is test/e2e's TestOpsConfigsUseLiveSeries.
PROMTOOL ?= promtool
.PHONY: rules
rules:
	$(PROMTOOL) check rules configs/prometheus/alerts.yml
	$(PROMTOOL) test rules configs/prometheus/alerts_test.yml

# The vendored mochi (third_party/mochi) is a module of its own, so ./... leaves out the tests
# of our patches there; they run by import path. (Upstream's code is not held to our vet and
# staticcheck rules: those stay on PKGS.)
MOCHI_PKGS ?= github.com/mochi-mqtt/server/v2/...

unit:
	$(GO) test -race -timeout 12m $(PKGS) $(MOCHI_PKGS)

# unit-norace: tests that measure what the race detector changes (stack frames, so they
# skip themselves under -race) run once more in a plain build.
NORACE_TESTS ?= ^TestHeartbeatsKeepReaderStacksSmall$$
unit-norace:
	$(GO) test -count=1 -run '$(NORACE_TESTS)' ./test/e2e/

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# soak: the state store soak tests at full length (agent/cmd/faceagent/soak_test.go): a
# broker-only faceagent, one client shaped like the IoT Operations Go SDK's, 100,000
# requests at 8 and at 64 in flight, then the same with a SIGKILL half way; a progress line
# every 5 s and a summary per level (p50/p99, peak RSS of faceagent, peak data_dir). No race
# detector: it measures. `make test` runs the same tests with 3,000 requests.
# SOAK_REQUESTS and SOAK_INFLIGHT (comma-separated) override the count and the levels.
SOAK_REQUESTS ?=
SOAK_INFLIGHT ?=
# It then runs the whitelist sync property test over the whole daemon (test/e2e) with 20
# seeds of 40 steps instead of `make test`'s 2 of 14; WLPROP_SEED=n replays one seed. Then
# the outbox's property tests with 200 and 120 histories of 800 steps (12 and 6 of 400).
WLPROP_SEED ?=
# Last, the whole daemon under steady mixed traffic for SOAK_DURATION (default 20m; TestDaemonSoak,
# no race detector: it measures RSS), its samples as CSV in SOAK_OUT when set.
SOAK_DURATION ?=
SOAK_OUT ?=
soak:
	FACEAGENT_SOAK=1 FACEAGENT_SOAK_REQUESTS=$(SOAK_REQUESTS) FACEAGENT_SOAK_INFLIGHT=$(SOAK_INFLIGHT) \
	  $(GO) test -count=1 -v -timeout 90m -run '^TestSoakStateStore' ./agent/cmd/faceagent
	FACEAGENT_SOAK=1 FACEAGENT_WLPROP_SEED=$(WLPROP_SEED) \
	  $(GO) test -race -count=1 -v -timeout 60m -run '^TestWhitelistSyncProperty$$' ./test/e2e
	FACEAGENT_SOAK=1 $(GO) test -race -count=1 -v -timeout 30m -run '^TestPropertyRandomHistories' ./agent/outbox
	FACEAGENT_SOAK=1 FACEAGENT_SOAK_DURATION=$(SOAK_DURATION) FACEAGENT_SOAK_OUT=$(SOAK_OUT) \
	  $(GO) test -count=1 -v -timeout 90m -run '^TestDaemonSoak$$' ./test/e2e

.PHONY: bench-abuse
# bench-abuse: the released daemon under 64 abusive clients for a minute, its peak RSS against
# the worst case its broker's bounds allow (tools/bench/abuse).
bench-abuse:
	FACEAGENT_ABUSE_LONG=1 $(GO) test -count=1 -run TestAbusiveClients -v -timeout 15m ./tools/bench/abuse/

.PHONY: bench-arm-whitelist
# bench-arm-whitelist: the 50,000-person digest, diff and reconciliation built for armv7 and
# run under qemu-arm-static (docs/benchmarks.md); not part of make test.
bench-arm-whitelist:
	GOARCH=arm GOARM=7 $(GO) test -c -o /tmp/faceagent-wl.arm ./agent/whitelist/
	qemu-arm-static /tmp/faceagent-wl.arm -test.run '^$$' -test.bench 'Digest50k|Diff50k|Reconcile50k' -test.benchmem -test.count 3

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

# attack: the long form of the attack suite (test/attack, docs/security.md): every attack
# against the live agent tens of times more than the short form that make test runs.
ATTACK_TIMEOUT ?= 30m
attack:
	FACEAGENT_ATTACK_LONG=1 $(GO) test -count=1 -timeout $(ATTACK_TIMEOUT) -v ./test/attack

# cross: every package builds (and vets) for each CPU the boards use, then every board's
# release binaries land in bin/<board>/.
cross: cross-pkgs cross-boards

cross-pkgs:
	@set -e; for t in $(CROSS_TARGETS); do \
	  os=$${t%%/*}; rest=$${t#*/}; arch=$${rest%%/*}; arm=$${rest#*/}; \
	  echo "== $$os/$$arch $${arm}"; \
	  if [ "$$arm" = "-" ]; then arm=""; fi; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build $(PKGS); \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) vet $(PKGS) >/dev/null; \
	done

cross-boards:
	@set -e; \
	$(BOARDENV) >/dev/null; [ -n "$(BOARDS)" ] || { echo "cross: no boards (boards/*.toml)"; exit 1; }; \
	for c in $(MISSING_COMMANDS); do echo "cross: $$c has no Go files yet, not built"; done; \
	for b in $(BOARDS); do \
	  env=$$($(BOARDENV) $$b); \
	  rm -rf $(BINDIR)/$$b; mkdir -p $(BINDIR)/$$b; \
	  for c in $(PRESENT_COMMANDS); do \
	    echo "== $$b $$c"; \
	    env $$env $(GO) build $(RELEASE_FLAGS) -o $(BINDIR)/$$b/$$(basename $$c) ./$$c; \
	  done; \
	done

# dist: one reproducible tarball per board in $(DISTDIR): bin/, configs/agent.toml, the systemd
# unit, the board profile, INSTALL (short) and install.md, SHA256SUMS inside; $(DISTDIR)/SHA256SUMS
# over the tarballs. Fixed order, owners, modes and mtimes; gzip -n drops name and time.
dist: cross-boards
	@set -e; mkdir -p $(DISTDIR); rm -rf $(DISTDIR)/stage; \
	for b in $(BOARDS); do \
	  name=faceagent-$(VERSION)-$$b; stage=$(DISTDIR)/stage/$$name; \
	  mkdir -p $$stage/bin $$stage/configs $$stage/systemd; \
	  cp $(BINDIR)/$$b/* $$stage/bin/ 2>/dev/null || echo "dist: $$b has no binaries yet"; \
	  if [ -f configs/agent.toml ]; then cp configs/agent.toml $$stage/configs/; \
	  else echo "dist: configs/agent.toml missing, not packaged"; fi; \
	  cp configs/faceagent.service $$stage/systemd/; \
	  cp boards/$$b.toml $$stage/configs/board.toml; \
	  cp docs/install.md $$stage/install.md; \
	  { echo "faceagent $(VERSION) for $$b"; \
	    echo; \
	    echo "1. sha256sum -c SHA256SUMS"; \
	    echo "2. sudo mkdir -p /opt/faceagent && sudo cp -a . /opt/faceagent/$(VERSION)"; \
	    echo "   sudo ln -sfn /opt/faceagent/$(VERSION)/bin/faceagent /usr/local/bin/faceagent"; \
	    echo "3. sudo useradd --system --home-dir /var/lib/faceagent --shell /usr/sbin/nologin --user-group --groups dialout faceagent"; \
	    echo "4. sudo install -D -m 0640 -g faceagent configs/agent.toml /etc/faceagent/agent.toml  (set board = \"$$b\", gateway_id, devices)"; \
	    echo "5. sudo install -m 0644 systemd/faceagent.service /etc/systemd/system/"; \
	    echo "6. sudo systemctl daemon-reload && sudo systemctl enable --now faceagent"; \
	    echo "7. journalctl -u faceagent -f"; \
	    echo; \
	    echo "Upgrade and rollback: install.md."; } > $$stage/INSTALL; \
	  (cd $$stage && find . -type f ! -name SHA256SUMS | LC_ALL=C sort | sed 's|^\./||' | xargs sha256sum > SHA256SUMS); \
	  tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
	    --mode='u+rwX,go+rX,go-w' --format=gnu -C $(DISTDIR)/stage -cf - $$name \
	    | gzip -n -9 > $(DISTDIR)/$$name.tar.gz; \
	  echo "dist: $(DISTDIR)/$$name.tar.gz"; \
	done; \
	rm -rf $(DISTDIR)/stage; \
	(cd $(DISTDIR) && LC_ALL=C ls faceagent-$(VERSION)-*.tar.gz | xargs sha256sum > SHA256SUMS); \
	cat $(DISTDIR)/SHA256SUMS

# repro: two clean clones of HEAD at different paths, the second built with a cold Go build
# cache (REPRO_COLD=1), must give byte-identical tarballs. Committed code only (the clones come
# from git); then each tarball's contents, owners and inner sums are checked. A cold build of one board takes ~5 minutes here, so make test runs repro-quick:
# one board, warm cache — it still catches anything path-, time- or order-dependent in the
# link and the packaging.
REPRO_BOARDS ?= $(BOARDS)
REPRO_COLD   ?= 1
repro:
	@set -e; tmp=$$(mktemp -d); trap 'chmod -R u+w $$tmp; rm -rf $$tmp' EXIT; \
	git clone -q . $$tmp/a/faceagent; git clone -q . $$tmp/b/other-path/src; \
	$(MAKE) -s -C $$tmp/a/faceagent dist BOARDS="$(REPRO_BOARDS)" >/dev/null; \
	$(if $(REPRO_COLD),GOCACHE=$$tmp/gocache) $(MAKE) -s -C $$tmp/b/other-path/src dist BOARDS="$(REPRO_BOARDS)" >/dev/null; \
	if cmp $$tmp/a/faceagent/dist/SHA256SUMS $$tmp/b/other-path/src/dist/SHA256SUMS; then \
	  echo "repro: identical:"; cat $$tmp/a/faceagent/dist/SHA256SUMS; \
	else \
	  diff $$tmp/a/faceagent/dist/SHA256SUMS $$tmp/b/other-path/src/dist/SHA256SUMS || true; \
	  echo "repro: builds differ"; exit 1; \
	fi; \
	(cd $$tmp/a/faceagent/dist && sha256sum --quiet -c SHA256SUMS); \
	for t in $$tmp/a/faceagent/dist/*.tar.gz; do \
	  owners=$$(tar tvzf $$t | awk '{print $$2}' | sort -u); \
	  [ "$$owners" = "0/0" ] || { echo "repro: $$t: owners $$owners, want 0/0"; exit 1; }; \
	  for f in bin/faceagent configs/agent.toml configs/board.toml systemd/faceagent.service INSTALL install.md SHA256SUMS; do \
	    tar tzf $$t | grep -q "^[^/]*/$$f$$" || { echo "repro: $$t lacks $$f"; exit 1; }; \
	  done; \
	  mkdir -p $$tmp/x && tar xzf $$t -C $$tmp/x && (cd $$tmp/x/* && sha256sum --quiet -c SHA256SUMS) && rm -rf $$tmp/x; \
	done; \
	echo "repro: contents, owners and inner SHA256SUMS checked"

repro-quick:
	@$(MAKE) --no-print-directory repro REPRO_BOARDS=rpi3-armv7 REPRO_COLD=

# size: fail when the stripped linux/arm GOARM=7 faceagent exceeds SIZE_LIMIT bytes.
size:
	@set -e; \
	if [ -z "$(filter agent/cmd/faceagent,$(PRESENT_COMMANDS))" ]; then \
	  echo "size: agent/cmd/faceagent has no Go files yet, nothing to measure"; exit 0; fi; \
	mkdir -p $(BINDIR)/size; \
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build $(RELEASE_FLAGS) -o $(BINDIR)/size/faceagent ./agent/cmd/faceagent; \
	n=$$(stat -c %s $(BINDIR)/size/faceagent); \
	echo "size: linux/arm/7 faceagent (stripped) = $$n bytes, limit $(SIZE_LIMIT) ($$((n * 100 / $(SIZE_LIMIT)))% used)"; \
	if [ $$n -gt $(SIZE_LIMIT) ]; then echo "size: over budget by $$((n - $(SIZE_LIMIT))) bytes"; exit 1; fi

# size-report: every binary per board (stripped), then what each module costs in the armv7
# faceagent (tools/sizereport: ELF symbol sizes summed by module; bss excluded).
size-report: cross-boards
	@set -e; echo "| board | binary | bytes |"; echo "|---|---|---:|"; \
	for b in $(BOARDS); do for f in $(BINDIR)/$$b/*; do \
	  [ -f "$$f" ] && echo "| $$b | $$(basename $$f) | $$(stat -c %s $$f) |"; done; done; \
	main=$(firstword $(filter agent/cmd/faceagent,$(PRESENT_COMMANDS)) $(PRESENT_COMMANDS)); \
	[ -n "$$main" ] || exit 0; \
	mkdir -p $(BINDIR)/nm; \
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build -trimpath -ldflags=-w -o $(BINDIR)/nm/main ./$$main; \
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) list -deps -f '{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{else}}std{{end}}' ./$$main > $(BINDIR)/nm/modules; \
	echo; echo "$$main, linux/arm/7, symbol table kept (-w only), by module:"; echo; \
	$(GO) run ./tools/sizereport $(BINDIR)/nm/modules $(BINDIR)/nm/main

# test-arm: the portable core's tests cross-compiled for armv7 and arm64 and run under
# qemu-user (no -race: the race detector does not exist on linux/arm), then the armv7 smoke
# test. Packages without Go files yet are skipped with a note.
test-arm:
	@set -e; \
	[ -n "$(QEMU_ARM)" ] && [ -n "$(QEMU_ARM64)" ] || { echo "test-arm: qemu-user-static is not installed (apt-get install qemu-user-static)"; exit 1; }; \
	pkgs=""; for p in $(ARM_TEST_PKGS); do \
	  if ls $$p/*.go >/dev/null 2>&1; then pkgs="$$pkgs ./$$p"; else echo "test-arm: $$p has no Go files yet, skipped"; fi; \
	done; \
	if [ -n "$$pkgs" ]; then \
	  echo "== linux/arm/7 under $(QEMU_ARM):$$pkgs"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) test -exec "$(CURDIR)/.ci/qemu-exec $(QEMU_ARM)" $(ARM_TEST_FLAGS) -timeout 10m $$pkgs; \
	  echo "== linux/arm64 under $(QEMU_ARM64):$$pkgs"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) test -exec "$(CURDIR)/.ci/qemu-exec $(QEMU_ARM64)" $(ARM_TEST_FLAGS) -timeout 10m $$pkgs; \
	fi
	$(MAKE) --no-print-directory smoke-arm

# smoke-arm: the armv7 faceagent, under qemu, with a broker-only config answers a state store
# SET and GET (test/release), and every board's faceagent runs on its board's emulated
# core (boards' qemu_cpu: catches a wrong GOARM). Skips, saying why, while faceagent or sscli
# is absent.
smoke-arm:
	FACEAGENT_ARM_SMOKE=1 QEMU_ARM=$(QEMU_ARM) QEMU_ARM64=$(QEMU_ARM64) $(GO) test -count=1 -v -run '^(TestARMSmoke|TestBoardCPUs)$$' ./test/release

generate:
	$(GO) generate $(PKGS)

clean:
	rm -rf $(BINDIR) $(DISTDIR)

# The embedded default: agent + broker + state store + simulated terminals + a batch of tasks
# with live progress (configs/demo.sh).
.PHONY: demo
demo:
	GO=$(GO) sh configs/demo.sh
