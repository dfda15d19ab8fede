// Command dst is gpumesh's deterministic simulation test: providers,
// renters and a hostile peer running the production lease and job
// machines and booking, receipt and ledger rules in one goroutine, over a
// simulated network and clock, with every fault drawn from one seed.
// After every step it checks the invariants (check.go); a violation prints
// its seed, and the seed replays byte for byte.
//
//	go run ./testnet/dst -seeds 500            # seeds 1..500
//	go run ./testnet/dst -seeds 100000 -from 1000000
//	go run ./testnet/dst -seed 42 -v           # replay one seed, with its trace
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the command and returns its exit status: 0 when no seed broke
// an invariant, 1 when one did, 2 for bad arguments.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dst", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seeds := fs.Uint64("seeds", 0, "run this many seeds, from -from on")
	from := fs.Uint64("from", 1, "the first seed of -seeds")
	one := fs.Uint64("seed", 0, "replay one seed (prints its trace hash)")
	verbose := fs.Bool("v", false, "with -seed: print the seed's trace")
	skew := fs.Duration("skew", DefaultConfig().MaxSkew, "each node's clock is off by up to this")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "seeds run at once (each seed runs in one goroutine)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "dst: unexpected argument %q\n", fs.Arg(0))
		return 2
	case (*seeds == 0) == (*one == 0):
		fmt.Fprintln(stderr, "dst: give -seeds N (with -from S) or -seed S")
		return 2
	case *skew < 0:
		fmt.Fprintln(stderr, "dst: -skew must not be negative")
		return 2
	case *workers < 1:
		fmt.Fprintln(stderr, "dst: -workers must be at least 1")
		return 2
	}
	cfg := DefaultConfig()
	cfg.MaxSkew = *skew
	if *one != 0 {
		var w io.Writer
		if *verbose {
			w = stdout
		}
		res := newSim(cfg, *one, w).run()
		if res.Violation != nil {
			report(stdout, res.Violation)
			fmt.Fprintf(stdout, "seed %d: %d steps, trace hash %s\n", res.Seed, res.Steps, res.TraceHash)
			return 1
		}
		fmt.Fprintf(stdout, "seed %d: %d steps, 0 violations, trace hash %s\n", res.Seed, res.Steps, res.TraceHash)
		return 0
	}
	if *from+*seeds < *from {
		fmt.Fprintln(stderr, "dst: -from + -seeds overflows")
		return 2
	}
	sum := Campaign(cfg, *from, *seeds, *workers)
	for _, v := range sum.Violations {
		report(stdout, v)
	}
	st := sum.Stats
	fmt.Fprintf(stdout, "%d seeds, %d violations, trace hash %s\n", *seeds, len(sum.Violations), sum.TraceHash)
	fmt.Fprintf(stdout, "  %d steps; %d jobs: %d unplaceable, %d cancelled, %d requeues, %d rebooked of %d rebooks; runs: %d succeeded, %d failed; %d settled, %d disputed, %d abandoned; %d refused; %d crashes, %d partitions, %d dropped, %d duplicated\n",
		sum.Steps, st.Jobs, st.Unplaceable, st.Cancelled, st.Requeued, st.Rebooked, st.Rebooks, st.Finished, st.Failed, st.Settled, st.Disputed, st.Abandoned, st.Refused, st.Crashes, st.Partitions, st.Dropped, st.Duplicated)
	if len(sum.Violations) > 0 {
		return 1
	}
	return 0
}

func report(w io.Writer, v *Violation) {
	fmt.Fprintln(w, v.Error())
	fmt.Fprintf(w, "  at step %d; the trace's last lines (replay: go run ./testnet/dst -seed %d -v):\n", v.Step, v.Seed)
	for _, l := range v.Tail {
		fmt.Fprintln(w, "  | "+l)
	}
}

// Summary is a campaign's outcome.
type Summary struct {
	Violations []*Violation // in seed order
	TraceHash  string       // SHA-256 of the seeds' trace hashes, in seed order
	Steps      int
	Stats      Stats
}

// Campaign runs seeds from, from+1, ... (n of them) on workers
// goroutines, each seed alone in one; the summary does not depend on
// how many.
func Campaign(cfg Config, from, n uint64, workers int) Summary {
	results := make([]Result, n)
	var wg sync.WaitGroup
	next := make(chan uint64)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = newSim(cfg, from+i, nil).run()
			}
		}()
	}
	for i := uint64(0); i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	var sum Summary
	h := sha256.New()
	for _, r := range results {
		h.Write([]byte(r.TraceHash))
		sum.Steps += r.Steps
		sum.Stats.add(r.Stats)
		if r.Violation != nil {
			sum.Violations = append(sum.Violations, r.Violation)
		}
	}
	sum.TraceHash = hex.EncodeToString(h.Sum(nil))
	return sum
}

func (s *Stats) add(o Stats) {
	s.Jobs += o.Jobs
	s.Finished += o.Finished
	s.Failed += o.Failed
	s.Unplaceable += o.Unplaceable
	s.Cancelled += o.Cancelled
	s.Requeued += o.Requeued
	s.Rebooks += o.Rebooks
	s.Rebooked += o.Rebooked
	s.Settled += o.Settled
	s.Disputed += o.Disputed
	s.Abandoned += o.Abandoned
	s.Crashes += o.Crashes
	s.Partitions += o.Partitions
	s.Dropped += o.Dropped
	s.Duplicated += o.Duplicated
	s.Refused += o.Refused
}
