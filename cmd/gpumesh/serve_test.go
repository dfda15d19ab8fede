package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/api/taskfile"
)

func TestServeCLIAgainstFakeDaemon(t *testing.T) {
	var posted api.ServiceSpec
	var scaled api.ScaleRequest
	view := func(spec api.ServiceSpec) api.ServiceView {
		v := api.ServiceView{ID: "svc-1", Spec: spec, Gateway: "127.0.0.1:4242", Token: "tok-abc123", Desired: 2, Ready: 2,
			Replicas: []api.ReplicaView{{JobID: "job-a", Provider: "12D3KooWprovider1", State: api.ReplicaReady,
				ReplicaStats: api.ReplicaStats{Requests: 10, P50MS: 1.5, P95MS: 3.25, P99MS: 4, CostUSD: 0.125, USDPer1kRequests: 12.5,
					TokensPerSec: 37.5, USDPer1MTokens: 2.75}}},
			Totals: api.ReplicaStats{Requests: 10, P95MS: 3.25, GPUSeconds: 1800, CostUSD: 0.125, USDPer1kRequests: 12.5,
				PromptTokens: 1000, CompletionTokens: 4000, TokensPerSec: 37.5, USDPer1MTokens: 2.75}}
		if spec.Job.Nodes > 1 {
			v.Replicas[0].Members = []api.GangMember{{Rank: 0, Provider: "12D3KooWprovider1", Run: terms.RunRunning},
				{Rank: 1, Provider: "12D3KooWprovider2", Run: terms.RunPending}}
		}
		if spec.ScaleToZero {
			v.ScaledToZero, v.ColdStarts, v.LastColdStartMS = true, 2, 3400
		}
		if len(spec.Regions) > 0 {
			v.Replicas[0].Region, v.Replicas[0].ProviderRegion, v.Replicas[0].RTTMS = "eu", "eu-west", 5.25
			v.Regions = []api.RegionView{{Region: "eu", Ready: 1, Want: 2, RTTMS: 5.25, Rank: 1}, {Region: "us", Want: 2}}
		}
		if spec.Public != nil {
			v.Public = &api.PublicView{URL: "https://" + spec.Public.Addr, Fingerprint: "AB:CD", CertPEM: "-----BEGIN CERTIFICATE-----", Tokens: 1}
		}
		return v
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
	var tokenAdded api.TokenRequest
	var revoked string
	mux.HandleFunc("POST /v1/services/{id}/tokens", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&tokenAdded)
		replyJSON(w, 200, api.APIToken{Name: tokenAdded.Name, Token: "secret-xyz"})
	})
	mux.HandleFunc("GET /v1/services/{id}/tokens", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, []api.APIToken{{Name: "alice", Requests: 42, Limited: 7}})
	})
	mux.HandleFunc("DELETE /v1/services/{id}/tokens/{name}", func(w http.ResponseWriter, r *http.Request) {
		revoked = r.PathValue("id") + "/" + r.PathValue("name")
		replyJSON(w, 200, api.APIToken{Name: r.PathValue("name")})
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
	const svcTask = "name: web\nresources:\n  accelerators: A100\n  ports: 8000\nrun: python3 serve.py\nmax_price: 2\nservice:\n  readiness_probe: /healthz\n"
	task := writeFile(t, "web.yaml", svcTask)

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
					j.Run.ServicePort != 8000 || j.Tier != terms.Gold || j.MaxPrice != 3 || j.Region != "eu" || strings.Join(j.Run.Command, " ") != "python serve.py" ||
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
		{"post task file", []string{"serve", "post", "--max-replicas", "4", "../../examples/vllm-service.yaml"}, 0, []string{"service svc-1: gateway http://127.0.0.1:4242"},
			func(t *testing.T) {
				j := posted.Job
				_, run, ok := taskfile.TaskScripts(j.Run.Command)
				if posted.ID != "llama-chat" || posted.Health != "/v1/models" || posted.StartTimeout != 20*time.Minute || posted.ProbeTimeout != 15*time.Second ||
					posted.Replicas != 2 || posted.MaxReplicas != 4 || j.Run.ServicePort != 8000 || j.Tier != terms.Gold || j.Duration != time.Hour ||
					j.MaxPrice != 1.2 || !ok || !strings.Contains(run, "vllm.entrypoints.openai.api_server") {
					t.Fatalf("posted %+v", posted)
				}
			}},
		{"post task --file with override", []string{"serve", "post", "--file", task, "--max-price", "3", "--json"}, 0, []string{`"gateway": "127.0.0.1:4242"`},
			func(t *testing.T) {
				if posted.ID != "web" || posted.Health != "/healthz" || posted.Replicas != 1 || posted.Job.MaxPrice != 3 || posted.Job.Run.ServicePort != 8000 {
					t.Fatalf("posted %+v", posted)
				}
			}},
		{"post regions", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--regions", "eu,us", "--replicas-per-region", "2",
			"--near", "eu-west", "--", "srv"}, 0, []string{"service svc-1: gateway"}, func(t *testing.T) {
			if strings.Join(posted.Regions, ",") != "eu,us" || posted.ReplicasPerRegion != 2 || posted.Replicas != 0 || posted.Job.Near != "eu-west" {
				t.Fatalf("posted regions %q × %d, replicas %d, near %q; want eu,us × 2, replicas left to the daemon", posted.Regions, posted.ReplicasPerRegion, posted.Replicas, posted.Job.Near)
			}
		}},
		{"status regions", []string{"serve", "status", "svc-1"}, 0, []string{"near eu-west", "region:    eu: 1 ready of 2, rtt 5.2 ms, routing rank 1",
			"region:    us: 0 ready of 2, rtt -, not routed (none ready)", "eu (eu-west)  5.2"}, nil},
		{"post gang", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--nodes", "2", "--count", "4", "--", "srv"},
			0, []string{"service svc-1: gateway"}, func(t *testing.T) {
				if posted.Job.Nodes != 2 || posted.Job.GPUCount != 4 {
					t.Fatalf("posted %d nodes × %d GPUs, want 2 × 4", posted.Job.Nodes, posted.Job.GPUCount)
				}
			}},
		{"status gang", []string{"serve", "status", "svc-1"}, 0, []string{"leases:    gold, each a gang of 2 × 4 GPU(s)",
			"gang:      job-a: 0 provider1 running, 1 provider2 pending"}, nil},
		{"gang of no nodes", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--nodes", "0", "--", "srv"},
			1, []string{"invalid --nodes: must be in [1, 64], got 0"}, nil},
		{"gang of negative nodes", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--nodes", "-2", "--", "srv"},
			1, []string{"invalid --nodes: must be in [1, 64], got -2"}, nil},
		{"gang of GPU fractions", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--nodes", "2", "--count", "0.5", "--", "srv"},
			1, []string{`invalid value "0.5" for flag -count`}, nil},
		{"gang task file of GPU fractions", []string{"serve", "post", writeFile(t, "frac.yaml",
			strings.Replace(svcTask, "accelerators: A100\n", "accelerators: A100:0.5\n", 1)+"num_nodes: 2\n")}, 1,
			[]string{"frac.yaml:9: num_nodes: a gang's members take whole GPUs"}, nil},
		{"gang task file of no nodes", []string{"serve", "post", writeFile(t, "zero.yaml", svcTask+"num_nodes: 0\n")}, 1,
			[]string{"zero.yaml:9: num_nodes: must be in [1, 64], got 0"}, nil},
		{"gang task file of too many nodes", []string{"serve", "post", "--nodes", "65", task}, 1,
			[]string{"invalid --nodes: must be in [1, 64], got 65"}, nil},
		{"post scale to zero", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--scale-to-zero", "--idle-after", "10m", "--", "srv"},
			0, []string{"service svc-1: gateway"}, func(t *testing.T) {
				if !posted.ScaleToZero || posted.IdleAfter != 10*time.Minute {
					t.Fatalf("posted scale to zero %v after %s", posted.ScaleToZero, posted.IdleAfter)
				}
			}},
		{"status scaled to zero", []string{"serve", "status", "svc-1"}, 0,
			[]string{"idle:      scales to zero after 10m0s idle; scaled to zero: the next request waits for a cold start; cold starts: 2, the last 3.4s"}, nil},
		{"list scaled to zero", []string{"serve", "list"}, 0, []string{"scaled to zero"}, nil},
		{"task file bad field", []string{"serve", "post", writeFile(t, "bad.yaml", svcTask+"  replicas: none\n")}, 1,
			[]string{`bad.yaml:9: service.replicas: must be a whole number, got "none"`}, nil},
		{"task file bad price", []string{"serve", "post", writeFile(t, "neg.yaml", strings.Replace(svcTask, "max_price: 2", "max_price: -1", 1))}, 1,
			[]string{"neg.yaml:6: max_price: must be a positive number, got -1"}, nil},
		{"flag over a task file", []string{"serve", "post", "--max-price", "0", task}, 1, []string{"invalid --max-price: must be a positive number, got 0"}, nil},
		{"task file without port", []string{"serve", "post", writeFile(t, "noport.yaml", strings.Replace(svcTask, "  ports: 8000\n", "", 1))}, 1,
			[]string{"noport.yaml: missing resources.ports (the port the server listens on), or give --port"}, nil},
		{"job task file", []string{"serve", "post", writeFile(t, "job.yaml", "run: x\nmax_price: 1\nduration: 1h\n")}, 1,
			[]string{"a task file without one is a job: gpumesh job post"}, nil},
		{"two service files", []string{"serve", "post", "--file", task, task}, 1, []string{"two service files"}, nil},
		{"post public", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--public", "0.0.0.0:8443", "--public-host", "api.example",
			"--tls-cert", "c.pem", "--tls-key", "/etc/k.pem", "--max-body", "1MiB", "--token-rate", "5", "--token-burst", "10", "--", "srv"},
			0, []string{"public:    https://0.0.0.0:8443, self-signed certificate", "sha256 AB:CD", "serve token add svc-1 NAME"}, func(t *testing.T) {
				p := posted.Public
				if p == nil || p.Addr != "0.0.0.0:8443" || strings.Join(p.Hosts, ",") != "api.example" || !filepath.IsAbs(p.TLSCert) ||
					!strings.HasSuffix(p.TLSCert, "/c.pem") || p.TLSKey != "/etc/k.pem" || p.MaxBody != 1<<20 || p.Rate != 5 || p.Burst != 10 {
					t.Fatalf("posted public %+v", p)
				}
			}},
		{"public flag without --public", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--token-rate", "5", "--", "srv"},
			1, []string{"--token-rate is for the public endpoint: give --public ADDR too"}, nil},
		{"bad max body", []string{"serve", "post", "--port", "8000", "--max-price", "3", "--public", ":8443", "--max-body", "lots", "--", "srv"},
			1, []string{"--max-body: invalid size"}, nil},
		{"token add", []string{"serve", "token", "add", "svc-1", "alice"}, 0, []string{"token alice: secret-xyz"}, func(t *testing.T) {
			if tokenAdded.Name != "alice" {
				t.Fatalf("token request %+v", tokenAdded)
			}
		}},
		{"token add without name", []string{"serve", "token", "add", "svc-1"}, 1, []string{"missing token NAME"}, nil},
		{"token list", []string{"serve", "token", "list", "svc-1"}, 0, []string{"alice", "42", "7"}, nil},
		{"token revoke", []string{"serve", "token", "revoke", "svc-1", "alice"}, 0, []string{"token alice revoked"}, func(t *testing.T) {
			if revoked != "svc-1/alice" {
				t.Fatalf("revoked %q", revoked)
			}
		}},
		{"post without port", []string{"serve", "post", "--max-price", "2", "--", "srv"}, 1, []string{"--port is required"}, nil},
		{"post without command", []string{"serve", "post", "--max-price", "2", "--port", "80"}, 1, []string{"no command"}, nil},
		{"list", []string{"serve", "list"}, 0, []string{"svc-1", "127.0.0.1:4242", "2/2", "3.2"}, nil},
		{"status", []string{"serve", "status", "svc-1"}, 0, []string{"gateway:   http://127.0.0.1:4242", "token:     tok-abc123", "job-a", "ready", "3.25",
			"cost:      0.500 GPU-h, $0.1250 at the lease prices, $12.5000 per 1,000 requests",
			"tokens:    1000 prompt + 4000 completion, 37.5 tokens/s, $2.7500 per 1M tokens", "0.1250  12.5000   37.5   2.7500"}, nil},
		{"status json", []string{"serve", "status", "--json", "svc-1"}, 0, []string{`"p95_ms": 3.25`, `"tokens_per_sec": 37.5`, `"usd_per_1m_tokens": 2.75`,
			`"usd_per_1k_requests": 12.5`, `"gpu_seconds": 1800`}, nil},
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
