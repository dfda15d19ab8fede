// Command sim replays a GPU-cluster trace through the market on a virtual
// clock: go run ./testnet/sim --trace ../shared/traces/itp/cluster04.csv
package main

import (
	"fmt"
	"os"

	"github.com/gpumesh/gpumesh/testnet/sim/replay"
	"github.com/gpumesh/gpumesh/testnet/sim/replay/chart"
	"github.com/urfave/cli/v2"
)

func main() {
	cmd := replay.Command(chart.Write)
	app := &cli.App{
		Name:        "sim",
		Usage:       cmd.Usage,
		Description: cmd.Description,
		Flags:       cmd.Flags,
		Action:      cmd.Action,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}
