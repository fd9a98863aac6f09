# meshwave: the two commands that matter are `make demo` and `make test`.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO ?= go
# The in-process kube-apiserver reports v0.0.0-master unless its version is
# stamped at link time, and kubectl cannot parse that.
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.37.2 \
               -X k8s.io/component-base/version.gitMajor=1 \
               -X k8s.io/component-base/version.gitMinor=37
# The longest one e2e scenario may take, and how many run at once.
E2E_TIMEOUT ?= 15m
E2E_JOBS ?= 3

# Every build but make unit's -race one is static and -trimpath, as the
# image's is: the image test, go vet, staticcheck, the e2e world, istiod,
# helm and the demo then share one build of the packages they have in
# common (the four modules require the same versions of them), where
# different flags would compile each of them again (a fresh machine's
# make test compiled client-go four times).
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

# The one version: the chart's appVersion. make build stamps it into the
# binary, and make image tags the image with it, the tag the chart's
# Deployment pulls unless image.tag says otherwise.
VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/meshwave/Chart.yaml)
# The commit stamped into the binary and the image's revision label, with
# -dirty when tracked files differ from it; empty outside a git checkout.
REVISION ?= $(shell r=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null || r=$$r-dirty; } && echo $$r)
# Stripped (-s -w): a third smaller, and a panic still prints its stack.
VERSION_LDFLAGS = -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
IMAGE_REPOSITORY ?= ghcr.io/meshwave/meshwave
# A PEM file of CA certificates for the image (e.g. /etc/ssl/certs/ca-certificates.crt);
# empty takes the Mozilla NSS roots pinned in hack/tools/go.mod, the same on every machine.
CA_BUNDLE ?=

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the agent into bin/meshwave and bin/kubectl-meshwave (the kubectl plugin); compile every package.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(VERSION_LDFLAGS)" -o bin/meshwave ./cmd/agent
	ln -f bin/meshwave bin/kubectl-meshwave
	$(GO) build ./...
	cd e2e && $(GO) build ./...

.PHONY: lint
lint: ## gofmt, tidy go.mod files, go vet, and staticcheck (from hack/tools) over the root module and hack/tools.
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	cd e2e && $(GO) mod tidy -diff
	cd hack/tools && $(GO) mod tidy -diff
	cd e2e/istio && $(GO) mod tidy -diff
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	cd hack/tools && $(GO) vet ./...
	cd hack/tools && $(GO) build -o ../../bin/staticcheck honnef.co/go/tools/cmd/staticcheck
	bin/staticcheck ./...
	cd hack/tools && ../../bin/staticcheck ./...
	@$(MAKE) --no-print-directory check-dashboard
	@$(MAKE) --no-print-directory check-version

.PHONY: version
version: ## Print the version: the chart's appVersion.
	@echo $(VERSION)

.PHONY: check-version
check-version: ## Fail unless the chart's appVersion is a semantic version an image can be tagged with.
	@echo '$(VERSION)' | grep -Eq '^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$$' || \
	  { echo "charts/meshwave/Chart.yaml: appVersion '$(VERSION)' is not a semantic version without build metadata (x.y.z or x.y.z-pre)"; exit 1; }

.PHONY: image
image: ## Build the agent's image, without a container daemon, into bin/meshwave-image.tar.
	cd hack/tools && $(GO) run ./image -source $(CURDIR) -version $(VERSION) -revision '$(REVISION)' \
	  -repository $(IMAGE_REPOSITORY) $(if $(CA_BUNDLE),-ca-bundle $(abspath $(CA_BUNDLE))) -o $(CURDIR)/bin/meshwave-image.tar

.PHONY: image-push
image-push: image ## Build the image and push it as IMAGE_REPOSITORY:VERSION with crane (registry login first).
	cd hack/tools && $(GO) tool crane push $(CURDIR)/bin/meshwave-image.tar $(IMAGE_REPOSITORY):$(VERSION)

.PHONY: dashboard
dashboard: ## Regenerate the Grafana dashboard into the chart, from hack/tools/dashboard.
	cd hack/tools && $(GO) run ./dashboard > ../../charts/meshwave/files/dashboard.json

.PHONY: check-dashboard
check-dashboard: ## Fail if the chart's dashboard is not what the generator writes.
	@cd hack/tools && $(GO) run ./dashboard | diff -u ../../charts/meshwave/files/dashboard.json - >/dev/null || \
	  { echo "charts/meshwave/files/dashboard.json is stale: run make dashboard"; exit 1; }

.PHONY: helm-lint
helm-lint: ## helm lint the chart (helm comes from hack/tools through the Go toolchain).
	cd hack/tools && $(GO) tool helm lint ../../charts/meshwave --namespace istio-system

# hack/tools runs without -race: its image test gzips a 70 MB binary several
# times, 100 s instrumented against 20 s, and it holds no concurrent code of ours.
.PHONY: unit
unit: ## Unit and table tests of the root module and of hack/tools (which builds the image and runs its binary).
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...
	cd hack/tools && $(GO) test -count=1 ./...

# Every fuzz target, as package:FuzzName. Add new ones to the list.
FUZZ_TARGETS := \
	./agent:FuzzParseConfig \
	./analysis:FuzzJudge \
	./analysis:FuzzUnscopedSelectors \
	./canary:FuzzParseStatus \
	./canary:FuzzReadMoveRecord \
	./canary:FuzzAnnotations \
	./canary:FuzzDecide
# The targets make test fuzzes briefly: those whose packages do not link
# the Kubernetes client. Fuzzing builds every package of the test binary
# instrumented, and the agent's would compile client-go and its
# dependencies again (7.5 of make test's minutes on a fresh machine).
# make unit replays every target's seed corpus; make fuzz fuzzes them all.
FUZZ_BRIEF_TARGETS := $(filter-out ./agent:%,$(FUZZ_TARGETS))
# How long `make fuzz` runs each target after its seed corpus, and how long
# it may spend shrinking an input (new coverage included) before going on.
# Counts, not durations: Go before 1.27 can fail a target with a bare
# "context deadline exceeded" when a worker is busy as a -fuzztime
# duration runs out (golang/go#75804), which a loaded machine hits.
FUZZ_TIME ?= 3000x
FUZZ_MINIMIZE_TIME ?= 200x

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_TIME (3000x) each, one after the other.
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t#*:}; \
	  echo "fuzz $$name in $$pkg for $(FUZZ_TIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_TIME) -fuzzminimizetime $(FUZZ_MINIMIZE_TIME) $$pkg; \
	done

.PHONY: prometheus
prometheus: ## Fetch Debian's prometheus and promtool into e2e/.cache (no system install).
	@e2e/hack/get-prometheus.sh

.PHONY: istio
istio: ## Build the real istiod (pilot-discovery) and helm, and copy Istio's charts, into e2e/.cache/istio.
	@e2e/hack/get-istio.sh

.PHONY: e2e
e2e: prometheus istio ## End-to-end tests on the local world (real apiserver, etcd, controllers, Prometheus); E2E_JOBS scenarios at once (3).
	E2E_LDFLAGS="$(K8S_LDFLAGS)" E2E_TIMEOUT=$(E2E_TIMEOUT) E2E_JOBS=$(E2E_JOBS) e2e/hack/run-e2e.sh

.PHONY: demo-check
# demo-check runs the two side by side, each in a directory of its own
# under bin/: both mostly wait on their waves, one after the other took
# 4.5 of a fresh make test's minutes.
demo-check: prometheus istio ## Run the demo and the fleet demo non-interactively, side by side; fails unless each ends as expected.
	cd e2e && $(GO) build -ldflags "$(K8S_LDFLAGS)" -o ../bin/demo ./cmd/demo
	@cd e2e && rc=0; \
	  ../bin/demo --check --dir $(CURDIR)/bin/demo-check/one > ../bin/demo-check-one.log 2>&1 & one=$$!; \
	  ../bin/demo --fleet --check --dir $(CURDIR)/bin/demo-check/fleet > ../bin/demo-check-fleet.log 2>&1 || rc=$$?; \
	  wait $$one || rc=$$?; \
	  cat ../bin/demo-check-one.log ../bin/demo-check-fleet.log; exit $$rc

# The explorer (canary.TestEveryEventSequenceKeepsTheInvariants) enumerates event sequences over the
# decisions, which are pure: make unit's -race build skips it (it would run
# many times slower and find nothing the plain build does not), and these
# targets run it without -race. explore-smoke is the depth make test runs
# (depth 3: about 8 s of work on two cores); explore goes deeper (depth 4:
# about 2,000,000 transitions, 10 to 20 minutes on two cores).
EXPLORE_DEPTH ?= 4
EXPLORE_SEEDS ?=
EXPLORE_CHECKS ?=
EXPLORE_GROUPS ?=

.PHONY: explore-smoke
explore-smoke: ## Explore every sequence of events over the decisions to a small depth and check the invariants (part of make test).
	@set -o pipefail; $(GO) test -count=1 -run '^TestEveryEventSequenceKeepsTheInvariants$$' -v ./canary | grep -v '^=== '

.PHONY: explore
explore: ## Explore deeper (EXPLORE_DEPTH=4; EXPLORE_SEEDS, EXPLORE_CHECKS, EXPLORE_GROUPS narrow it); writes bench/results.md's exploration section.
	@mkdir -p bench
	@set -o pipefail; MESHWAVE_EXPLORE_DEPTH=$(EXPLORE_DEPTH) MESHWAVE_EXPLORE_SEEDS=$(EXPLORE_SEEDS) \
	  MESHWAVE_EXPLORE_CHECKS=$(EXPLORE_CHECKS) MESHWAVE_EXPLORE_GROUPS=$(EXPLORE_GROUPS) \
	  MESHWAVE_EXPLORE_RESULTS=$(BENCH_OUT) MESHWAVE_EXPLORE_COMMIT=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) \
	  $(GO) test -count=1 -timeout 12h -run '^TestEveryEventSequenceKeepsTheInvariants$$' -v ./canary | grep -v '^=== '

# make test runs in two lanes. In the foreground: lint, the exploration,
# the e2e suite, then the benchmarks' small runs beside the demo (each
# boots a world and mostly waits on it; each one's output is printed when
# it ends). In the background from the start, at the lowest priority, so
# that it takes only the cores the foreground leaves idle: the -race build
# of the unit tests, and the brief fuzzing (FUZZ_BRIEF_TARGETS). Its output
# is printed when both lanes end; then the unit tests run, their build
# done.
.PHONY: test
test: ## Every tier: lint, the exploration (small), e2e, each benchmark once (small), the demo once, fuzz (briefly), unit.
	@mkdir -p bin; rm -f bin/test-background.rc; date +%s > bin/test-start; \
	  { nice -n 19 $(MAKE) --no-print-directory test-background > bin/test-background.log 2>&1; echo $$? > bin/test-background.rc; } & \
	  $(MAKE) --no-print-directory test-foreground; fg=$$?; wait; \
	  echo "== the background lane: the unit tests' -race build, fuzzing"; cat bin/test-background.log; \
	  [ "$$fg" -eq 0 ] && [ "$$(cat bin/test-background.rc)" -eq 0 ]
	@$(call timed,unit)
	@echo "== make test: $$(( $$(date +%s) - $$(cat bin/test-start) ))s"

# timed runs make with the arguments given and then says how long they
# took, so that make test's log shows where its time goes.
timed = s=$$(date +%s); $(MAKE) --no-print-directory $(1); rc=$$?; echo "== make $(strip $(1)): $$(( $$(date +%s) - s ))s"; exit $$rc

.PHONY: test-foreground
test-foreground:
	@$(call timed,lint)
	@$(call timed,explore-smoke)
	@$(call timed,prometheus istio)
	@$(call timed,e2e)
	@$(call timed,-j2 --output-sync=target bench-smoke demo-check)

.PHONY: test-background
test-background:
	@$(call timed,unit-race-build)
	@$(call timed,fuzz-brief)

.PHONY: fuzz-brief
fuzz-brief:
	@$(MAKE) --no-print-directory fuzz FUZZ_TARGETS="$(FUZZ_BRIEF_TARGETS)"

.PHONY: unit-race-build
unit-race-build:
	CGO_ENABLED=1 $(GO) test -race -count=1 -run '^$$' ./... > /dev/null

BENCH_OUT := $(CURDIR)/bench/results.md

.PHONY: bench
bench: prometheus istio ## Every benchmark at full size (about 2.5 hours: the wall-time comparison at batch 1 alone takes 90 minutes); writes bench/results.md with the machine, the date and every figure.
	@mkdir -p bench
	@{ echo "# meshwave benchmarks"; echo; \
	  echo "- date: $$(date -u +%Y-%m-%dT%H:%M:%SZ)"; \
	  echo "- machine: $$(uname -srm), $$(nproc) cores, $$(awk '/MemTotal/ {printf "%.0f GiB", $$2/1048576}' /proc/meminfo), $$(awk -F': ' '/model name/ {print $$2; exit}' /proc/cpuinfo)"; \
	  echo "- go: $$($(GO) env GOVERSION)"; \
	  echo "- commit: $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; echo; } > $(BENCH_OUT)
	@{ echo "## Pure speed (canary, 20 runs each)"; echo; echo '```'; } >> $(BENCH_OUT)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20x ./canary | grep -E '^(Benchmark|cpu:)' | tee -a $(BENCH_OUT)
	@{ echo '```'; echo; } >> $(BENCH_OUT)
	@{ echo "## A scrape of meshwave_revision_holders at 100,000 injected pods (agent, 20 runs each)"; echo; echo '```'; } >> $(BENCH_OUT)
	$(GO) test -run '^$$' -bench 'Holders' -benchmem -benchtime 20x ./agent | grep -E '^Benchmark' | tee -a $(BENCH_OUT)
	@{ echo '```'; echo; } >> $(BENCH_OUT)
	cd e2e && MESHWAVE_BENCH_OUT=$(BENCH_OUT) $(GO) test -timeout 6h -run '^$$' -bench . -benchtime 1x -ldflags "$(K8S_LDFLAGS)" ./bench/

.PHONY: study
study: ## Simulate waves for the sequential metric check against today's threshold mode (10,000 runs a cell); writes bench/results.md's study section and bench/study/*.svg.
	@mkdir -p bench
	cd hack/tools && $(GO) run ./study -runs $(STUDY_RUNS) -results $(BENCH_OUT) -commit $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

STUDY_RUNS ?= 10000

.PHONY: bench-smoke
bench-smoke: prometheus istio ## Each benchmark once, small, to prove it still works (part of make test).
	$(GO) test -run '^$$' -bench . -benchtime 1x ./canary
	MESHWAVE_BENCH_SMALL=1 $(GO) test -run '^$$' -bench 'Holders' -benchtime 1x ./agent
	cd e2e && MESHWAVE_BENCH_SMALL=1 $(GO) test -timeout 20m -run '^Test' -bench . -benchtime 1x -ldflags "$(K8S_LDFLAGS)" ./bench/

.PHONY: demo
demo: prometheus istio ## Run the demo on the local world, then keep it up until Ctrl-C (DEMO_FLAGS=--check exits).
	cd e2e && $(GO) run -ldflags "$(K8S_LDFLAGS)" ./cmd/demo $(DEMO_FLAGS)
