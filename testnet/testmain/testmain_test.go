package testmain

import (
	"flag"
	"os"
	"testing"
)

// given and before are what the command line said, after would be what
// Parallel left: TestMain is this package's own use of Parallel.
var (
	given         bool
	before, after string
)

func TestMain(m *testing.M) {
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	before = flag.Lookup("test.parallel").Value.String()
	Parallel(7)
	after = flag.Lookup("test.parallel").Value.String()
	os.Exit(m.Run())
}

func TestParallelSetsOnlyWhatTheCommandLineDidNot(t *testing.T) {
	switch {
	case !given && after != "7":
		t.Fatalf("no -test.parallel given: Parallel(7) left %s", after)
	case given && after != before:
		t.Fatalf("-test.parallel %s given: Parallel(7) changed it to %s", before, after)
	}
}
