export CGO_CFLAGS := -Wno-deprecated-declarations
export GOFLAGS := -buildvcs=false
GO ?= go
N ?= 5

.PHONY: build test test-packages testnet testnet-down vet fmt sizes cross cross-idle bench fuzz sim clean release

build:
	$(GO) build -o bin/gpumesh ./cmd/gpumesh

vet:
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	@! git grep -nE '^(<<<<<<<|>>>>>>>) ' -- . || (echo 'merge conflict markers committed'; exit 1)

# sizes keeps generated data out of the repository: no tracked file may exceed
# 1 MiB (data a script can make again belongs under an ignored path).
sizes:
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 1048576 {print $$2 " (" $$1 " bytes)"}'); \
	if [ -n "$$big" ]; then echo "tracked files over 1 MiB:"; echo "$$big"; exit 1; fi

# cross type-checks the binary, with every package it imports, for the
# release's other targets without cgo (darwin has no cgroups and no NVML;
# linux/arm64 may lack a cross compiler), so a file only those builds
# compile cannot break `make release`. One target per other OS and per
# other architecture: darwin/amd64 compiles no file that darwin/arm64 and
# linux/arm64 leave out (no amd64-only darwin code). cmd/crosscheck checks
# the files go list gives for each target from source, with go/types and
# the compiler's missing-body check for this module's packages: a few
# seconds a target, where compiling the tree for each (on CI's empty build
# cache, about 110 s of CPU a target) took the CPU the tests' own compiles
# needed. What only a compile and link would find (a dependency's
# assembly missing for a target) is left to `make release`.
CROSS_TARGETS ?= darwin/arm64 linux/arm64
cross:
	@$(GO) run ./cmd/crosscheck $(CROSS_TARGETS) -- ./cmd/gpumesh
	@echo "job init without cgo (the Go init those builds carry)"
	@CGO_ENABLED=0 $(GO) test -count=1 ./runtime/internal/jobinit

# test runs the checks that share the host's compiles one after another
# (build, then vet, whose compiles the tests reuse), then every package's
# tests with `cross` beside them:
# - GPUMESH_BIN: the tests that run the daemon as a process use the
#   bin/gpumesh `build` just linked from this tree (cmd/gpumesh/gpumeshtest)
#   instead of each linking it again.
# - TEST_P test binaries or compiles at once: 4 on CI's 2 cores. The
#   long packages mostly wait on timers, containers and the network (a
#   run at 3 averaged 1.3 cores of 2), so more slots shorten the run by
#   the longest waits: measured on 2 cores, 330 s of tests at 2, 225 s at
#   3, and 193 s at 4 once node, node/lease and auction also ran more of
#   their own parallel tests at once (testnet/testmain.Parallel in their
#   TestMain: 4, 8 and 8; node alone 204 s -> 124 s, lease 41 -> 15,
#   auction 41 -> 27). node is the run's tail either way (154 s at 3, 175
#   s at 4: its 50 s of tests that must run alone, the console's chromium
#   and 50 concurrent posts, then its parallel ones). An earlier try at 4
#   failed timer- and DHT-bound tests under the load (the console's
#   charts, a warm provider's transfer charge: both run alone since, and
#   a record lookup no longer waits for a silent peer). The Docker
#   multi-host test runs beside node: it was kept last because its
#   partition's DHT lookups timed out beside node's load, until a record
#   lookup stopped waiting for a silent peer's answer (node/discovery,
#   firstValid).
# - cross type-checks for other targets (no compile the tests could
#   share) at the lowest CPU priority, so it takes the CPU the waiting
#   tests leave idle; its failure fails the target as before.
# - TEST_FIRST, the longest packages, longest first: go test starts the
#   packages' test binaries one after another in the order they are named
#   (./... is alphabetical), each once the one before it has started, so a
#   long package named late starts only when the slots free, and the run
#   lasts until it ends (testnet/docker, last in ./..., once started at
#   230 s of a 325 s run). Named first, the long ones take the slots at
#   once and the short ones fill the gaps after them; ./... names them
#   again, and go test runs each once. node (175 s at 4 slots on 2 cores)
#   is the longest and comes first; the others, by the spans of such a
#   run: docker 94, runtime 45, deploy 42 (its no-cgo build of the tree),
#   auction 29, adversary 27, lease 25, scale 23, latency 22, dst 21,
#   transfer 19, nat 16. Reorder by the `ok` lines of a CI run.
# - -vet=off: go test's own vet pass (a subset of go vet's analyzers,
#   run again on every package under a cache key of its own) repeats what
#   `vet` has just checked with go vet's full set. With every compile
#   cached, `go test -count=1 -run '^$' ./...` took 131 s wall (246 s
#   CPU) running go test's analyzers afresh, as on CI's empty cache, and
#   66 s (126 s CPU: the links) without them (2 cores, load ~3).
TEST_P ?= 4
TEST_FIRST ?= ./node ./testnet/docker ./node/lease ./auction ./cmd/gpumesh/deploy ./runtime ./testnet/latency ./testnet/nat ./testnet/adversary ./testnet/scale ./node/artifact/transfer ./testnet/dst
test: build vet fmt sizes
	@$(MAKE) --no-print-directory -j2 test-packages cross-idle

test-packages:
	GPUMESH_BIN=$(CURDIR)/bin/gpumesh $(GO) test -p $(TEST_P) -vet=off -count=1 -timeout 15m $(TEST_FIRST) ./...

cross-idle:
	@nice -n 19 $(MAKE) --no-print-directory cross

testnet: build
	./testnet/up.sh $(N)
	./testnet/demo.sh

testnet-down:
	./testnet/down.sh

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

# fuzz runs every fuzz target for FUZZTIME each, one after another (their
# seed corpora alone run with every `go test`). FUZZ_TARGETS is the one
# list, package:target; a Fuzz function missing from it (or a stale entry)
# fails the run. A new input the fuzzer finds is minimised for at most
# FUZZMINIMIZE (Go's default, 60s, stalls slow targets for a minute each
# time).
FUZZTIME ?= 30s
FUZZMINIMIZE ?= 5s
FUZZ_TARGETS = \
	p2p:FuzzReadFrame \
	attest:FuzzOpenReceipt attest:FuzzUnmarshalEnvelope attest:FuzzOpenHeartbeat attest:FuzzOpenFingerprint \
	attest:FuzzDecodeHeartbeatSummary \
	attest/gpuproof:FuzzProverServe attest/gpuproof:FuzzVerifierRun attest/gpuproof:FuzzOpenVerdict \
	auction:FuzzDecodeCall auction:FuzzDecodeBid auction:FuzzDecodeAward auction:FuzzDecodeBidRelease \
	auction:FuzzDecodeDecline auction:FuzzDecodeConfirm auction:FuzzDecodeCapacityNotice auction:FuzzOpenCapability \
	node/wire:FuzzDecodeStreamRequest node/wire:FuzzDecodeExecRequest node/wire:FuzzReadExecFrame node/wire:FuzzExtractBundle \
	node/service:FuzzReadMsg \
	node/artifact:FuzzDecodeManifest node/artifact:FuzzAnswer node/artifact:FuzzOpenWarm \
	node/lease:FuzzLeaseEvent node/lease:FuzzCheckpointNotice node/lease:FuzzOpenCancel \
	runtime/internal/jobinit:FuzzDecodeConfig
fuzz:
	@found=$$(grep -ro --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed -E 's#^\./(.*)/[^/]*_test\.go:func #\1:#' | sort); \
	listed=$$(printf '%s\n' $(FUZZ_TARGETS) | sort); \
	if [ "$$found" != "$$listed" ]; then \
		echo "FUZZ_TARGETS differs from the fuzz targets there are in:"; printf '%s\n' "$$listed" "$$found" | sort | uniq -u; exit 1; \
	fi
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $$t for $(FUZZTIME)"; \
		$(GO) test ./$${t%%:*} -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) || exit 1; \
	done

# release builds the binaries to dist/: linux/amd64 with cgo (NVML, for
# providers; needs a linux/amd64 host with gcc), linux/arm64 with cgo when
# ARM64_CC names a cross compiler (else without: renter or declared GPUs
# only), and darwin amd64/arm64 without cgo (renter only: no NVML there).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
RELEASE_LDFLAGS = -s -w -X github.com/gpumesh/gpumesh/node.Version=$(VERSION)
ARM64_CC ?=
release:
	@mkdir -p dist
	CGO_ENABLED=1 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o dist/gpumesh-linux-amd64 ./cmd/gpumesh
	CGO_ENABLED=$(if $(ARM64_CC),1,0) CC=$(ARM64_CC) GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o dist/gpumesh-linux-arm64 ./cmd/gpumesh
	CGO_ENABLED=0 GOOS=darwin GOARCH=amd64 $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o dist/gpumesh-darwin-amd64 ./cmd/gpumesh
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -trimpath -ldflags '$(RELEASE_LDFLAGS)' -o dist/gpumesh-darwin-arm64 ./cmd/gpumesh
	cd dist && sha256sum gpumesh-* > SHA256SUMS

clean:
	rm -rf bin dist testnet/run
