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

.PHONY: test
test: vet controller-gen ## Run go vet, all tests with the race detector, then each fuzz target briefly.
	assets=$$(hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"); \
	KUBEBUILDER_ASSETS="$$assets" CONTROLLER_GEN="$(CONTROLLER_GEN)" $(GO) test -race -count=1 ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=10s

# Every decoder of untrusted bytes has a fuzz target; crashers found land in testdata/fuzz.
FUZZ_TARGETS ?= FuzzSnapshot FuzzLog
FUZZTIME ?= 5m

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 5m).
	@for target in $(FUZZ_TARGETS); do \
		echo "$(GO) test -run '^$$' -fuzz ^$$target\$$ -fuzztime $(FUZZTIME) ./dataplane/persist"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./dataplane/persist || exit 1; \
	done

.PHONY: bench
bench: ## Run the Go benchmarks of the data plane.
	$(GO) test -run '^$$' -bench . -benchmem ./dataplane/...

# Load test over HTTP with wrk: make bench-http SCRIPT=bench/check.lua DURATION=30s
SCRIPT ?= bench/check.lua
DURATION ?= 10s
THREADS ?= 4
CONNECTIONS ?= 20

.PHONY: bench-http
bench-http: ## Load-test the data plane with wrk (SCRIPT, DURATION, THREADS, CONNECTIONS).
	bench/run.sh $(SCRIPT) $(DURATION) $(THREADS) $(CONNECTIONS)

##@ Build

.PHONY: build
build: ## Build the bloomery binary into bin/.
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(LOCALBIN)/bloomery .

# IMG is the one image of both roles (operator and data plane) that the install manifests name.
IMG ?= bloomery:latest

.PHONY: build-installer
build-installer: manifests kustomize ## Write dist/install.yaml (CRDs, RBAC, operator) for the image IMG.
	mkdir -p dist
	cd config/manager && "$(KUSTOMIZE)" edit set image bloomery=$(IMG)
	"$(KUSTOMIZE)" build config/default > dist/install.yaml

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

## Tool versions
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1

# Kubernetes test binaries (etcd, kube-apiserver, kube-controller-manager, kubectl), built
# once from the Go module proxy into a cache outside the tree (about 10 minutes cold).
ENVTEST_ASSETS_DIR ?= $(or $(BLOOMERY_CACHE),$(HOME)/.cache/bloomery)/k8s/v1.37.2

.PHONY: envtest-assets
envtest-assets: ## Build the envtest and end-to-end Kubernetes binaries once and print their directory.
	@hack/envtest-assets.sh "$(ENVTEST_ASSETS_DIR)"

.PHONY: controller-gen
controller-gen: | $(LOCALBIN) ## Download controller-gen locally if necessary.
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: | $(LOCALBIN) ## Download kustomize locally if necessary.
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

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
