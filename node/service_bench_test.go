package node

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// TestServiceGatewayBenchmark measures what the gateway adds: latency
// percentiles of sequential requests to the test server directly on
// loopback and through the gateway (libp2p to the provider, then into the
// job's sandbox), and requests/s through one gateway. It only runs with
// GPUMESH_SERVICE_BENCH=1 and reports its figures with t.Log.
func TestServiceGatewayBenchmark(t *testing.T) {
	if os.Getenv("GPUMESH_SERVICE_BENCH") == "" {
		t.Skip("set GPUMESH_SERVICE_BENCH=1 to run the gateway benchmark")
	}
	bin := buildServer(t)
	boot, ns := startNet(t, fastConfig(providerConfig("eu-west", 1.0, a100)))
	waitAdvertised(t, boot, ns...)
	c := api.NewClient(boot.dir)
	spec := serviceSpec(bin, 1, 1)
	spec.TargetConcurrency = 1000 // no autoscaling during the measurement
	v, err := c.PostService(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	v = waitService(t, c, boot.Daemon, v.ID, 30*time.Second, "1 ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })

	// The same server, directly on the host's loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	direct := exec.Command(bin)
	direct.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	said, err := direct.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Process.Kill(); _ = direct.Wait() })
	// The server says so once its socket listens.
	if line, err := bufio.NewReader(said).ReadString('\n'); err != nil || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("the direct server: %q, %v", line, err)
	}
	directAddr := "127.0.0.1:" + strconv.Itoa(port)

	client := gatewayClient(v, 64) // its token is sent to the direct server too, which ignores it
	get := func(addr string) error {
		resp, err := client.Get("http://" + addr + "/work")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	if err := get(directAddr); err != nil {
		t.Fatalf("the direct server: %v", err)
	}
	const n = 2000
	seq := func(addr string) (p50, p99 time.Duration) {
		lats := make([]time.Duration, 0, n)
		for range 200 { // warm up
			_ = get(addr)
		}
		for range n {
			start := time.Now()
			if err := get(addr); err != nil {
				t.Fatal(err)
			}
			lats = append(lats, time.Since(start))
		}
		slices.Sort(lats)
		return lats[n/2], lats[n*99/100]
	}
	rate := func(addr string, workers int, d time.Duration) float64 {
		var count atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					if get(addr) == nil {
						count.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return float64(count.Load()) / d.Seconds()
	}
	d50, d99 := seq(directAddr)
	g50, g99 := seq(v.Gateway)
	dRate := rate(directAddr, 16, 3*time.Second)
	gRate := rate(v.Gateway, 16, 3*time.Second)
	t.Logf("direct:  p50 %s p99 %s, %.0f req/s (16 clients)", d50, d99, dRate)
	t.Logf("gateway: p50 %s p99 %s, %.0f req/s (16 clients, 1 replica)", g50, g99, gRate)
	t.Logf("added by the gateway: p50 %s, p99 %s", g50-d50, g99-d99)
}
