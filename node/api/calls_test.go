package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// serve answers the control API on a fresh data dir's socket with mux.
func serve(t *testing.T, mux *http.ServeMux) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "api") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return NewClient(dir)
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// The typed calls reach the daemon's routes (ids path-escaped, filters as
// the query the daemon parses) and decode its answers.
func TestCalls(t *testing.T) {
	ctx := context.Background()
	var seen []string
	note := func(r *http.Request) { seen = append(seen, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/providers", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		reply(w, 200, []terms.Capability{{Peer: "p1"}})
	})
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		reply(w, 200, JobView{JobStatus: terms.JobStatus{Job: terms.Job{ID: r.PathValue("id")}, State: terms.JobCancelled}})
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		reply(w, 200, []record.Entry{{Seq: 7}})
	})
	mux.HandleFunc("GET /v1/ledger/export", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		io.WriteString(w, "seq,kind\n")
	})
	mux.HandleFunc("GET /v1/reputation/{peer}", func(w http.ResponseWriter, r *http.Request) {
		note(r)
		reply(w, 404, ErrorBody{Error: "no receipts for " + r.PathValue("peer")})
	})
	c := serve(t, mux)

	caps, err := c.Providers(ctx, terms.Query{GPU: "H100", Region: "eu", MinVRAM: 40, GPUCount: 2})
	if err != nil || len(caps) != 1 || caps[0].Peer != "p1" {
		t.Fatalf("Providers = %+v, %v", caps, err)
	}
	if _, err := c.Providers(ctx, terms.Query{}); err != nil {
		t.Fatal(err)
	}
	v, err := c.CancelJob(ctx, "a/b c")
	if err != nil || v.Job.ID != "a/b c" || v.State != terms.JobCancelled {
		t.Fatalf("CancelJob = %+v, %v", v, err)
	}
	since := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	es, err := c.Ledger(ctx, record.Filter{Kind: record.KindReceipt, Counterparty: "P", LeaseID: "L", Since: since, Limit: 5})
	if err != nil || len(es) != 1 || es[0].Seq != 7 {
		t.Fatalf("Ledger = %+v, %v", es, err)
	}
	body, err := c.LedgerExport(ctx, record.Filter{Kind: record.KindPaymentOwed}, ExportCSV)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "seq,kind\n" {
		t.Fatalf("export body %q", b)
	}
	if _, err := c.Reputation(ctx, "12D3KooWx"); err == nil || err.Error() != "no receipts for 12D3KooWx" {
		t.Fatalf("Reputation of an unknown peer = %v, want the daemon's message", err)
	}
	want := []string{
		"GET /v1/providers?count=2&gpu=H100&min_vram=40&region=eu",
		"GET /v1/providers?",
		"POST /v1/jobs/a%2Fb%20c/cancel?",
		"GET /v1/ledger?counterparty=P&kind=receipt&lease=L&limit=5&since=2026-03-14T09%3A00%3A00Z",
		"GET /v1/ledger/export?format=csv&kind=payment_owed",
		"GET /v1/reputation/12D3KooWx?",
	}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("requests:\n%q\nwant\n%q", seen, want)
	}
}

func TestOutputsManifest(t *testing.T) {
	ctx := context.Background()
	manifest := []terms.OutputFile{{Path: "out/a", Size: 3, SHA256: "ab"}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "ok":
			b, _ := json.Marshal(manifest)
			w.Header().Set(ManifestHeader, string(b))
		case "garbled":
			w.Header().Set(ManifestHeader, "[{")
		}
		io.WriteString(w, "bundle")
	})
	c := serve(t, mux)

	got, body, err := c.Outputs(ctx, "ok")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if !reflect.DeepEqual(got, manifest) || string(b) != "bundle" {
		t.Fatalf("Outputs = %+v, body %q", got, b)
	}
	for id, want := range map[string]string{
		"none":    "outputs of job none: the daemon sent no X-Gpumesh-Manifest header",
		"garbled": "outputs of job garbled: bad manifest",
	} {
		t.Run(id, func(t *testing.T) {
			_, body, err := c.Outputs(ctx, id)
			if err == nil || body != nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Outputs(%s) = %v (body %v), want %q", id, err, body, want)
			}
		})
	}
}

func TestNotRunning(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "nowhere"))
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Status without a daemon = %v, want ErrNotRunning", err)
	}
}
