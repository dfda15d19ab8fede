// Package testmain holds what a package's TestMain sets before its tests
// run, so that the packages that need it do it one way.
package testmain

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Parallel makes n of the package's parallel tests run at once, unless
// the command line gave -test.parallel (go test's default is GOMAXPROCS).
// It is for packages whose tests mostly wait (real daemons on loopback,
// auction windows, heartbeats, lease ends), so that more of them at once
// shorten the run without needing more CPU. Call it from TestMain before
// m.Run; it parses the command line's flags if nothing has yet.
func Parallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		// test.parallel is the testing package's own flag, registered
		// before TestMain runs; its value is any positive integer.
		if err := flag.Set("test.parallel", strconv.Itoa(max(1, n))); err != nil {
			panic(err)
		}
	}
}

// Run is a TestMain that only sets Parallel(n): it runs the tests and
// exits with their status.
func Run(m *testing.M, n int) {
	Parallel(n)
	os.Exit(m.Run())
}
