package replay

import (
	"os"
	"testing"
)

// itpTrace is the ITP cluster trace shipped next to the repository.
func itpTrace(b *testing.B, name string) string {
	path := "../../../../shared/traces/itp/" + name
	if _, err := os.Stat(path); err != nil {
		b.Skipf("trace %s not available: %v", path, err)
	}
	return path
}

// BenchmarkCluster04 replays ITP cluster04 (15,801 jobs) against 1,000
// providers under both policies; run with -benchtime 1x.
func BenchmarkCluster04(b *testing.B) {
	path := itpTrace(b, "cluster04.csv")
	b.ReportAllocs()
	var r *Report
	for i := 0; i < b.N; i++ {
		var err error
		if r, err = Run(Config{TracePath: path, Seed: 1, Supply: Supply{Count: 1000}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Perf.Events), "events")
	b.ReportMetric(r.Perf.EventsPerSec, "events/s")
	b.ReportMetric(r.Perf.PeakRSSMB, "peak-RSS-MB")
}
