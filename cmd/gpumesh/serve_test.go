package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
)

func TestServeCLIAgainstFakeDaemon(t *testing.T) {
	var posted api.ServiceSpec
	var scaled api.ScaleRequest
	view := func(spec api.ServiceSpec) api.ServiceView {
		return api.ServiceView{ID: "svc-1", Spec: spec, Gateway: "127.0.0.1:4242", Token: "tok-abc123", Desired: 2, Ready: 2,
			Replicas: []api.ReplicaView{{JobID: "job-a", Provider: "12D3KooWprovider1", State: api.ReplicaReady,
				ReplicaStats: api.ReplicaStats{Requests: 10, P50MS: 1.5, P95MS: 3.25, P99MS: 4}}},
			Totals: api.ReplicaStats{Requests: 10, P95MS: 3.25}}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/services", func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&posted); err != nil {
			replyJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		replyJSON(w, 200, view(posted))
	})
	mux.HandleFunc("GET /v1/services", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, []api.ServiceView{view(posted)})
	})
	mux.HandleFunc("GET /v1/services/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "svc-1" {
			replyJSON(w, 404, map[string]string{"error": `no service "` + r.PathValue("id") + `"`})
			return
		}
		replyJSON(w, 200, view(posted))
	})
	mux.HandleFunc("POST /v1/services/{id}/scale", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&scaled)
		replyJSON(w, 200, view(posted))
	})
	mux.HandleFunc("POST /v1/services/{id}/stop", func(w http.ResponseWriter, r *http.Request) {
		v := view(posted)
		v.Stopped = true
		replyJSON(w, 200, v)
	})
	dir := fakeDaemon(t, mux)
	file := writeFile(t, "svc.yaml", `
replicas: 2
max_replicas: 6
health: /healthz
target_p95: 300ms
job:
  tier: gold
  max_price: 2.5
  region: eu
  duration: 30m
  run:
    command: [python, serve.py]
    service_port: 8000
`)

	cases := []struct {
		name     string
		args     []string
		code     int
		contains []string
		check    func(t *testing.T)
	}{
		{"post flags", []string{"serve", "post", "--port", "8000", "--replicas", "2", "--max-replicas", "6", "--tier", "gold",
			"--max-price", "3", "--region", "eu", "--near", "eu-west", "--max-rtt", "40ms", "--health", "/healthz", "--target-p95", "300ms", "--", "python", "serve.py"},
			0, []string{"service svc-1: gateway http://127.0.0.1:4242", "token:     tok-abc123 (send it as the X-Gpumesh-Token header"}, func(t *testing.T) {
				j := posted.Job
				if posted.Replicas != 2 || posted.MaxReplicas != 6 || posted.Health != "/healthz" || posted.TargetP95 != 300*time.Millisecond ||
					j.Run.ServicePort != 8000 || j.Tier != auction.Gold || j.MaxPrice != 3 || j.Region != "eu" || strings.Join(j.Run.Command, " ") != "python serve.py" ||
					j.Near != "eu-west" || j.MaxRTT != 40*time.Millisecond {
					t.Fatalf("posted %+v", posted)
				}
			}},
		{"post file with override", []string{"serve", "post", "--file", file, "--max-replicas", "4", "--json"}, 0, []string{`"gateway": "127.0.0.1:4242"`},
			func(t *testing.T) {
				if posted.Replicas != 2 || posted.MaxReplicas != 4 || posted.Job.Duration != 30*time.Minute || posted.Job.MaxPrice != 2.5 ||
					posted.Job.Run.ServicePort != 8000 || posted.TargetP95 != 300*time.Millisecond {
					t.Fatalf("posted %+v", posted)
				}
			}},
		{"post without port", []string{"serve", "post", "--max-price", "2", "--", "srv"}, 1, []string{"--port is required"}, nil},
		{"post without command", []string{"serve", "post", "--max-price", "2", "--port", "80"}, 1, []string{"no command"}, nil},
		{"list", []string{"serve", "list"}, 0, []string{"svc-1", "127.0.0.1:4242", "2/2", "3.2"}, nil},
		{"status", []string{"serve", "status", "svc-1"}, 0, []string{"gateway:   http://127.0.0.1:4242", "token:     tok-abc123", "job-a", "ready", "3.25"}, nil},
		{"status json", []string{"serve", "status", "--json", "svc-1"}, 0, []string{`"p95_ms": 3.25`}, nil},
		{"status unknown", []string{"serve", "status", "nope"}, 1, []string{`no service "nope"`}, nil},
		{"scale", []string{"serve", "scale", "--replicas", "3", "svc-1"}, 0, []string{"service svc-1: bounds"}, func(t *testing.T) {
			if scaled.Replicas != 3 || scaled.MaxReplicas != 0 {
				t.Fatalf("scale request %+v", scaled)
			}
		}},
		{"scale nothing", []string{"serve", "scale", "svc-1"}, 1, []string{"give --replicas"}, nil},
		{"stop", []string{"serve", "stop", "svc-1"}, 0, []string{"service svc-1 stopped"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"--data-dir", dir}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			for _, s := range tc.contains {
				if !strings.Contains(out+errOut, s) {
					t.Fatalf("output lacks %q:\n%s%s", s, out, errOut)
				}
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
