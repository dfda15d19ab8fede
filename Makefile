export CGO_CFLAGS := -Wno-deprecated-declarations
export GOFLAGS := -buildvcs=false
GO ?= go
N ?= 5

.PHONY: build test testnet testnet-down vet fmt sizes bench sim clean

build:
	$(GO) build -o bin/gpumesh ./cmd/gpumesh

vet:
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)

# sizes keeps generated data out of the repository: no tracked file may exceed
# 1 MiB (data a script can make again belongs under an ignored path).
sizes:
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > 1048576 {print $$2 " (" $$1 " bytes)"}'); \
	if [ -n "$$big" ]; then echo "tracked files over 1 MiB:"; echo "$$big"; exit 1; fi

test: build vet fmt sizes
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
