# kvwin — build, run, test.
#
# The embedded engine is llama.cpp compiled through cgo. Without these flags
# ggml builds without SIMD and runs 10–25× slower. Every build path uses the
# same flags so the Go build cache is shared (a change recompiles all of
# llama.cpp: ~10 minutes on two cores).
export CGO_CFLAGS   := -O3 -march=x86-64-v3
export CGO_CXXFLAGS := -O3 -march=x86-64-v3

GO      ?= go
BIN     := bin/kvwin
ARGS    ?=

# Tests of the PostgreSQL memory store read KVWIN_TEST_POSTGRES_DSN from the
# environment (.ci/run starts a server and sets it; .ci/postgres start DIR
# prints one): without it they skip, unless CI is set.
#
# Packages that link the cgo engine run one package at a time (-p 1) with one
# compute thread per engine: ggml threads spin-wait, so more threads than
# cores across processes collapse throughput. So does engine/ollama, whose
# conformance suite starts a real Ollama (a llama.cpp runner): beside the
# race-detected packages its runner went minutes without a first token. The
# rest run under the race detector (a race build of llama.cpp would take too
# long).
ALL_PKGS    = $(shell $(GO) list ./...)
ENGINE_PKGS = $(shell $(GO) list -f '{{.ImportPath}} {{join .Deps " "}}' ./... | grep ' github.com/ollama/ollama/llama ' | cut -d' ' -f1) kvwin/engine/ollama
PURE_PKGS   = $(filter-out $(ENGINE_PKGS),$(ALL_PKGS))

.PHONY: build run test test-pure test-engine vet fmt clean

build:
	$(GO) build -o $(BIN) ./cmd/kvwin

# make run serves the agent test model (docs/serve.md, "The agent test model"): it ends its
# answers and answers tool calls, so coding agents finish turns on it. The
# file is a pure function of kvwin's version, written each time (1 MB).
AGENT_MODEL := data/kvwin-tiny-agent.gguf

run: build
	@mkdir -p data && ./$(BIN) model tiny --agent --out $(AGENT_MODEL) >/dev/null
	./$(BIN) serve --model $(AGENT_MODEL) $(ARGS)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

test: vet test-pure test-engine

test-pure:
	$(GO) test -race -count=1 -timeout 20m $(PURE_PKGS)

test-engine:
	KVWIN_TEST_THREADS=1 $(GO) test -p 1 -count=1 -timeout 40m $(ENGINE_PKGS)

clean:
	rm -rf bin
