# Bloomery — developer entry points. `make help` lists the targets.

# VERSION is stamped into the binary (main.version). Outside a git checkout, or in
# one without commits, it falls back to "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Recipes run in bash with -e and pipefail, so a failing command in a pipe fails the target.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

GO ?= go

.PHONY: all
all: build

##@ General

# The help target prints every target annotated with '## text', grouped by the
# '##@ Section' lines above them.
.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: fmt
fmt: golangci-lint ## Format code: gofmt -s and goimports (local imports grouped last).
	$(GOLANGCI_LINT) fmt

.PHONY: vet
vet: ## Run go vet against code.
	$(GO) vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (config: .golangci.yml).
	$(GOLANGCI_LINT) run

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply the fixes it can make.
	$(GOLANGCI_LINT) run --fix

.PHONY: lint-config
lint-config: golangci-lint ## Verify .golangci.yml against the linter's schema.
	$(GOLANGCI_LINT) config verify

.PHONY: manifests
manifests: controller-gen ## Generate the CRDs and RBAC from the markers in api/ and controllers/.
	$(CONTROLLER_GEN) rbac:roleName=operator crd paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate the DeepCopy methods of the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

# The Prometheus Operator's ServiceMonitor CRD that the end-to-end suite installs (test/crds), and its
# PrometheusRule CRD that the chart's tests validate the alerts with,
# both generated from their API module at the version the script pins; needs the Go module proxy.
.PHONY: servicemonitor-crd
servicemonitor-crd: controller-gen ## Regenerate the ServiceMonitor and PrometheusRule CRDs in test/crds.
	CONTROLLER_GEN="$(CONTROLLER_GEN)" hack/servicemonitor-crd.sh

##@ Test

# The tests come in tiers, by what they need of the machine:
#
#   check         go test -short ./..., with the format check, go vet and the linter: needs Go and
#                 a C compiler alone (it installs golangci-lint into bin/). Tests that need more
#                 skip and say "needs X, which -short leaves out". Run it while you work.
#   test-unit     every package that no target below takes, under the race detector
#   test-envtest  every package with a file named *_envtest_test.go, whose tests start an API
#                 server (the Kubernetes test binaries): the controllers
#   test-process  test/process: the bloomery binary as a process (kill -9, TLS, a full disk)
#   test-faults   test/faults: pods in network namespaces under partitions, pauses and kills (root)
#   test-chart    the chart: helm lint, helm-unittest, and charts/ (helm, kustomize, promtool, an
#                 API server)
#   test-e2e      test/e2e (build tag e2e): a control plane, the operator and pods as processes
#   test-image    test/image: the image of `make image`, read from its archive and run with podman
#   test-node     test/node: the chart and the image on a real single-node cluster (hack/node.sh)
#   fuzz          each fuzz target of FUZZ_TARGETS
#
# Each package's tests run in exactly one test-* target, so `make test` runs every test once.
# test/process and charts hold *_envtest_test.go files too, and their targets pass the Kubernetes
# binaries as test-envtest does. Outside -short, a test that lacks what it needs fails; the few
# that may skip on a developer's machine (no root, no browser when asked) never do under CI=1.
# The lists are recursive (=), so that find and go list run only for the targets that use them.
MODULE := github.com/bloomery/bloomery
PROCESS_PKGS := $(MODULE)/test/process
FAULTS_PKGS := $(MODULE)/test/faults
CHART_PKGS := $(MODULE)/charts
IMAGE_PKGS := $(MODULE)/test/image
NODE_PKGS := $(MODULE)/test/node
ENVTEST_PKGS = $(filter-out $(PROCESS_PKGS) $(CHART_PKGS),$(addprefix $(MODULE)/,$(patsubst %/,%,$(sort $(dir $(shell find * -name '*_envtest_test.go'))))))
UNIT_PKGS = $(filter-out $(ENVTEST_PKGS) $(PROCESS_PKGS) $(FAULTS_PKGS) $(CHART_PKGS) $(IMAGE_PKGS) $(NODE_PKGS),$(shell $(GO) list ./...))

.PHONY: check
check: fmt-check vet lint ## Check before a commit: format, go vet, golangci-lint, go test -short ./... (needs only Go and gcc).
	$(GO) test -short ./...

.PHONY: fmt-check
fmt-check: golangci-lint ## Fail, showing the diff, when a file is not formatted as `make fmt` would.
	$(GOLANGCI_LINT) fmt --diff

.PHONY: test
test: test-deps vet test-unit test-envtest test-process test-faults test-chart test-e2e test-image test-node ## Run go vet and every tier below, then each fuzz target for 100,000 inputs.
	$(MAKE) --no-print-directory fuzz FUZZTIME=100000x

.PHONY: test-deps
test-deps: ## Install the Debian packages the tests need (Chromium, redis-tools, python3-redis, strace) with apt, when missing.
	hack/test-deps.sh

# The check of the generated files runs controller-gen; the API documentation page is opened in
# Chromium (test-deps).
.PHONY: test-unit
test-unit: test-deps controller-gen ## Run the tests of every package but those of the targets below, with the race detector.
	CONTROLLER_GEN="$(CONTROLLER_GEN)" $(GO) test -race -count=1 $(UNIT_PKGS)

# The Kubernetes test binaries are built first when missing (hack/envtest-assets.sh).
.PHONY: test-envtest
test-envtest: ## Run the packages with *_envtest_test.go files (controllers) against a real API server, with the race detector.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	KUBEBUILDER_ASSETS="$$assets" $(GO) test -race -count=1 $(ENVTEST_PKGS)

# redis-cli and redis-py (test-deps) drive the RESP port; strace (test-deps) watches the log's
# syncs; the full-disk tests mount a tmpfs as root; `bloomery operator` runs against an API server.
.PHONY: test-process
test-process: test-deps ## Run test/process: the binary, built with the race detector, as a process.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	KUBEBUILDER_ASSETS="$$assets" $(GO) test -race -count=1 $(PROCESS_PKGS)

# Network namespaces, veth pairs and iptables rules inside them need root; the scenarios run at
# once, each on a network of its own.
.PHONY: test-faults
test-faults: ## Run test/faults: pods in network namespaces under partitions, pauses and kills, histories checked (root).
	$(GO) test -count=1 -timeout 15m $(FAULTS_PKGS)

.PHONY: test-chart
test-chart: helm-lint helm-test helm kustomize prometheus-tools ## Lint the chart, run its helm-unittest suites and the tests of charts/.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	KUBEBUILDER_ASSETS="$$assets" HELM="$(HELM)" KUSTOMIZE="$(KUSTOMIZE)" PROMTOOL="$(PROMTOOL)" $(GO) test -race -count=1 $(CHART_PKGS)

.PHONY: helm-lint
helm-lint: helm ## Lint the Helm chart (strict: warnings fail).
	"$(HELM)" lint --strict $(CHART_DIR)

.PHONY: helm-test
helm-test: helm-unittest ## Run the chart's helm-unittest suites (charts/bloomery/tests).
	"$(HELM_UNITTEST)" --strict $(CHART_DIR)

# The end-to-end suite (test/e2e, build tag e2e): etcd, kube-apiserver and kube-controller-manager
# from the same cached binaries, `bloomery operator` and a node agent that runs each data-plane pod
# as a local process, and the cached prometheus (PROMETHEUS_TOOLS_DIR).
.PHONY: test-e2e
test-e2e: prometheus-tools ## Run the end-to-end tests on a real control plane without Docker (test/e2e).
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	KUBEBUILDER_ASSETS="$$assets" PROMETHEUS_TOOLS_DIR="$(PROMETHEUS_TOOLS_DIR)" $(GO) test -tags e2e -race -count=1 -v -timeout 20m ./test/e2e/...

# The image as `make image` builds it, under the name TEST_IMG (so that a test never takes an
# image of the chart's name for its own): its archive read in Go, and containers of it run with
# podman as root (make node-deps installs buildah and podman).
TEST_IMG ?= localhost/bloomery:test

.PHONY: test-image
test-image: node-deps ## Build the image without pulling and test it (test/image): non-root, read-only, version, SIGTERM.
	hack/image.sh "$(LOCALBIN)/bloomery-test-image.tar" "$(TEST_IMG)" "$(VERSION)"
	BLOOMERY_IMAGE_ARCHIVE="$(LOCALBIN)/bloomery-test-image.tar" BLOOMERY_IMAGE="$(TEST_IMG)" BLOOMERY_IMAGE_VERSION="$(VERSION)" \
		$(GO) test -count=1 -v $(IMAGE_PKGS)

# A single-node cluster (hack/node.sh: the control plane, kubelet, kube-proxy, containerd, in a
# network namespace of its own) with the image of `make image` imported, and the scenarios of
# test/node driven with helm and kubectl as a user would; as root, with make node-deps' packages
# and the node's Kubernetes binaries (hack/envtest-assets.sh -n, built once like the others).
.PHONY: test-node
test-node: node-deps helm ## Run test/node on a real single-node cluster: helm install, BloomCluster, Service traffic, kubelet restarts, rolling update.
	hack/envtest-assets.sh -n "$(ENVTEST_ASSETS_DIR)" >/dev/null
	hack/image.sh "$(LOCALBIN)/bloomery-test-image.tar" "$(TEST_IMG)" "$(VERSION)"
	BLOOMERY_IMAGE_ARCHIVE="$(LOCALBIN)/bloomery-test-image.tar" BLOOMERY_IMAGE="$(TEST_IMG)" HELM="$(HELM)" \
		$(GO) test -count=1 -v -timeout 15m $(NODE_PKGS)

.PHONY: node-deps
node-deps: ## Install the Debian packages the image and node tests need (buildah, podman, containerd, runc, CNI plugins) with apt, when missing.
	hack/node-deps.sh

# Every decoder of untrusted bytes has a fuzz target (package:Target); crashers found land in the
# package's testdata/fuzz.
FUZZ_TARGETS ?= ./dataplane/persist:FuzzSnapshot ./dataplane/persist:FuzzLog ./dataplane/persist:FuzzDump ./dataplane/persist:FuzzMerge ./dataplane/httpapi:FuzzFastPath ./dataplane/filter:FuzzLocations ./dataplane/peer:FuzzDecodeOps ./dataplane/peer:FuzzStreamServer ./dataplane/resp:FuzzReader ./dataplane/resp:FuzzDispatch ./dataplane/resp:FuzzDispatchBeforeAuth ./dataplane/resp:FuzzPipeline ./dataplane/resp:FuzzTransaction ./dataplane/resp:FuzzLoadChunk
# make test gives each target a count of executions, not a duration: with a duration, Go 1.26's
# fuzzing coordinator can fail at the deadline with "context deadline exceeded" and no crasher
# (golang/go#75804, fixed in Go 1.27) when the machine is loaded.
FUZZTIME ?= 5m

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 5m).
	@for pair in $(FUZZ_TARGETS); do \
		pkg=$${pair%%:*}; target=$${pair##*:}; \
		echo "$(GO) test -run '^$$' -fuzz ^$$target\$$ -fuzztime $(FUZZTIME) $$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

##@ Benchmarks

.PHONY: bench
bench: ## Run the Go benchmarks of the data plane.
	$(GO) test -run '^$$' -bench . -benchmem ./dataplane/...

# Load tests over HTTP with wrk. make bench-http: every scenario against the data plane (in
# memory, persistent) and the reference echo server, side by side (ROUNDS=3 for medians);
# make bench-http SCRIPT=bench/check.lua DURATION=30s: one script against the data plane alone.
SCRIPT ?=
DURATION ?= 10s
THREADS ?= 4
CONNECTIONS ?= 20

.PHONY: bench-http
bench-http: ## Data plane vs the reference echo server, side by side with wrk; with SCRIPT, that script alone (DURATION, THREADS, CONNECTIONS).
ifeq ($(SCRIPT),)
	bench/compare.sh $(DURATION) $(THREADS) $(CONNECTIONS)
else
	bench/run.sh $(SCRIPT) $(DURATION) $(THREADS) $(CONNECTIONS)
endif

.PHONY: bench-compare
bench-compare: ## Same as bench-http without SCRIPT: every scenario, side by side with the reference.
	bench/compare.sh $(DURATION) $(THREADS) $(CONNECTIONS)

# benchstat-ready engine benchmarks: make bench-engine COUNT=10 > new.txt; benchstat old.txt new.txt
COUNT ?= 10
BENCH ?= Baseline|CheckAndSetMany1000|CheckMany1000|CheckAndSet$$|Check$$

.PHONY: bench-engine
bench-engine: ## Engine benchmarks COUNT times (default 10) for benchstat; BENCH selects them.
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) ./dataplane/filter

# The operator at scale on the end-to-end control plane, built without the race detector:
# make bench-operator FILTERS=1000 for one size; PROFILES=1 saves the operator's and the API
# server's CPU profiles of each phase in the run directory (kept with E2E_KEEP=1).
FILTERS ?= 1000,10000
PROFILES ?=
.PHONY: bench-operator
bench-operator: ## BloomFilters (FILTERS, default 1000,10000) on 3 pods: time to Ready and gone, a quiet minute's costs.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	E2E_BENCH_OPERATOR="$(FILTERS)" E2E_BENCH_PROFILES="$(PROFILES)" KUBEBUILDER_ASSETS="$$assets" $(GO) test -tags e2e -count=1 -v -timeout 120m -run '^TestOperatorScale$$' ./test/e2e/

# The floor under it: the same creates and deletes with the operator stopped (FILTERS as above).
.PHONY: bench-operator-floor
bench-operator-floor: ## The API server alone creating and deleting FILTERS BloomFilters: what bench-operator's times rest on.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	E2E_BENCH_APISERVER="$(FILTERS)" KUBEBUILDER_ASSETS="$$assets" $(GO) test -tags e2e -count=1 -v -timeout 60m -run '^TestAPIServerScale$$' ./test/e2e/

.PHONY: bench-memory
bench-memory: ## RSS of a data plane holding one filter of 1e6, 1e7 and 1e8 keys at fpp 0.001.
	bench/memory.sh

.PHONY: bench-peaks
bench-peaks: ## RSS at a data plane's peaks (snapshot, dumps, recovery, catch-up) for 1 GiB of filters.
	bench/peaks.sh

##@ Build

.PHONY: build
build: ## Build the bloomery binary into bin/.
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(LOCALBIN)/bloomery .

# The kubectl plugin is the same binary under the name kubectl-bloomery, which kubectl finds on
# the PATH and runs for `kubectl bloomery ...` (docs/kubectl-plugin.md).
PLUGIN_DIR ?= $(HOME)/.local/bin

.PHONY: install-plugin
install-plugin: build ## Install bloomery and the link kubectl-bloomery to it into PLUGIN_DIR (~/.local/bin), for `kubectl bloomery`.
	mkdir -p "$(PLUGIN_DIR)"
	install -m 0755 $(LOCALBIN)/bloomery "$(PLUGIN_DIR)/bloomery"
	ln -sf bloomery "$(PLUGIN_DIR)/kubectl-bloomery"

# IMG is the one image of both roles (operator and data plane). No registry publishes it: `make
# docker-build` builds it under the name the chart and the kustomize install use by default (the
# chart's image.repository and appVersion), and `kind load docker-image $(IMG)` (or a push to a
# registry of yours) gives it to a cluster. charts/image_test.go checks that they all agree.
IMG ?= ghcr.io/bloomery/bloomery:$(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART_DIR)/Chart.yaml)

# The chart carries copies of the generated CRDs, of the operator's RBAC rules, of the alerts and of
# the Grafana dashboard (Helm cannot read files outside the chart); charts/chart_envtest_test.go and
# charts/monitoring_test.go fail when they differ from config/.
CHART_DIR ?= charts/bloomery

.PHONY: helm-manifests
helm-manifests: manifests ## Copy the CRDs, the operator's RBAC rules, the alerts and the dashboard from config/ into the chart.
	@for crd in config/crd/bases/*.yaml; do \
		out="$(CHART_DIR)/templates/crds/$$(basename "$$crd")"; \
		{ echo '{{- if .Values.crds.enabled }}'; \
		  echo "# Generated by \`make helm-manifests\` from $$crd: do not edit."; \
		  awk 'NR == 1 && /^---$$/ { next } \
			/^metadata:$$/ && !m { print; print "  labels:"; print "    {{- include \"bloomery.labels\" . | nindent 4 }}"; m = 1; next } \
			/^  annotations:$$/ && !a { print; print "    {{- if .Values.crds.keep }}"; print "    helm.sh/resource-policy: keep"; print "    {{- end }}"; a = 1; next } \
			{ print }' "$$crd"; \
		  echo '{{- end }}'; } > "$$out"; \
		echo "wrote $$out"; \
	done
	@{ echo '{{/* Generated by `make helm-manifests` from config/rbac/role.yaml: do not edit. */}}'; \
	  echo '{{- define "bloomery.operatorRules" -}}'; \
	  awk 'f { print } /^rules:$$/ { f = 1 }' config/rbac/role.yaml; \
	  echo '{{- end }}'; } > "$(CHART_DIR)/templates/_rules.tpl"
	@echo "wrote $(CHART_DIR)/templates/_rules.tpl"
	@mkdir -p "$(CHART_DIR)/files"
	@{ echo '# Generated by `make helm-manifests` from the spec of config/prometheus/alerts.yaml: do not edit.'; \
	  awk 'f { sub(/^  /, ""); print } /^spec:$$/ { f = 1 }' config/prometheus/alerts.yaml; } > "$(CHART_DIR)/files/prometheus-rules.yaml"
	@echo "wrote $(CHART_DIR)/files/prometheus-rules.yaml"
	@cp config/grafana/bloomery-dashboard.json "$(CHART_DIR)/files/grafana-dashboard.json"
	@echo "wrote $(CHART_DIR)/files/grafana-dashboard.json"

.PHONY: build-installer
build-installer: manifests kustomize ## Write dist/install.yaml (CRDs, RBAC, operator) for the image IMG.
	mkdir -p dist
	cd config/manager && "$(KUSTOMIZE)" edit set image bloomery=$(IMG)
	"$(KUSTOMIZE)" build config/default > dist/install.yaml

# The engine that builds images (docker or podman); `make docker-build` needs one.
CONTAINER_TOOL ?= docker

# The image IMG built without pulling anything (Dockerfile.scratch: a static binary built here on
# an empty image), written as an OCI archive: `ctr -n k8s.io images import`, `podman load` and
# `kind load image-archive` take it.
IMAGE_ARCHIVE ?= $(LOCALBIN)/bloomery-image.tar

.PHONY: image
image: node-deps | $(LOCALBIN) ## Build the image IMG without pulling (Dockerfile.scratch, buildah) into the OCI archive IMAGE_ARCHIVE.
	hack/image.sh "$(IMAGE_ARCHIVE)" "$(IMG)" "$(VERSION)"

.PHONY: docker-build
docker-build: ## Build the image IMG (both roles) with VERSION stamped into the binary.
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: run
run: ## Run the data plane locally on port 8080 with ./data as its data directory.
	$(GO) run . dataplane -p 8080 --data-dir ./data

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

## Tool binaries
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
HELM ?= $(LOCALBIN)/helm
HELM_UNITTEST ?= $(LOCALBIN)/helm-unittest

## Tool versions
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1
HELM_VERSION ?= v3.22.0
HELM_UNITTEST_VERSION ?= v1.1.2

# Kubernetes test binaries (etcd, kube-apiserver, kube-controller-manager, kubectl), built
# once from the Go module proxy into a cache outside the tree (about 10 minutes cold). Empty means
# the script's default, ${BLOOMERY_CACHE:-~/.cache/bloomery}/k8s/<its version>, where the tests
# also look when KUBEBUILDER_ASSETS is not set (internal/testassets); the version is written in
# the script alone.
ENVTEST_ASSETS_DIR ?=

.PHONY: envtest-assets
envtest-assets: ## Build the envtest and end-to-end Kubernetes binaries once and print their directory.
	@hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"

# promtool and prometheus, built once from the Go module proxy into a cache outside the tree, as
# the Kubernetes binaries are (about 10 minutes cold). The tests of the alerts and the dashboard
# (charts/monitoring_test.go) run promtool; PROMTOOL names another one.
PROMETHEUS_VERSION ?= v0.316.0
PROMETHEUS_TOOLS_DIR ?= $(or $(BLOOMERY_CACHE),$(HOME)/.cache/bloomery)/prometheus/$(PROMETHEUS_VERSION)
PROMTOOL ?= $(PROMETHEUS_TOOLS_DIR)/promtool

# Both are built into a temporary directory next to the cache and moved in at the end, so an
# interrupted build leaves nothing that looks complete.
.PHONY: prometheus-tools
prometheus-tools: ## Build promtool and prometheus (PROMETHEUS_VERSION) into PROMETHEUS_TOOLS_DIR once.
	@[ -x "$(PROMETHEUS_TOOLS_DIR)/promtool" ] && [ -x "$(PROMETHEUS_TOOLS_DIR)/prometheus" ] || { \
	set -e; \
	mkdir -p "$(PROMETHEUS_TOOLS_DIR)"; \
	tmp=$$(mktemp -d "$(PROMETHEUS_TOOLS_DIR)/.build.XXXXXX"); \
	trap 'rm -rf "$$tmp"' EXIT; \
	echo "Building promtool and prometheus $(PROMETHEUS_VERSION) into $(PROMETHEUS_TOOLS_DIR) (about 10 minutes cold)"; \
	(cd "$${TMPDIR:-/tmp}" && GOWORK=off GOFLAGS= GOBIN="$$tmp" $(GO) install \
		github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION) \
		github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)); \
	mv -f "$$tmp/promtool" "$$tmp/prometheus" "$(PROMETHEUS_TOOLS_DIR)/"; \
	}

.PHONY: controller-gen
controller-gen: | $(LOCALBIN) ## Download controller-gen locally if necessary.
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: | $(LOCALBIN) ## Download kustomize locally if necessary.
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: helm
helm: | $(LOCALBIN) ## Download helm locally if necessary.
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

# helm-unittest's own main package, run as a standalone binary (no `helm plugin install`). Its
# go.mod has a replace directive, which `go install pkg@version` refuses, so it is built inside
# its downloaded module instead (same NAME-VERSION + symlink scheme as go-install-tool).
.PHONY: helm-unittest
helm-unittest: | $(LOCALBIN) ## Download and build helm-unittest locally if necessary.
	@[ -f "$(HELM_UNITTEST)-$(HELM_UNITTEST_VERSION)" ] && [ "$$(readlink -- "$(HELM_UNITTEST)" 2>/dev/null)" = "$(HELM_UNITTEST)-$(HELM_UNITTEST_VERSION)" ] || { \
	set -e; \
	echo "Downloading github.com/helm-unittest/helm-unittest@$(HELM_UNITTEST_VERSION)"; \
	dir=$$(cd "$${TMPDIR:-/tmp}" && GOWORK=off GOFLAGS= $(GO) mod download -json github.com/helm-unittest/helm-unittest@$(HELM_UNITTEST_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	[ -n "$$dir" ] || { echo "helm-unittest $(HELM_UNITTEST_VERSION): not downloaded" >&2; exit 1; }; \
	rm -f "$(HELM_UNITTEST)"; \
	(cd "$$dir" && GOWORK=off GOFLAGS= $(GO) build -o "$(HELM_UNITTEST)-$(HELM_UNITTEST_VERSION)" ./cmd/helm-unittest); \
	}; \
	ln -sf "$$(realpath "$(HELM_UNITTEST)-$(HELM_UNITTEST_VERSION)")" "$(HELM_UNITTEST)"

# Phony on purpose: the macro's own check is cheap, and it reinstalls when the version changes.
.PHONY: golangci-lint
golangci-lint: | $(LOCALBIN) ## Download golangci-lint locally if necessary.
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool 'go install's a versioned tool into $(LOCALBIN) as NAME-VERSION and
# points the symlink NAME at it, so changing a version reinstalls and nothing else does.
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" $(GO) install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath "$(1)-$(3)")" "$(1)"
endef
