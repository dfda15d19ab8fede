package node

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

func TestMetricsEndpoint(t *testing.T) {
	addr := freeLoopback(t)
	cfg := providerConfig("eu-west", 1, a100)
	cfg.MetricsAddr = addr
	n := startNode(t, t.TempDir(), cfg, nil)
	defer n.Close()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"gpumesh_gpus 1", "gpumesh_peers 0", "gpumesh_provider_occupancy_ratio 0", "gpumesh_reputation_score 0.5"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	// Profiles are not served unless metrics_pprof says so.
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "goroutine") {
			t.Errorf("%s without metrics_pprof: %d %.100q", path, resp.StatusCode, b)
		}
	}
	// A page on a name rebound to 127.0.0.1 sends its own Host.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Host = "rebound.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(string(body), "gpumesh_") {
		t.Errorf("metrics for Host rebound.example: %d %.100q", resp.StatusCode, body)
	}
}

// TestGossipedForgeriesDoNotMoveReputation: receipts arriving on the
// reputation topic count only when both parties signed them.
func TestGossipedForgeriesDoNotMoveReputation(t *testing.T) {
	n := startNode(t, t.TempDir(), renterConfig(), nil)
	defer n.Close()
	prov, renter := signtest.Pair(t)
	now := time.Now()
	rc := attest.Receipt{LeaseID: "l1", JobID: "j1", Renter: renter.ID().String(), Provider: prov.ID().String(),
		Start: now.Add(-time.Hour), End: now, GPUCount: 1, GPUSeconds: 3600, Price: 1, Amount: 1, Outcome: "succeeded", IssuedAt: now}
	one, err := attest.NewReceipt(prov, rc)
	if err != nil {
		t.Fatal(err)
	}
	half, _ := one.Marshal() // provider signature only
	tampered := func() []byte {
		sr, _ := attest.NewReceipt(prov, rc)
		_ = sr.Countersign(renter)
		sr.Payload = []byte(strings.Replace(string(sr.Payload), `"amount":1`, `"amount":9`, 1))
		b, _ := sr.Marshal()
		return b
	}()
	before := n.market.book.Stats(prov.ID().String())
	for _, msg := range [][]byte{gossipMsg(half), gossipMsg(tampered), []byte("garbage")} {
		n.market.receipts.HandleGossip(peer.ID(prov.ID()), msg)
	}
	if after := n.market.book.Stats(prov.ID().String()); after != before {
		t.Fatalf("forged receipts changed reputation: %+v -> %+v", before, after)
	}
	c := n.market.allCounters()
	if c["reputation.incomplete"]+c["reputation.tampered"]+c["reputation.bad_signature"]+c["reputation.invalid"] < 2 || c["reputation.gossip_malformed"] != 1 {
		t.Fatalf("forgeries not counted: %v", c)
	}
	// A genuine one counts.
	good, _ := attest.NewReceipt(prov, rc)
	if err := good.Countersign(renter); err != nil {
		t.Fatal(err)
	}
	b, _ := good.Marshal()
	n.market.receipts.HandleGossip(peer.ID(prov.ID()), gossipMsg(b))
	if got := n.market.book.Stats(prov.ID().String()).Receipts; got != 1 {
		t.Fatalf("genuine receipt not counted: %d", got)
	}
}
