package leasestream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
)

// TestRelayRefusals: the renter's calls refuse what cannot be, with the
// status the client reads, before any provider is dialled; a no-persist
// lease's log is served from the renter's kept copy.
func TestRelayRefusals(t *testing.T) {
	kept := t.TempDir()
	if err := os.WriteFile(lease.KeptLog(kept), []byte("kept log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]api.JobView{}
	queued := api.JobView{}
	queued.Job.ID, queued.State = "queued", terms.JobQueued
	jobs["queued"] = queued
	done := api.JobView{}
	done.Job.ID, done.Lease = "done", &terms.Lease{ID: "l-kept", Provider: "p"}
	jobs["done"] = done
	rl := NewRelay(context.Background(), RelayConfig{Jobs: fakeJobs{jobs: jobs, kept: kept}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/logs", rl.Logs)
	mux.HandleFunc("POST /v1/jobs/{id}/exec", rl.Exec)
	mux.HandleFunc("POST /v1/jobs/{id}/port-forward", rl.PortForward)
	upgrade := func(r *http.Request, proto string) {
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", proto)
	}
	for _, c := range []struct {
		name, method, target, body, upgrade string
		code                                int
	}{
		{"unknown job", "GET", "/v1/jobs/nope/logs", "", "", 404},
		{"attempt not a number", "GET", "/v1/jobs/queued/logs?attempt=x", "", "", 400},
		{"attempt zero", "GET", "/v1/jobs/queued/logs?attempt=0", "", "", 400},
		{"no lease yet", "GET", "/v1/jobs/queued/logs", "", "", 400},
		{"attempt it never had", "GET", "/v1/jobs/queued/logs?attempt=3", "", "", 404},
		{"exec without upgrade", "POST", "/v1/jobs/queued/exec", `{"command":["id"]}`, "", 400},
		{"exec bad body", "POST", "/v1/jobs/queued/exec", `{`, api.ExecUpgrade, 400},
		{"exec unknown field", "POST", "/v1/jobs/queued/exec", `{"command":["id"],"root":true}`, api.ExecUpgrade, 400},
		{"exec no command", "POST", "/v1/jobs/queued/exec", `{"command":[""]}`, api.ExecUpgrade, 400},
		{"exec no lease", "POST", "/v1/jobs/queued/exec", `{"command":["id"]}`, api.ExecUpgrade, 400},
		{"port-forward without upgrade", "POST", "/v1/jobs/queued/port-forward?port=80", "", "", 400},
		{"port-forward port 0", "POST", "/v1/jobs/queued/port-forward?port=0", "", api.PortForwardUpgrade, 400},
		{"port-forward port too big", "POST", "/v1/jobs/queued/port-forward?port=65536", "", api.PortForwardUpgrade, 400},
	} {
		r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
		if c.upgrade != "" {
			upgrade(r, c.upgrade)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var eb api.ErrorBody
		if w.Code != c.code || json.Unmarshal(w.Body.Bytes(), &eb) != nil || eb.Error == "" {
			t.Errorf("%s: %d %q, want %d", c.name, w.Code, w.Body.String(), c.code)
		}
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/v1/jobs/done/logs", nil))
	if w.Code != 200 || w.Body.String() != "kept log\n" {
		t.Fatalf("kept log: %d %q", w.Code, w.Body.String())
	}
}

// fakeJobs are a renter's jobs: those of the map, and one no-persist lease
// (l-kept) whose files it kept in kept.
type fakeJobs struct {
	jobs map[string]api.JobView
	kept string
}

func (f fakeJobs) View(id string) (api.JobView, error) {
	if v, ok := f.jobs[id]; ok {
		return v, nil
	}
	return api.JobView{}, &lease.RequestError{Missing: true, Msg: "no job " + id}
}

func (f fakeJobs) KeptDir(leaseID string) (string, bool) { return f.kept, leaseID == "l-kept" }
