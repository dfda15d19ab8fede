package chart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/testnet/sim/replay"
	"github.com/urfave/cli/v2"
)

// TestSimDrawsChart: the simulator's sim command (with this package's
// writer) draws the utilisation chart of a replay, one line per policy
// and the bound, and refuses a format it cannot write.
func TestSimDrawsChart(t *testing.T) {
	var b strings.Builder
	b.WriteString("job_id,submission_time,duration,num_gpu\n")
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&b, "j%d,%d,%d,%d\n", i, i*600, 1800+i*60, 1+i%4)
	}
	trace := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(t.TempDir(), "util.svg")
	var out, errOut bytes.Buffer
	app := &cli.App{Name: "sim", Commands: []*cli.Command{replay.Command(Write)}, Writer: &out, ErrWriter: &errOut}
	if err := app.Run([]string{"sim", "sim", "--trace", trace, "--providers", "20", "--chart", svg}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatalf("chart not written: %v", err)
	}
	for _, want := range []string{"<svg", "auction", "fifo", "bound (fluid)"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if err := app.Run([]string{"sim", "sim", "--trace", trace, "--providers", "20", "--chart", filepath.Join(t.TempDir(), "util.gif")}); err == nil ||
		!strings.Contains(err.Error(), "want a .png, .svg or .pdf file") {
		t.Fatalf("gif chart: %v", err)
	}
}
