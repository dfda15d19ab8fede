package service

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// BenchmarkGatewayLatency measures what the gateway adds to a request:
// sequential keep-alive GETs of a small answer from the same local
// server directly, over a libp2p stream alone (the replica's transport,
// as the gateway uses it), through the loopback gateway (its proxy, then
// that stream) and through the public endpoint (TLS with a self-signed
// certificate, an API token, then the same proxy), interleaved so that
// all four see the same machine load. It reports each path's p50 and p99
// and what the gateway and the public endpoint add to the direct call,
// in microseconds.
func BenchmarkGatewayLatency(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	open, prov, addr := p2pProviderAt(b, h)
	rep := &replica{jobID: "bench", leaseID: "lease-1", provider: prov, state: api.ReplicaReady,
		transport: replicaTransport(open, prov, "lease-1"), stop: make(chan struct{})}
	s := testService(b, rep)
	serveGateway(b, s)
	s.spec.Public = &api.PublicSpec{Addr: "127.0.0.1:0"}
	if err := normalizePublic(s.spec.Public); err != nil {
		b.Fatal(err)
	}
	pub, err := s.openPublic(s.spec.Public.Addr, "", "")
	if err != nil {
		b.Fatal(err)
	}
	s.public = pub
	b.Cleanup(func() { _ = pub.srv.Close() })
	tok, err := s.addToken("bench")
	if err != nil {
		b.Fatal(err)
	}
	var served []byte
	public := publicClient(b, pub.selfCert, &served)
	direct := &http.Client{Transport: &http.Transport{}}
	stream := &http.Client{Transport: replicaTransport(open, prov, "lease-1")}
	gateway := &http.Client{Transport: &http.Transport{}}
	paths := []struct {
		name   string
		client *http.Client
		url    string
		header http.Header
	}{
		{"direct", direct, "http://" + addr + "/", nil},
		{"libp2p", stream, "http://replica/", nil},
		{"gateway", gateway, "http://" + s.Gateway() + "/", http.Header{TokenHeader: {s.token}}},
		{"public", public, "https://" + pub.ln.Addr().String() + "/", http.Header{"Authorization": {"Bearer " + tok.Token}}},
	}
	get := func(i int) time.Duration {
		p := paths[i]
		req, _ := http.NewRequest(http.MethodGet, p.url, nil)
		req.Header = p.header
		start := time.Now()
		resp, err := p.client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %s", p.name, resp.Status)
		}
		return time.Since(start)
	}
	for range 100 { // warm up: connections made, code paths hot
		for i := range paths {
			get(i)
		}
	}
	lats := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for range b.N {
		for i := range paths {
			lats[i] = append(lats[i], get(i))
		}
	}
	b.StopTimer()
	pct := func(l []time.Duration, p float64) float64 {
		l = slices.Clone(l)
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(p*float64(len(l))))].Nanoseconds()) / 1e3
	}
	for i, p := range paths {
		b.ReportMetric(pct(lats[i], 0.50), p.name+"-p50-µs")
		b.ReportMetric(pct(lats[i], 0.99), p.name+"-p99-µs")
	}
	b.ReportMetric(pct(lats[2], 0.50)-pct(lats[0], 0.50), "added-p50-µs")
	b.ReportMetric(pct(lats[2], 0.99)-pct(lats[0], 0.99), "added-p99-µs")
	b.ReportMetric(pct(lats[3], 0.50)-pct(lats[0], 0.50), "public-added-p50-µs")
	b.ReportMetric(pct(lats[3], 0.99)-pct(lats[0], 0.99), "public-added-p99-µs")
}
