# gpuchaos — make help lists the targets.
GO ?= go
BIN := bin/gpuchaos
AGENT_BIN := bin/gpuchaos-agent
FUZZTIME ?= 10s

.PHONY: help build image demo test lint fuzz generate bench
help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/gpuchaos and bin/gpuchaos-agent (the node agent's lean binary)
	$(GO) build -o $(BIN) ./cmd/gpuchaos
	$(GO) build -o $(AGENT_BIN) ./cmd/gpuchaos-agent

image: ## build the chart's container image into bin/ (scripts/build-image)
	scripts/build-image

demo: ## run the whole catalogue against the embedded twin
	$(GO) run ./cmd/gpuchaos demo

test: ## what CI runs: vet, then every test with the race detector
	scripts/test

lint: ## gofmt, go vet and staticcheck (the version go.mod pins)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

fuzz: ## run every fuzz target for FUZZTIME each
	scripts/fuzz $(FUZZTIME)

generate: ## regenerate generated files
	$(GO) generate ./...

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...
