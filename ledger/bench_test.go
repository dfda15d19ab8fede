package ledger

import (
	"testing"
)

// BenchmarkAppend measures single synchronous appends (one fsync each).
func BenchmarkAppend(b *testing.B) {
	db := openTest(b, "")
	e := sampleEntry(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := db.Append(e); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAppendParallel measures synchronous appends from many goroutines.
func BenchmarkAppendParallel(b *testing.B) {
	db := openTest(b, "")
	e := sampleEntry(1)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := db.Append(e); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAppendAll100 measures synchronous batches of 100 entries.
func BenchmarkAppendAll100(b *testing.B) {
	db := openTest(b, "")
	batch := make([]Entry, 100)
	for i := range batch {
		batch[i] = sampleEntry(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := db.AppendAll(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkVerify100k builds a 100,000-entry chain, then times a full
// Verify of it.
func BenchmarkVerify100k(b *testing.B) {
	const n, batchLen = 100_000, 1000
	db := openTest(b, "", noSync())
	batch := make([]Entry, batchLen)
	for done := 0; done < n; done += batchLen {
		for i := range batch {
			batch[i] = sampleEntry(done + i)
		}
		if _, err := db.AppendAll(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := db.Verify()
		if err != nil {
			b.Fatal(err)
		}
		if rep.Entries != n {
			b.Fatalf("verified %d entries, want %d", rep.Entries, n)
		}
	}
	perVerify := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perVerify*1000, "ms/verify-100k")
	b.ReportMetric(n/perVerify, "entries/s")
}
