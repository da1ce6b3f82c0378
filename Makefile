# HarnessFacts. `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Tools are built from the Go module proxy at pinned versions into a cache
# outside the clone, keyed by version, so a fresh clone and CI reuse them.
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/harnessfacts
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN ?= $(CACHE)/tools/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
GOLANGCI_LINT ?= $(CACHE)/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

# The agent CLIs: as root, where the node-agent image has them (bwrap runs as
# the agent's uid and must reach them; /root is private); else in the cache.
AGENT_CLIS ?= $(if $(filter 0,$(shell id -u)),/opt/harnessfacts/agents,$(CACHE)/agent-clis)

BIN ?= bin
GO_TEST_FLAGS ?=
FUZZTIME ?= 15s
# make bench: how often each quick benchmark repeats (-count; read the medians).
BENCH_COUNT ?= 3
# The sandbox-runtime make bench compares with (issue #18 measured this one).
SRT_VERSION ?= 0.0.83

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: demo
demo: ## The main job: a real HarnessRun end to end on this machine (harnessfacts dev, kubectl, harnessfacts logs -f and wait, evidence verify; then a real agent CLI against fake-provider when one is installed).
	@hack/demo.sh

# CGO_ENABLED=0, as in the Dockerfile: sandbox-init runs inside environment
# images, which need not have this host's libc and loader.
.PHONY: build
build: ## Build bin/harnessfacts (run and version; every other command it hands to bin/harnessfacts-full, which holds them all), bin/harnessfacts-node-agent (the node-agent alone, the node image's entry point) and bin/harnessfacts-sandbox-init (the small program a stdio MCP server is, and on Windows each sandbox starts first), statically linked as in the images.
	CGO_ENABLED=0 go build -o $(BIN)/ ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent ./cmd/harnessfacts-sandbox-init

.PHONY: build-all
build-all: ## Build every package for linux, windows and darwin, and vet every package, tests included, for windows.
	GOOS=linux go build ./...
	GOOS=windows go build ./...
	GOOS=darwin go build ./...
	GOOS=windows go vet ./...

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Write the generated deepcopy code of api/, the redactor's facts of gitleaks' rules (node-agent/redact/knownfacts.go) and the CRDs' guarded CEL rules (internal/crdschema/guards.go).
	$(CONTROLLER_GEN) object paths=./api/...
	go test ./node-agent/redact -run '^TestKnownFactsAreCurrent$$' -update
	go test ./internal/crdschema -run '^TestRuleGuardsAreCurrent$$' -update

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Write the CRDs (config/crd/bases, and config/crd/compact, the form local validation reads) and RBAC (config/rbac), and copy them into the chart.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	go run ./hack/crdcompact config/crd/bases config/crd/compact
	$(CONTROLLER_GEN) rbac:roleName=harnessfacts-controller paths=./controllers/... output:rbac:artifacts:config=config/rbac/controller
	rm -f charts/harnessfacts/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/harnessfacts/files/crds/
	cp config/rbac/controller/role.yaml charts/harnessfacts/files/controller-role.yaml

.PHONY: fmt
fmt: ## gofmt every Go file.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet every package.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (pinned; .golangci.yml).
	$(GOLANGCI_LINT) run ./...
	cd test/gitleaks && $(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate manifests ## Fail when generated files, gofmt or go.mod are out of date.
	go mod tidy
	cd test/gitleaks && go mod tidy
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if [ -n "$$(git status --porcelain -- api config charts node-agent/redact/knownfacts.go internal/crdschema/guards.go go.mod go.sum test/gitleaks/go.mod test/gitleaks/go.sum)" ]; then \
		echo "generated files or go.mod are out of date; run 'make generate manifests' and 'go mod tidy' (also in test/gitleaks), then commit:"; \
		git status --porcelain -- api config charts go.mod go.sum test/gitleaks; git diff --stat -- api config charts go.mod go.sum test/gitleaks; exit 1; fi

##@ Test

.PHONY: control-plane
control-plane: ## Build (or reuse) kube-apiserver, etcd and kubectl for tests; prints their directory.
	@hack/control-plane.sh

.PHONY: deps
deps: ## Install the system packages tests need (bubblewrap, curl) when missing.
	@hack/install-deps.sh

# -count=1: test/e2e, test/agents, test/install and test/metrics build the
# binaries from the tree and run them, which go test's cache cannot see: a
# change to a package only the binaries import left their results cached.
.PHONY: test
test: deps ## Run every test against a real API server, real bwrap and the real agent CLIs (builds the control plane, Helm and the CLIs on first use).
	@hack/helm.sh >/dev/null # before go test: a cold Helm build can outlast go test's timeout
	@clis=$$(hack/install-agent-clis.sh $(AGENT_CLIS)); assets=$$(hack/control-plane.sh); \
	HARNESSFACTS_AGENT_CLIS=$$clis KUBEBUILDER_ASSETS=$$assets go test -count=1 -timeout 30m $(GO_TEST_FLAGS) ./...
	cd test/gitleaks && go test -count=1 $(GO_TEST_FLAGS) ./... # the redactor against gitleaks' own detector (a module of its own)

.PHONY: test-race
test-race: deps ## Run the concurrent packages' tests under the race detector (node-agent, controllers, sandbox, internal; about 10 minutes). Tests that measure CPU or memory skip.
	@assets=$$(hack/control-plane.sh); \
	KUBEBUILDER_ASSETS=$$assets go test -race -count=1 -timeout 30m $(GO_TEST_FLAGS) ./node-agent/... ./controllers/... ./sandbox/... ./internal/...

.PHONY: test-agents
test-agents: deps ## Run only the agent CLIs end to end (Claude Code, Codex, Gemini CLI, OpenCode, Aider) against harnessfacts fake-provider.
	@clis=$$(hack/install-agent-clis.sh $(AGENT_CLIS)); assets=$$(hack/control-plane.sh); \
	HARNESSFACTS_AGENT_CLIS=$$clis KUBEBUILDER_ASSETS=$$assets go test -count=1 -timeout 30m $(GO_TEST_FLAGS) ./test/agents/...

.PHONY: test-node
test-node: deps ## As root: a real single-node cluster on this machine (hack/node.sh), engine-less images, the chart installed; samples, both node modes, a real CLI and the faults through a real kubelet.
	@hack/helm.sh >/dev/null
	@hack/node-tools.sh >/dev/null # before go test: a cold build can outlast its timeout
	@hack/node-agent-rootfs.sh >/dev/null
	@hack/install-agent-clis.sh $(AGENT_CLIS) >/dev/null
	go test -tags node -count=1 -timeout 45m -v $(GO_TEST_FLAGS) ./test/node/

.PHONY: node-start
node-start: ## As root: start the real single-node cluster (hack/node.sh start); prints its kubeconfig.
	@hack/node.sh start

.PHONY: node-stop
node-stop: ## Stop it and remove every trace from the host (hack/node.sh stop).
	@hack/node.sh stop

.PHONY: chart-test
chart-test: deps ## Render, lint and apply the chart and kustomize output to a real API server; run the sample under the chart's RBAC.
	@hack/helm.sh >/dev/null
	@assets=$$(hack/control-plane.sh); KUBEBUILDER_ASSETS=$$assets go test $(GO_TEST_FLAGS) ./test/install/...

.PHONY: chart-lint
chart-lint: ## helm lint the chart.
	@helm=$$(hack/helm.sh); $$helm lint --strict charts/harnessfacts

.PHONY: fuzz
fuzz: ## A short run of each fuzz target (FUZZTIME each, default 15s).
	go test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(FUZZTIME) ./node-agent/fixture
	go test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./node-agent/redact
	go test -run '^$$' -fuzz '^FuzzKeywordLanes$$' -fuzztime $(FUZZTIME) ./node-agent/redact

.PHONY: bench
bench: deps ## Run issue #18's benchmarks (real API server, real bwrap), each goal's ratio against a baseline from the same run; `make bench-deps` first for the sandbox-runtime comparison.
	@assets=$$(hack/control-plane.sh); failed=""; \
	go build -o /dev/null ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent ./cmd/harnessfacts-sandbox-init || exit 1; \
	go test -run '^$$' -bench 'SandboxStart$$' -benchtime 100x -count $(BENCH_COUNT) ./sandbox/ || failed="$$failed SandboxStart"; \
	go test -run '^$$' -bench OutputPipeline -benchtime 3x -count $(BENCH_COUNT) ./node-agent/executor/ || failed="$$failed OutputPipeline"; \
	KUBEBUILDER_ASSETS=$$assets go test -timeout 30m -run '^$$' -bench LocalRun -benchtime 20x -count $(BENCH_COUNT) ./test/e2e/ || failed="$$failed LocalRun"; \
	KUBEBUILDER_ASSETS=$$assets go test -timeout 30m -run '^$$' -bench NodeAgentThroughput -benchtime 200x ./test/e2e/ || failed="$$failed NodeAgentThroughput"; \
	KUBEBUILDER_ASSETS=$$assets go test -timeout 30m -run '^$$' -bench CreateToScheduled -benchtime 1x ./controllers/ || failed="$$failed CreateToScheduled"; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed (each benchmark runs whatever the others did)"; exit 1; fi

.PHONY: bench-suite
bench-suite: deps ## Run BenchmarkSuite2000 (a HarnessSuite of 2,000 runs over 20 fake nodes; minutes, kept out of make bench's 15).
	@assets=$$(hack/control-plane.sh); \
	KUBEBUILDER_ASSETS=$$assets go test -timeout 30m -run '^$$' -bench Suite2000 -benchtime 1x ./controllers/

.PHONY: bench-deps
bench-deps: ## Install what make bench compares with: sandbox-runtime (srt, SRT_VERSION, default 0.0.83) from npm into the cache, and the ripgrep and socat it needs.
	@SRT_VERSION=$(SRT_VERSION) hack/bench-deps.sh

##@ Tools

.PHONY: helm
helm: ## Build (or reuse) the pinned Helm; prints its path.
	@hack/helm.sh

.PHONY: agent-clis
agent-clis: ## Install the pinned agent CLIs (AGENT_CLIS: /opt/harnessfacts/agents as root, as in the node-agent image); prints their bin folder.
	@hack/install-agent-clis.sh $(AGENT_CLIS)

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) GOFLAGS=-mod=mod go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) GOFLAGS=-mod=mod go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
