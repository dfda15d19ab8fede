package node

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// TestJobWaitLongPoll: GET /v1/jobs/{id}?wait=D answers at each change of
// the job's view, refuses a bad wait in one line, and without a change
// answers the same view once D has passed.
func TestJobWaitLongPoll(t *testing.T) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	prov := startWith(t, filepath.Join(root, "prov"),
		fastConfig(providerConfig("eu-west", 0.5, terms.GPU{Model: "A100", VRAMGB: 80})), renter.Daemon, Options{})
	waitAdvertised(t, renter, prov)
	cl := api.NewClient(renter.dir)
	get := func(id, wait string) (api.JobView, error) {
		var v api.JobView
		err := cl.Do(context.Background(), http.MethodGet, "/jobs/"+id, url.Values{"wait": {wait}}, nil, &v)
		return v, err
	}

	v := post(t, renter, shJob(terms.Silver, 2, "echo done"))
	for _, bad := range []string{"soon", "-1s", "2h", "1e9"} {
		_, err := get(v.Job.ID, bad)
		if err == nil || !strings.Contains(err.Error(), "wait: want a duration") || strings.Contains(err.Error(), "\n") {
			t.Errorf("wait=%q: %v, want a one-line refusal", bad, err)
		}
	}
	if _, err := get("job-none", "1s"); err == nil || !strings.Contains(err.Error(), "no job") {
		t.Errorf("an unknown job's long poll: %v", err)
	}

	// Each answer before the receipt is a change: none waits the full
	// minute, and none repeats the view before it.
	prev, err := renter.market.tracker.View(v.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	for changes := 0; prev.Receipt == nil; changes++ {
		if changes > 100 {
			t.Fatalf("no receipt after %d changes: %+v", changes, prev)
		}
		asked := time.Now()
		got, err := get(v.Job.ID, "1m")
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(asked) >= time.Minute {
			t.Fatalf("the long poll waited out its minute with the job at %s/%s", got.State, got.Run)
		}
		if reflect.DeepEqual(got, prev) {
			t.Fatalf("the long poll answered an unchanged view: %+v", got)
		}
		t.Logf("change %d after %s: %s/%s", changes+1, time.Since(asked).Round(time.Millisecond), got.State, got.Run)
		prev = got
	}

	// Settled, nothing changes any more: the poll answers the same view
	// once its wait has passed.
	asked := time.Now()
	got, err := get(v.Job.ID, "300ms")
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(asked); el < 300*time.Millisecond {
		t.Fatalf("a settled job's long poll answered after %s, before its wait", el)
	}
	if !reflect.DeepEqual(got.Receipt, prev.Receipt) || got.Run != prev.Run {
		t.Fatalf("a settled job's view changed: %+v, was %+v", got, prev)
	}
}
