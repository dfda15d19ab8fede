export CGO_CFLAGS := -Wno-deprecated-declarations
export GOFLAGS := -buildvcs=false
GO ?= go
N ?= 5

.PHONY: build test testnet testnet-down vet fmt bench sim clean

build:
	$(GO) build -o bin/gpumesh ./cmd/gpumesh

vet:
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)

test: build vet fmt
	$(GO) test -count=1 -timeout 15m ./...

testnet: build
	./testnet/up.sh $(N)
	./testnet/demo.sh

testnet-down:
	./testnet/down.sh

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

clean:
	rm -rf bin testnet/run
