// Command scale measures what a posted job costs a market of many nodes
// (package testnet/scale), e.g.
//
//	go run ./testnet/scale/cmd -nodes 100,500 -eligible 5,25,100
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/gpumesh/gpumesh/testnet/scale"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := scale.Main(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}
