package ledger

import (
	"sync/atomic"
	"testing"

	"github.com/gpumesh/gpumesh/ledger/record"
)

// BenchmarkAppend measures single synchronous appends (one fsync each).
func BenchmarkAppend(b *testing.B) {
	db := openTest(b, "")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh lease each time: a lease is settled once.
		if _, err := db.Append(sampleEntry(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkAppendParallel measures synchronous appends from many goroutines.
func BenchmarkAppendParallel(b *testing.B) {
	db := openTest(b, "")
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := db.Append(sampleEntry(int(next.Add(1)))); err != nil {
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
	batch := make([]record.Entry, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for j := range batch {
			batch[j] = sampleEntry(i*len(batch) + j)
		}
		b.StartTimer()
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
	batch := make([]record.Entry, batchLen)
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
