// Command gpumesh is the gpumesh daemon and its command-line client.
//
// Every participant runs the same binary: `gpumesh daemon` joins the
// network; every other command talks to the local daemon over its control
// socket.
//
// The commands are grouped one file each: daemon.go (daemon, version),
// status.go (status, peers, providers, counters), job.go and jobpost.go
// (job ...), bids.go, provider.go (provider stats) and providerinit.go
// (provider init), doctor.go, reputation.go and ledger.go; `sim` is
// testnet/sim/replay's command. app.go holds the command tree and what the
// groups share. Every daemon call goes through node/api's typed client.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the process exit code. Every error is
// printed as a single line on stderr. Flags may follow a command's
// arguments (see flagsFirst).
func run(args []string, stdout, stderr io.Writer) int {
	return runWithInput(args, nil, stdout, stderr)
}

// runWithInput is run with stdin as the commands' input (nil: os.Stdin).
func runWithInput(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var unknown bool
	app := newApp(stdout, stderr, &unknown)
	if stdin != nil {
		app.Reader = stdin
	}
	err := app.Run(flagsFirst(app, args))
	if unknown {
		return 1
	}
	if err != nil {
		var ec cli.ExitCoder
		code := 1
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			code = ec.ExitCode()
		}
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "gpumesh: "+oneLine(msg))
		}
		return code
	}
	return 0
}

func oneLine(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '\n' || r == '\r' {
			r = ' '
		}
		out = append(out, r)
	}
	for len(out) > 0 && out[len(out)-1] == ' ' {
		out = out[:len(out)-1]
	}
	return string(out)
}
