package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
)

// fakeDaemon serves mux on the control socket of a fresh data dir, as the
// daemon would, and returns the data dir.
func fakeDaemon(t *testing.T, mux *http.ServeMux) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("unix", api.SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return dir
}

func replyJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func leasedView(id string, run terms.RunState) api.JobView {
	start := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	return api.JobView{
		JobStatus: terms.JobStatus{
			Job:    terms.Job{ID: id, Tier: terms.Silver, MaxPrice: 2, GPUCount: 2, Duration: time.Hour, Run: terms.RunSpec{Command: []string{"true"}}},
			State:  terms.JobLeased,
			Winner: "12D3KooWprov",
			Lease: &terms.Lease{ID: "lease-1", JobID: id, Provider: "12D3KooWprov", Price: 1.5, Start: start,
				End: start.Add(time.Hour), GPUCount: 2, Tier: terms.Silver, State: terms.RunRunning},
		},
		Run: run,
	}
}

func TestMarketCLIAgainstFakeDaemon(t *testing.T) {
	defer func(d time.Duration) { waitInterval = d }(waitInterval)
	waitInterval = 5 * time.Millisecond

	var posted terms.Job
	var polls atomic.Int32
	var logQuery, ledgerQueryStr, exportQuery, statusID, providersQuery string
	exit3 := 3
	files := map[string]string{"out/metrics.json": `{"acc":0.9}`, "out/model.bin": strings.Repeat("m", 3000)}
	tampered := false
	// receipts holds the result hash of the receipt a job's view carries
	// (none when absent).
	var receipts sync.Map

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.PostJobRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			replyJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		posted = req.Job
		switch req.Job.Workload {
		case "nowhere":
			v := leasedView("j-none", "")
			v.State, v.Lease, v.Winner = terms.JobUnplaceable, nil, ""
			v.Reasons = []string{"no bids", "2 providers out of region"}
			replyJSON(w, 200, v)
		case "quick":
			// A job so short it finished before its post returned.
			v := leasedView("quick", terms.RunSucceeded)
			v.State = terms.JobFinished
			replyJSON(w, 200, v)
		default:
			replyJSON(w, 200, leasedView(req.Job.Workload, terms.RunPending))
		}
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		statusID = id
		n := polls.Add(1)
		v := leasedView(id, terms.RunRunning)
		if h, ok := receipts.Load(id); ok {
			v.Receipt = &attest.Receipt{LeaseID: v.Lease.ID, Outcome: terms.RunSucceeded, ResultHash: h.(string)}
		}
		if n >= 3 {
			v.State = terms.JobFinished
			switch id {
			case "ok":
				v.Run = terms.RunSucceeded
				v.CostUSD = 3
			case "bad":
				v.Run, v.ExitCode, v.Detail = terms.RunFailed, &exit3, "oom"
			}
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		un := leasedView("j2", "")
		un.State, un.Lease, un.Winner = terms.JobUnplaceable, nil, ""
		replyJSON(w, 200, []api.JobView{leasedView("j1", terms.RunRunning), un})
	})
	mux.HandleFunc("GET /v1/jobs/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		logQuery = r.URL.RawQuery
		w.Header().Set("Content-Type", "text/plain")
		if r.PathValue("id") == "esc" {
			// A job that tries to drive the reader's terminal.
			io.WriteString(w, escLog)
			return
		}
		io.WriteString(w, "epoch 1\nepoch 2\n")
	})
	mux.HandleFunc("GET /v1/jobs/{id}/outputs", func(w http.ResponseWriter, r *http.Request) {
		// The provider's side of the bundle, from a directory holding the
		// job's files (tampered: model.bin's bytes differ from the manifest).
		src := t.TempDir()
		var man []terms.OutputFile
		for _, p := range []string{"out/metrics.json", "out/model.bin"} {
			man = append(man, outFile(p, files[p]))
			body := files[p]
			if tampered && p == "out/model.bin" {
				body = strings.Repeat("x", 3000)
			}
			full := filepath.Join(src, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Error(err)
			}
			if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
				t.Error(err)
			}
		}
		b, _ := json.Marshal(man)
		w.Header().Set(api.ManifestHeader, string(b))
		w.Header().Set("Content-Type", "application/x-tar")
		if err := wire.WriteBundle(w, src, man); err != nil {
			t.Error(err)
		}
	})
	mux.HandleFunc("GET /v1/jobs/{id}/bids", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, api.BidsView{JobID: r.PathValue("id"), Explain: terms.Explanation{Winner: "12D3KooWcheap", Rank: 1,
			Score: 1.111, Price: 1, Reliability: 0.9, Rule: terms.RuleOnlyEligible}, Bids: []terms.Ranked{
			{Candidate: terms.Candidate{Bid: terms.Bid{Provider: "12D3KooWcheap", Price: 1, Datasets: []string{"c4"}}, Reliability: 0.9}, Score: 1.111},
			{Candidate: terms.Candidate{Bid: terms.Bid{Provider: "12D3KooWdear", Price: 9}, Reliability: 0.5}, Rejected: "price above max"},
		}})
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		ledgerQueryStr = r.URL.RawQuery
		replyJSON(w, 200, []record.Entry{{Seq: 1, Kind: record.KindPaymentOwed, Amount: 2.5, Counterparty: "12D3KooWprov", Direction: record.DirOwed}})
	})
	mux.HandleFunc("GET /v1/ledger/verify", func(w http.ResponseWriter, r *http.Request) {
		if tampered {
			replyJSON(w, 409, map[string]string{"error": "ledger: chain does not verify at seq 2: hash mismatch"})
			return
		}
		replyJSON(w, 200, record.VerifyReport{Entries: 3, HeadSeq: 3, HeadHash: "abc123"})
	})
	mux.HandleFunc("GET /v1/ledger/balances", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, map[string]record.Balance{
			"12D3KooWb": {Owed: 2, Net: -2},
			"12D3KooWa": {Earned: 5, Credits: 0.5, Net: 5.5},
		})
	})
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		v := leasedView(r.PathValue("id"), terms.RunRunning)
		if r.PathValue("id") == "done" {
			v.Run = terms.RunCancelled
		}
		replyJSON(w, 200, v)
	})
	mux.HandleFunc("GET /v1/counters", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, map[string]int{"renter.bids": 4, "provider.malformed_stream": 1})
	})
	mux.HandleFunc("GET /v1/providers", func(w http.ResponseWriter, r *http.Request) {
		providersQuery = r.URL.RawQuery
		replyJSON(w, 200, []terms.Capability{{Peer: "12D3KooWprov", Region: "eu-west",
			GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}, {Model: "H100", VRAMGB: 80}}, Policy: terms.Policy{PriceFloor: 1.25}}})
	})
	mux.HandleFunc("GET /v1/ledger/export", func(w http.ResponseWriter, r *http.Request) {
		exportQuery = r.URL.RawQuery
		io.WriteString(w, "seq,kind\n1,receipt\n")
	})
	dir := fakeDaemon(t, mux)
	gm := func(args ...string) (int, string, string) { return runCLI(t, append([]string{"-d", dir}, args...)...) }

	t.Run("post leased", func(t *testing.T) {
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--count", "2", "--workload", "j1", "--", "python", "x.py")
		if code != 0 {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
		first := strings.SplitN(out, "\n", 2)[0]
		if !strings.HasPrefix(first, "job j1 leased to 12D3KooWprov at $1.5/GPU-h (start ") {
			t.Fatalf("first line %q", first)
		}
		if !strings.Contains(out, "est. cost $3.0000") {
			t.Fatalf("summary lacks the estimated cost (1.5 * 2 GPUs * 1h):\n%s", out)
		}
		if posted.MaxPrice != 2 || posted.GPUCount != 2 || posted.CreatedAt.IsZero() || !reflect.DeepEqual(posted.Run.Command, []string{"python", "x.py"}) {
			t.Fatalf("daemon received %+v", posted)
		}
	})
	t.Run("post finished at once", func(t *testing.T) {
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--workload", "quick", "--", "x")
		if code != 0 || !strings.HasPrefix(out, "job quick leased to 12D3KooWprov at $1.5/GPU-h (start ") {
			t.Fatalf("code %d, stderr %q, out:\n%s", code, errOut, out)
		}
	})
	t.Run("post unplaceable", func(t *testing.T) {
		oneLineError(t, "job j-none unplaceable: no bids; 2 providers out of region",
			"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", "nowhere", "--", "x")
	})
	t.Run("post wait succeeded", func(t *testing.T) {
		polls.Store(0)
		code, out, errOut := gm("job", "post", "--max-price", "2", "--duration", "1h", "--workload", "ok", "--wait", "--", "x")
		if code != 0 || !strings.Contains(out, "run:        succeeded") || !strings.Contains(out, "cost:       $3.0000") {
			t.Fatalf("code %d\nout %s\nerr %s", code, out, errOut)
		}
		if polls.Load() < 3 {
			t.Fatalf("returned after %d polls, before the run ended", polls.Load())
		}
	})
	t.Run("post wait failed", func(t *testing.T) {
		polls.Store(0)
		oneLineError(t, "job bad failed (exit code 3): oom",
			"-d", dir, "job", "post", "--max-price", "2", "--duration", "1h", "--workload", "bad", "--wait", "--", "x")
	})
	t.Run("status escapes the id", func(t *testing.T) {
		code, out, _ := gm("job", "status", "a/b c")
		if code != 0 || statusID != "a/b c" || !strings.Contains(out, "winner:     prov\n") {
			t.Fatalf("code %d, daemon saw id %q, out:\n%s", code, statusID, out)
		}
	})
	t.Run("list", func(t *testing.T) {
		code, out, _ := gm("job", "list")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 4 || strings.Fields(lines[0])[0] != "ID" {
			t.Fatalf("code %d, out:\n%s", code, out)
		}
		if f := strings.Fields(lines[1]); !reflect.DeepEqual(f, []string{"j1", "silver", "leased", "running", "prov", "$1.5", "$0.0000", "-", "-", "-"}) {
			t.Fatalf("row %q", f)
		}
		if f := strings.Fields(lines[2]); !reflect.DeepEqual(f, []string{"j2", "silver", "unplaceable", "-", "-", "-", "$0.0000", "-", "-", "-"}) {
			t.Fatalf("row %q", f)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		if code, out, _ := gm("job", "cancel", "done"); code != 0 || out != "job done cancelled\n" {
			t.Fatalf("code %d, out %q", code, out)
		}
		if code, out, _ := gm("job", "cancel", "busy"); code != 0 || out != "job busy: cancellation requested (state leased, run running)\n" {
			t.Fatalf("code %d, out %q", code, out)
		}
	})
	t.Run("logs follow", func(t *testing.T) {
		code, out, _ := gm("job", "logs", "--follow", "j1")
		if code != 0 || out != "epoch 1\nepoch 2\n" || logQuery != "attempt=1&follow=1" {
			t.Fatalf("code %d, query %q, out %q", code, logQuery, out)
		}
	})
	t.Run("bids", func(t *testing.T) {
		code, out, _ := gm("bids", "j1")
		lines := strings.Split(out, "\n")
		if code != 0 || !strings.HasPrefix(lines[1], "1 ") || !strings.HasPrefix(lines[2], "- ") ||
			!strings.Contains(lines[1], "c4") || !strings.Contains(lines[2], "price above max") || !strings.Contains(out, "the only eligible bid") {
			t.Fatalf("code %d, out:\n%s", code, out)
		}
	})
	t.Run("logs escapes", func(t *testing.T) {
		code, out, _ := gm("job", "logs", "esc")
		if code != 0 || out != escShown {
			t.Fatalf("code %d, out %q, want %q", code, out, escShown)
		}
		code, out, _ = gm("job", "logs", "--raw", "esc")
		if code != 0 || out != escLog {
			t.Fatalf("--raw: code %d, out %q", code, out)
		}
	})
	t.Run("fetch checks the receipt", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "res")
		receipts.Delete("j1")
		oneLineError(t, "job j1 has no receipt yet", "-d", dir, "job", "fetch", "j1", dest)
		receipts.Store("j1", terms.ManifestHash([]terms.OutputFile{outFile("out/metrics.json", files["out/metrics.json"])}))
		oneLineError(t, "is not the one its receipt names", "-d", dir, "job", "fetch", "j1", dest)
		if _, err := os.Stat(dest); !os.IsNotExist(err) {
			t.Fatalf("refused outputs created %s: %v", dest, err)
		}
	})
	t.Run("fetch size cap", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "res")
		receipts.Store("j1", terms.ManifestHash([]terms.OutputFile{outFile("out/metrics.json", files["out/metrics.json"]), outFile("out/model.bin", files["out/model.bin"])}))
		oneLineError(t, "total more than --max-size (2048 bytes)", "-d", dir, "job", "fetch", "--max-size", "2KiB", "j1", dest)
		oneLineError(t, `--max-size: invalid size "lots"`, "-d", dir, "job", "fetch", "--max-size", "lots", "j1", dest)
		if _, err := os.Stat(dest); !os.IsNotExist(err) {
			t.Fatalf("refused outputs created %s: %v", dest, err)
		}
	})
	t.Run("fetch", func(t *testing.T) {
		receipts.Store("j1", terms.ManifestHash([]terms.OutputFile{outFile("out/metrics.json", files["out/metrics.json"]), outFile("out/model.bin", files["out/model.bin"])}))
		dest := filepath.Join(t.TempDir(), "res")
		code, out, errOut := gm("job", "fetch", "j1", dest)
		if code != 0 || !strings.Contains(out, "2 file(s) verified") {
			t.Fatalf("code %d, out %q, err %q", code, out, errOut)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "out", "model.bin")); string(b) != files["out/model.bin"] {
			t.Fatal("out/model.bin not extracted")
		}
		oneLineError(t, "already exists", "-d", dir, "job", "fetch", "j1", dest)
		code, out, errOut = gm("job", "fetch", "j1", dest, "--force", "--json")
		var fetched fetchedView
		if err := json.Unmarshal([]byte(out), &fetched); code != 0 || err != nil || fetched.Job != "j1" || fetched.Dir != dest ||
			len(fetched.Files) != 2 || fetched.Files[1].Path != "out/model.bin" || fetched.Files[1].Size != 3000 {
			t.Fatalf("fetch --json: code %d, err %v, out %q, stderr %q", code, err, out, errOut)
		}
		tampered = true
		defer func() { tampered = false }()
		oneLineError(t, `checksum mismatch for "out/model.bin"`, "-d", dir, "job", "fetch", "--force", "j1", dest)
	})
	t.Run("counters", func(t *testing.T) {
		code, out, _ := gm("counters")
		if code != 0 || out != "COUNTER                    COUNT\nprovider.malformed_stream  1\nrenter.bids                4\n" {
			t.Fatalf("code %d, out %q", code, out)
		}
	})
	t.Run("providers", func(t *testing.T) {
		code, out, _ := gm("providers", "--gpu", "H100", "--region", "eu", "--min-vram", "40", "--count", "2")
		if code != 0 || providersQuery != "count=2&gpu=H100&min_vram=40&region=eu" {
			t.Fatalf("code %d, query %q", code, providersQuery)
		}
		if !strings.Contains(out, "2xH100/80GB") || !strings.Contains(out, "1.25") || !strings.HasSuffix(out, "1 provider(s)\n") {
			t.Fatalf("out:\n%s", out)
		}
	})
	t.Run("ledger", func(t *testing.T) {
		code, out, _ := gm("ledger", "verify")
		if code != 0 || out != "ledger ok: 3 entries, head abc123\n" {
			t.Fatalf("verify: code %d, out %q", code, out)
		}
		code, out, _ = gm("ledger", "list", "--kind", "payment_owed", "--counterparty", "P", "--lease", "L", "--limit", "5")
		if code != 0 || ledgerQueryStr != "counterparty=P&kind=payment_owed&lease=L&limit=5" || !strings.Contains(out, "$2.5000") {
			t.Fatalf("list: code %d, query %q, out %q", code, ledgerQueryStr, out)
		}
		code, out, _ = gm("ledger", "export", "--csv", "--kind", "receipt")
		if code != 0 || out != "seq,kind\n1,receipt\n" || exportQuery != "format=csv&kind=receipt" {
			t.Fatalf("export: code %d, query %q, out %q", code, exportQuery, out)
		}
		code, out, _ = gm("ledger", "balances")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 4 ||
			!reflect.DeepEqual(strings.Fields(lines[1]), []string{"12D3KooWa", "$0.0000", "$5.0000", "$0.5000", "$5.5000"}) ||
			!reflect.DeepEqual(strings.Fields(lines[2]), []string{"12D3KooWb", "$2.0000", "$0.0000", "$0.0000", "-$2.0000"}) ||
			!reflect.DeepEqual(strings.Fields(lines[3]), []string{"TOTAL", "$2.0000", "$5.0000", "$0.5000", "$3.5000"}) {
			t.Fatalf("balances: code %d, out:\n%s", code, out)
		}
		tampered = true
		defer func() { tampered = false }()
		oneLineError(t, "chain does not verify at seq 2", "-d", dir, "ledger", "verify")
	})
}

// escLog is a job log with terminal escape sequences and controls (colour,
// window title with BEL, carriage return, DEL, a C1 CSI in UTF-8, a raw
// 0x9b byte, a UTF-8 character) and escShown how job logs prints it.
const (
	escLog   = "a\x1b[31mred\x1b]0;pwned\x07\r\tb\x7f\u009b2J\x9b\u00e9\n"
	escShown = "a^[[31mred^[]0;pwned^G^M\tb^?\\u009b2J\\x9b\u00e9\n"
)

func outFile(name, body string) terms.OutputFile {
	s := sha256.Sum256([]byte(body))
	return terms.OutputFile{Path: name, Size: int64(len(body)), SHA256: hex.EncodeToString(s[:])}
}

// TestStatusShowsMIG: `gpumesh status` says of each detected GPU how it
// stands with MIG and lists the instances of one in MIG mode; it says
// nothing of MIG for a declared GPU.
func TestStatusShowsMIG(t *testing.T) {
	const migA = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		replyJSON(w, 200, api.StatusInfo{PeerID: "self", Provider: true, GPUs: []terms.GPU{
			{Model: "NVIDIA A100-SXM4-80GB", VRAMGB: 80, UUID: "GPU-a", Detected: true,
				MIG: &terms.MIG{Enabled: true, Pending: true, Instances: []terms.MIGInstance{{UUID: migA, Profile: "3g.40gb", MemoryMB: 40192}}}},
			{Model: "NVIDIA L4", VRAMGB: 24, UUID: "GPU-b", Detected: true},
			{Model: "NVIDIA L4", VRAMGB: 24, UUID: "GPU-c", Detected: true, MIG: &terms.MIG{Pending: true}},
			{Model: "RTX 4090", VRAMGB: 24},
		}})
	})
	dir := fakeDaemon(t, mux)
	code, out, errOut := runCLI(t, "-d", dir, "status")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errOut)
	}
	for _, want := range []string{
		"gpu 0:     NVIDIA A100-SXM4-80GB 80GB (detected) GPU-a, MIG: enabled, 1 instance\n",
		"  mig 0.0:  3g.40gb 40192MB " + migA + "\n",
		"gpu 1:     NVIDIA L4 24GB (detected) GPU-b, MIG: absent\n",
		"gpu 2:     NVIDIA L4 24GB (detected) GPU-c, MIG: disabled (enabled after the next GPU reset)\n",
		"gpu 3:     RTX 4090 24GB (declared)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
