package transfer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/libp2p/go-libp2p/core/peer"
)

// BenchmarkFetch measures a transfer on loopback from 1 and from 3 holders
// (every peer in this process, so CPU time covers both ends). The size is
// GPUMESH_BENCH_BYTES (default 1 GiB); the data is generated in a temp dir.
//
//	go test -run=^$ -bench=Fetch -benchtime=1x ./node/artifact/
func BenchmarkFetch(b *testing.B) {
	size := 1 << 30
	if s := os.Getenv("GPUMESH_BENCH_BYTES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	src, _ := writeRandom(b, size)
	holders := []*testPeer{newTestPeer(b, 0), newTestPeer(b, 0), newTestPeer(b, 0)}
	var id string
	for _, h := range holders {
		var err error
		if id, err = h.store.Add(src, artifact.Meta{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("sources=%d", n), func(b *testing.B) {
			b.SetBytes(int64(size))
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := newTestPeer(b, 0)
				var peers []peer.AddrInfo
				for _, h := range holders[:n] {
					peers = append(peers, h.info())
				}
				c0 := cpuTime()
				b.StartTimer()
				res, err := f.svc.Fetch(context.Background(), id, FetchOptions{Peers: peers, NoDiscovery: true})
				b.StopTimer()
				cpu += cpuTime() - c0
				if err != nil || res.Fetched != int64(size) {
					b.Fatalf("fetch: %v (%d bytes)", err, res.Fetched)
				}
				_ = f.net.Close()
				_ = os.RemoveAll(f.dir)
			}
			b.ReportMetric(cpu.Seconds()/(float64(size)*float64(b.N)/1e9), "cpu-s/GB")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
