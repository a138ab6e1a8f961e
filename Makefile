# The index of what a developer can run. `make help` lists the targets.

SHELL := /usr/bin/env bash
GO    ?= go
BIN   := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

# Pure cores: no gRPC, no Kubernetes; always tested with the race detector.
CORE_PKGS := ./internal/netparse/... ./internal/exportpolicy/... ./services/allocator/ipam/... \
	./services/membership/selector/... ./services/membership/endpoints/... \
	./services/importer/slices/... ./services/importer/mcs/... ./services/importer/materialize/... \
	./internal/endpointrules/... ./internal/owner/... \
	./services/repair/decide/... ./services/allocator/decide/... ./services/allocator/held/... ./services/allocator/store/internal/...

SERVICES := allocator membership importer repair

# make demo SECURE=1: mutual TLS and the policies of deploy/policy in the demo.
SECURE ?=
# make demo ALLOCATOR_STORE=etcd: two allocator replicas on etcd instead of one on bolt.
ALLOCATOR_STORE ?= bolt
# The release the binaries are (the VERSION file, which the build embeds) and
# the commit stamped into them (--version, plexusctl version and status).
VERSION := $(shell cat VERSION)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -modified)
# Where make certs writes the CA and the certificates, and the clusterset
# its per-cluster certificates name (docker-compose.yaml's allocators say it).
CERTS_DIR ?= .certs
CLUSTERSET ?= plexus
# Images are $(IMAGE_PREFIX)<service>:$(IMAGE_TAG), as deploy/ and
# docker-compose.yaml name them: plexus/allocator:latest by default; set
# IMAGE_PREFIX=registry.example/plexus/ IMAGE_TAG=$(VERSION) for a registry.
IMAGE_PREFIX ?= plexus/
IMAGE_TAG ?= latest

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Install the pinned tools (buf, protoc plugins, grpcurl, controller-gen) into .bin/.
	@cd tools && GOBIN=$(BIN) $(GO) install tool

# grpcurl alone: all the demo needs of the tools.
.PHONY: demo-tools
demo-tools:
	@test -x $(BIN)/grpcurl || { echo "==> building grpcurl into .bin/ (1-3 minutes the first time)"; \
		cd tools && ../hack/gobuild.sh grpcurl -o $(BIN)/grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl; }

.PHONY: kube-binaries
kube-binaries: ## Build and cache kube-apiserver, kube-controller-manager, kube-proxy and etcd (first run takes minutes).
	@echo "==> kube-apiserver, kube-controller-manager, kube-proxy and etcd (cached after the first build, which takes 10-30 minutes)"
	@hack/kube-binaries.sh >/dev/null

.PHONY: coredns
coredns: ## Build and cache CoreDNS (kubernetes plugin with multicluster) for the clusterset DNS test.
	@echo "==> CoreDNS (cached after the first build, which takes 3-10 minutes)"
	@hack/coredns.sh >/dev/null

.PHONY: helm
helm: ## Build and cache helm (for the Helm chart's tests: helm template, helm lint).
	@echo "==> helm (cached after the first build, which takes 2-6 minutes)"
	@hack/helm.sh >/dev/null

.PHONY: generate
generate: tools ## Regenerate the Go and Python code from the protos, and the CRD manifests (deploy/crds and the Helm chart's crds/).
	buf generate
	buf build --as-file-descriptor-set -o api/apidesc/plexus.binpb
	hack/generate-crds.sh
	$(GO) run ./hack/chartcrds
	hack/generate-python.sh

.PHONY: check-generated
check-generated: generate ## Fail when checked-in generated code is stale.
	@git diff --exit-code --stat -- api deploy/crds deploy/helm/plexus/crds clients/python || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api deploy/crds deploy/helm/plexus/crds clients/python)" || { git status --porcelain -- api deploy/crds deploy/helm/plexus/crds clients/python; echo "untracked generated files: run 'make generate' and commit"; exit 1; }

.PHONY: docs
docs: ## Regenerate the flag and metric references (docs/flags.md, docs/metrics.md) from the code.
	$(GO) run ./hack/gendocs -out docs

.PHONY: lint
lint: tools check-breaking ## buf lint, buf breaking against the last release, gofmt, go vet, docker-compose config.
	buf lint
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); test -z "$$out" || { echo "gofmt needed: $$out"; exit 1; }
	$(GO) vet ./...
	@if command -v docker-compose >/dev/null; then docker-compose config -q && echo "docker-compose.yaml: valid"; \
	else echo "docker-compose not installed: docker-compose.yaml not validated (.ci/run installs it)"; fi

.PHONY: check-breaking
check-breaking: tools ## Compare the protos with the last release's (RELEASES); a break must be named under Breaking in CHANGELOG.md.
	hack/check-breaking.sh

.PHONY: build
build: ## Build the four services and plexusctl into bin/.
	@mkdir -p bin
	@echo "==> building the Plexus binaries into bin/ (2-5 minutes the first time, seconds after)"
	@CGO_ENABLED=0 hack/gobuild.sh "plexus binaries" -ldflags "-X github.com/plexusnet/plexus/internal/version.commit=$(COMMIT)" -o bin/ ./services/allocator ./services/membership ./services/importer ./services/repair ./clients/plexusctl ./internal/testing/kubetest/cmd/localkube ./hack/demokube ./hack/tracedump
	@cd bin && for s in allocator membership importer repair; do mv -f $$s plexus-$$s; done

.PHONY: test
test: lint check-generated kube-binaries coredns helm ## Unit and integration tests (real kube-apiserver and etcd), race detector on the pure cores.
	$(GO) test -race -count=1 $(CORE_PKGS)
	$(GO) test -count=1 -timeout 30m ./...

.PHONY: conformance
conformance: build kube-binaries ## The upstream MCS API conformance suite against two local clusters (MCS_API=<mcs-api checkout>, default ../shared/mcs-api).
	hack/conformance.sh

.PHONY: bench
bench: ## Benchmarks of the pure cores and against peer implementations (see BENCHMARKS.md).
	$(GO) test -run '^$$' -bench . -benchmem $(CORE_PKGS)
	cd bench && $(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: images
images: ## Build the container images $(IMAGE_PREFIX){allocator,membership,importer,repair,localkube}:$(IMAGE_TAG) (needs a Docker engine).
	@for t in $(SERVICES) localkube; do \
		echo "==> $(IMAGE_PREFIX)$$t:$(IMAGE_TAG)"; \
		docker build --build-arg COMMIT=$(COMMIT) --target $$t -t $(IMAGE_PREFIX)$$t:$(IMAGE_TAG) . || exit 1; \
	done

.PHONY: certs
certs: ## Create a local CA and mutual TLS certificates in .certs/: the allocator's, clusters a and b's, the fleet's (plexusctl certs).
	$(GO) run ./clients/plexusctl certs --dir $(CERTS_DIR)
	for c in a b; do $(GO) run ./clients/plexusctl certs --dir $(CERTS_DIR) --clusterset $(CLUSTERSET) --cluster $$c || exit 1; done
	$(GO) run ./clients/plexusctl certs --dir $(CERTS_DIR) --clusterset $(CLUSTERSET) --fleet

.PHONY: demo
demo: demo-tools build kube-binaries coredns ## Run the whole system locally end to end, then stop (SECURE=1: mutual TLS and policies; ALLOCATOR_STORE=etcd: two allocator replicas on etcd).
	SECURE=$(SECURE) ALLOCATOR_STORE=$(ALLOCATOR_STORE) hack/demo.sh

.PHONY: demo-up
demo-up: demo-tools build kube-binaries coredns ## Like demo, but keep everything running for exploring.
	SECURE=$(SECURE) ALLOCATOR_STORE=$(ALLOCATOR_STORE) hack/demo.sh --keep

.PHONY: demo-down
demo-down: ## Stop what make demo-up started.
	@if [[ -s .demo/demo.pid ]] && kill -0 "$$(cat .demo/demo.pid)" 2>/dev/null; then \
		kill -TERM "$$(cat .demo/demo.pid)"; \
		for _ in $$(seq 1 100); do kill -0 "$$(cat .demo/demo.pid 2>/dev/null)" 2>/dev/null || break; sleep 0.2; done; \
		echo "demo stopped"; \
	else echo "no demo is running"; fi

.PHONY: clean
clean: ## Remove built binaries and demo state.
	rm -rf bin .demo
