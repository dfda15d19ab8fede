// Command load measures the market's throughput on N loopback daemons
// (package testnet/load), e.g.
//
//	go run ./testnet/load/cmd -nodes 11 -inflight 20 -duration 1s
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/gpumesh/gpumesh/testnet/load"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := load.Main(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}
