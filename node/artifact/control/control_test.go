package control

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/artifact/transfer"
	"github.com/gpumesh/gpumesh/p2p"
)

// newMux serves the artifact calls of a fresh node; changed counts
// Config.Changed, announced collects Config.Announce, jobs is what
// Config.Jobs answers.
func newMux(t *testing.T, jobs *[]api.JobView) (mux *http.ServeMux, changed *int, announced *[]string) {
	t.Helper()
	key, err := p2p.LoadOrCreateKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(context.Background(), p2p.Config{Key: key, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	signer, err := p2p.Signer(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := artifact.Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := transfer.NewService(transfer.ServiceConfig{Store: st, Net: n, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	changed, announced = new(int), new([]string)
	mux = http.NewServeMux()
	node := &fakeNode{jobs: jobs, changed: changed, announced: announced}
	New(Config{Transfer: svc, Self: n.ID(), Providers: node, Market: node, Advertiser: node,
		TempDir: dir, Now: time.Now}).Routes(mux)
	return mux, changed, announced
}

// fakeNode is the node as the artifacts API sees it: no providers known,
// the test's jobs, and the advertisements and announcements it counts.
type fakeNode struct {
	jobs      *[]api.JobView
	changed   *int
	announced *[]string
}

func (*fakeNode) FindProviders(context.Context, terms.Query) ([]terms.Capability, error) {
	return nil, nil
}
func (*fakeNode) Holdings(context.Context, string) ([]string, bool) { return nil, false }
func (*fakeNode) Reliability(string) float64                        { return terms.NeutralReliability }
func (f *fakeNode) Jobs() []api.JobView                             { return *f.jobs }
func (f *fakeNode) Readvertise()                                    { *f.changed++ }
func (f *fakeNode) Announce(id string)                              { *f.announced = append(*f.announced, id) }

func call(t *testing.T, mux *http.ServeMux, method, target, body string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w.Code, w.Body.String()
}

// TestAddListRemove: a file added is announced and advertised, listed
// with the job whose outputs it is, and removed.
func TestAddListRemove(t *testing.T) {
	f := filepath.Join(t.TempDir(), "data.bin")
	if err := os.WriteFile(f, bytes.Repeat([]byte("x"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	var jobs []api.JobView
	mux, changed, announced := newMux(t, &jobs)
	code, body := call(t, mux, "POST", "/v1/artifacts", `{"path":"`+f+`","public":true}`)
	var in artifact.Info
	if code != 200 || json.Unmarshal([]byte(body), &in) != nil || !artifact.ValidID(in.ID) || in.Size != 1000 {
		t.Fatalf("add: %d %s", code, body)
	}
	if *changed != 1 || len(*announced) != 1 || (*announced)[0] != in.ID {
		t.Fatalf("add: changed %d, announced %v", *changed, *announced)
	}
	jobs = append(jobs, api.JobView{OutputsArtifact: in.ID})
	jobs[0].Job.ID = "j1"
	code, body = call(t, mux, "GET", "/v1/artifacts", "")
	var views []api.ArtifactView
	if code != 200 || json.Unmarshal([]byte(body), &views) != nil || len(views) != 1 || views[0].ID != in.ID ||
		views[0].Job != "j1" || views[0].Use != api.ArtifactOutputs {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := call(t, mux, "DELETE", "/v1/artifacts/"+in.ID, ""); code != 200 {
		t.Fatalf("remove: %d %s", code, body)
	}
	if code, _ := call(t, mux, "GET", "/v1/artifacts/"+in.ID, ""); code != http.StatusNotFound {
		t.Fatalf("removed artifact: %d", code)
	}
}

// TestHostileCalls: every call refuses what cannot be with a 4xx and a
// one-line reason, and touches nothing.
func TestHostileCalls(t *testing.T) {
	var jobs []api.JobView
	mux, changed, _ := newMux(t, &jobs)
	unknown := strings.Repeat("a", 64)
	for _, c := range []struct {
		method, target, body string
		code                 int
	}{
		{"POST", "/v1/artifacts", "{", 400},
		{"POST", "/v1/artifacts", `{"path":"relative/file"}`, 400},
		{"POST", "/v1/artifacts", `{"path":"/x","image":"alpine"}`, 400},
		{"POST", "/v1/artifacts", `{"path":"/x","sealed":true,"public":true}`, 400},
		{"POST", "/v1/artifacts", `{"path":"/does/not/exist","public":true}`, 400},
		{"GET", "/v1/artifacts/..%2f..%2fetc", "", 400},
		{"GET", "/v1/artifacts/" + unknown, "", 404},
		{"DELETE", "/v1/artifacts/" + unknown, "", 404},
		{"POST", "/v1/artifacts/" + unknown + "/share", `{"peer":"nobody"}`, 400},
		{"POST", "/v1/artifacts/" + unknown + "/share", `{`, 400},
		{"POST", "/v1/artifacts/" + unknown + "/warm", `{"count":1}`, 404},
		{"POST", "/v1/artifacts/notanid/get", `{"dest":"/tmp/x"}`, 400},
		{"POST", "/v1/artifacts/" + unknown + "/get", `{"dest":"relative"}`, 400},
		{"POST", "/v1/artifacts/" + unknown + "/get", `{"dest":"/tmp/x","peers":["garbage"]}`, 400},
	} {
		code, body := call(t, mux, c.method, c.target, c.body)
		var eb api.ErrorBody
		if code != c.code || json.Unmarshal([]byte(body), &eb) != nil || eb.Error == "" || strings.Contains(strings.TrimSpace(eb.Error), "\n") {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.target, c.body, code, body, c.code)
		}
	}
	if *changed != 0 {
		t.Fatalf("hostile calls changed the store %d times", *changed)
	}
}
