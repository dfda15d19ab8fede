package artifact

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrepareInputsFailureFailsTheLease: a job naming an input its renter
// never serves fails with a clear error (the lease fails), leaves no
// inputs dir behind and pins nothing; it must never panic (the daemon
// would die with it).
func TestPrepareInputsFailureFailsTheLease(t *testing.T) {
	renter, prov := newTestPeer(t, 0), newTestPeer(t, 0)
	prov.net.AddAddrs(renter.net.ID(), renter.addrs())
	missing := strings.Repeat("ab", 32) // an id the renter does not hold
	dir := filepath.Join(t.TempDir(), "inputs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := prov.svc.PrepareInputs(ctx, map[string]string{"data": missing}, renter.net.ID(), renter.addrs(), dir)
	if err == nil || release != nil {
		t.Fatalf("an input no one serves: release %v, err %v", release != nil, err)
	}
	if !strings.Contains(err.Error(), "input data") {
		t.Fatalf("error does not name the input: %v", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("inputs dir left behind: %v", serr)
	}
	if n := prov.store.PinnedBytes(); n != 0 {
		t.Fatalf("%d bytes still pinned", n)
	}
}
