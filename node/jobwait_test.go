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

// longPollNet is a renter and a provider with one A100, and a client of
// the renter's API.
func longPollNet(t *testing.T) (*testNode, *api.Client) {
	root := t.TempDir()
	renter := startWith(t, filepath.Join(root, "renter"), renterConfig(), nil, Options{})
	prov := startWith(t, filepath.Join(root, "prov"),
		fastConfig(providerConfig("eu-west", 0.5, terms.GPU{Model: "A100", VRAMGB: 80})), renter.Daemon, Options{})
	waitAdvertised(t, renter, prov)
	return renter, api.NewClient(renter.dir)
}

// TestJobWaitLongPoll: GET /v1/jobs/{id}?wait=D answers at each change of
// the job's view, refuses a bad wait in one line, and without a change
// answers the same view once D has passed.
func TestJobWaitLongPoll(t *testing.T) {
	renter, cl := longPollNet(t)
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
	// minute, and none repeats the view before it. Each ask names the
	// view it has (its ETag), so a change that came between two asks is
	// answered at once.
	prev, tag, err := cl.JobNext(context.Background(), v.Job.ID, 0, "")
	if err != nil || tag == "" {
		t.Fatalf("the view's ETag %q: %v", tag, err)
	}
	for changes := 0; prev.Receipt == nil; changes++ {
		if changes > 100 {
			t.Fatalf("no receipt after %d changes: %+v", changes, prev)
		}
		asked := time.Now()
		var got api.JobView
		got, tag, err = cl.JobNext(context.Background(), v.Job.ID, time.Minute, tag)
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

// TestJobWaitAnswersAChangeMadeBeforeTheAsk: a long poll that names the
// view its caller has (If-None-Match: the ETag of its last answer) answers
// at once when the job changed since, here the whole run to its receipt
// between two asks; without that, it would wait for a change after it
// (none: the job is settled) and hold the caller for the whole wait.
func TestJobWaitAnswersAChangeMadeBeforeTheAsk(t *testing.T) {
	renter, cl := longPollNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The caller's view is the post's answer (at its lease: the job runs
	// a second, so no receipt can be in it), tagged as the daemon tags a
	// view's JSON.
	v := post(t, renter, shJob(terms.Silver, 2, "sleep 1; echo done"))
	if v.Receipt != nil {
		t.Fatal("a receipt in the post's answer")
	}
	_, tag, err := api.TaggedBody(v)
	if err != nil {
		t.Fatal(err)
	}
	tr := renter.market.tracker
	for {
		changed := tr.Changed()
		if now, err := tr.View(v.Job.ID); err != nil || now.Receipt != nil {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no receipt")
		}
	}
	asked := time.Now()
	got, gotTag, err := cl.JobNext(ctx, v.Job.ID, time.Minute, tag)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(asked); el >= 30*time.Second || got.Receipt == nil || gotTag == tag {
		t.Fatalf("asked with the post's view, answered after %s: receipt %v, tag %s (was %s)", el.Round(time.Millisecond), got.Receipt != nil, gotTag, tag)
	}
	// Asked again with the settled view's tag, it waits: nothing changes.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, _, err := cl.JobNext(short, v.Job.ID, time.Minute, gotTag); err == nil {
		t.Fatal("a long poll naming the settled view answered before a change")
	}
}
