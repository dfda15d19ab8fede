package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/console"
	"golang.org/x/net/html"
)

const noChromium = "chromium not installed (Debian package chromium; .ci/run installs it): the console's pages are not rendered"

// chromium is headless chromium's path, "" when it is not installed.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	return ""
}

// renderConsole loads a console page in headless chromium, lets its
// script fetch and draw (virtual time: a few seconds, timers included, a
// streaming fetch left open), and returns the DOM it made and its text.
func renderConsole(t *testing.T, bin, u string) (*html.Node, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=4000", "--dump-dom", u)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", u, err, stderr.Bytes())
	}
	doc, err := html.Parse(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if body := one(t, doc, "body", isTag("body")); attr(body, "data-ready") != "1" {
		t.Fatalf("%s: the console's script did not draw the page:\n%s", u, out)
	}
	return doc, string(out)
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func isTag(tag string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == tag }
}

func hasAttr(key, val string) func(*html.Node) bool {
	return func(n *html.Node) bool { return n.Type == html.ElementNode && attr(n, key) == val }
}

func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	if match(n) {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, all(c, match)...)
	}
	return out
}

func one(t *testing.T, n *html.Node, what string, match func(*html.Node) bool) *html.Node {
	t.Helper()
	found := all(n, match)
	if len(found) == 0 {
		var b bytes.Buffer
		_ = html.Render(&b, n)
		t.Fatalf("no %s in the page:\n%s", what, b.String())
	}
	return found[0]
}

func textOf(n *html.Node) string {
	var b strings.Builder
	for _, c := range all(n, func(c *html.Node) bool { return c.Type == html.TextNode }) {
		b.WriteString(c.Data)
	}
	return b.String()
}

// fields is the text of each element under n with a data-field, by field
// (the first of each name).
func fields(n *html.Node) map[string]string {
	out := map[string]string{}
	for _, e := range all(n, func(e *html.Node) bool { return e.Type == html.ElementNode && attr(e, "data-field") != "" }) {
		if k := attr(e, "data-field"); out[k] == "" {
			out[k] = textOf(e)
		}
	}
	return out
}

func sameFields(t *testing.T, where string, shown, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if shown[k] != w {
			t.Errorf("%s: %s shows %q, the API says %q", where, k, shown[k], w)
		}
	}
}

func usd(v float64) string { return fmt.Sprintf("%.4f", v) }

// consoleGet is a GET on a metrics listener, with token when not "".
func consoleGet(t *testing.T, method, addr, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// sameView fails unless the console's answer at path is the control
// API's, once both are decoded and drop (JSON object keys, at any depth)
// are left out.
func sameView(t *testing.T, c *api.Client, addr, token, path string, drop ...string) {
	t.Helper()
	code, _, b := consoleGet(t, http.MethodGet, addr, path, token)
	if code != http.StatusOK {
		t.Fatalf("console %s: %d %s", path, code, b)
	}
	var fromConsole, fromSocket any
	if err := json.Unmarshal(b, &fromConsole); err != nil {
		t.Fatalf("console %s: %v", path, err)
	}
	if err := c.Do(context.Background(), http.MethodGet, strings.TrimPrefix(path, api.APIVersion), nil, nil, &fromSocket); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(without(fromConsole, drop))
	s, _ := json.Marshal(without(fromSocket, drop))
	if !bytes.Equal(a, s) {
		t.Errorf("console %s differs from the control API's:\n%s\n%s", path, a, s)
	}
}

func without(v any, drop []string) any {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range drop {
			delete(x, k)
		}
		for k := range x {
			x[k] = without(x[k], drop)
		}
	case []any:
		for i := range x {
			x[i] = without(x[i], drop)
		}
	}
	return v
}

// TestConsole: a renter, whose metrics listener has a token, and a
// provider, whose listener has none, run a job and a service. The
// console's views are the control API's and refuse a request without the
// token; the listener acts on nothing; a service's gateway token never
// leaves the owner's socket, nor do job logs where the listener has no
// token. In headless chromium the pages show what `provider stats`, `job
// status`, `bids`, `providers` and `serve status` say (--json), a running
// job's log streams in as it is written, and a hostile log line stays
// text.
func TestConsole(t *testing.T) {
	const token = "console-secret-0123456789"
	root := t.TempDir()
	tokenFile := filepath.Join(root, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	provCfg := fastConfig(providerConfig("eu-west", 1.0, a100, a100))
	provCfg.MetricsAddr = freeLoopback(t)
	renterCfg := renterConfig()
	renterCfg.MetricsAddr = freeLoopback(t)
	renterCfg.MetricsTokenFile = tokenFile
	renter := startNode(t, root+"/renter", renterCfg, nil)
	defer renter.Close()
	prov := startNode(t, root+"/prov", provCfg, renter.Daemon)
	defer prov.Close()
	waitAdvertised(t, renter, prov)
	rc, pc := api.NewClient(renter.dir), api.NewClient(prov.dir)
	rAddr, pAddr := renterCfg.MetricsAddr, provCfg.MetricsAddr
	page := func(addr, path string) string {
		u := "http://" + addr + path
		if addr == rAddr {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			u += sep + "token=" + url.QueryEscape(token)
		}
		return u
	}
	br := chromium()
	ctx := context.Background()

	// The job writes a line meant to run script in the console, and waits
	// for the test before it ends.
	const hostile = `<img src=x onerror="document.body.dataset.pwned=1">`
	v := post(t, renter, shJob(terms.Silver, 2, `echo first line; echo '`+hostile+`'; until [ -e go ]; do sleep 0.1; done; echo second line`))
	if !leased(v) {
		t.Fatalf("not leased: %v", v.Reasons)
	}
	id := v.Job.ID
	readLog := func() string {
		r, err := rc.Logs(ctx, id, api.LogsOptions{})
		if err != nil {
			return ""
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		return string(b)
	}
	// The log followed as it grows, until its first lines are in.
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	follow, err := rc.Logs(fctx, id, api.LogsOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for buf := make([]byte, 4096); !strings.Contains(string(first), hostile); {
		n, err := follow.Read(buf)
		first = append(first, buf[:n]...)
		if err != nil {
			t.Fatalf("the job's log never showed its first lines: %q (%v)", first, err)
		}
	}
	follow.Close()
	fcancel()

	t.Run("a running job's log streams in", func(t *testing.T) {
		if br == "" {
			t.Skip(noChromium)
		}
		doc, out := renderConsole(t, br, page(rAddr, "/job.html?id="+id))
		body := one(t, doc, "body", isTag("body"))
		logText := textOf(one(t, doc, "log", hasAttr("id", "log")))
		if attr(body, "data-log") != "streaming" || !strings.HasPrefix(logText, "first line\n"+hostile+"\n") || strings.Contains(logText, "second line") {
			t.Errorf("log %s: %q", attr(body, "data-log"), logText)
		}
		if f := fields(one(t, doc, "status", hasAttr("id", "job"))); f["run"] != string(terms.RunRunning) {
			t.Errorf("run %q while it runs", f["run"])
		}
		if attr(body, "data-pwned") != "" || len(all(doc, isTag("img"))) > 0 {
			t.Errorf("the log's markup ran in the console:\n%s", out)
		}
	})

	if r, err := execJob(t, rc, id, "", "touch", "go"); err != nil || r.code != 0 {
		t.Fatalf("exec touch go: %+v %v", r, err)
	}
	v = waitJob(t, renter, id, 30*time.Second, "settled", func(v api.JobView) bool { return v.Receipt != nil })
	if v.Run != terms.RunSucceeded {
		t.Fatalf("run %s: %s", v.Run, v.Detail)
	}
	// Settled, and the renter's gossip of the receipt heard: the
	// provider's view of itself changes no more.
	waitChange(t, 15*time.Second, "the provider settled and heard the receipt", func() bool {
		st, err := pc.ProviderStats(ctx)
		return err == nil && st.LedgerEarnedUSD > 0 && st.Reputation.Receipts == 1
	}, prov.market.receipts.Changed)

	t.Run("views are the control API's", func(t *testing.T) {
		for _, p := range []string{"/v1/jobs", "/v1/jobs/" + id, "/v1/jobs/" + id + "/bids", "/v1/peers", "/v1/services"} {
			sameView(t, rc, rAddr, token, p)
		}
		sameView(t, rc, rAddr, token, "/v1/status", "uptime")
		// A reputation's weight decays with time.
		sameView(t, pc, pAddr, "", "/v1/provider/stats", "weight")
		// The last sample of a history is taken at the call.
		sameView(t, pc, pAddr, "", "/v1/provider/history", "time")
		code, _, b := consoleGet(t, http.MethodGet, rAddr, "/v1/jobs/"+id+"/logs", token)
		if code != http.StatusOK || string(b) != readLog() || !strings.HasSuffix(string(b), "second line\n") {
			t.Errorf("console log: %d %q", code, b)
		}
	})

	t.Run("a token is required and nothing acts", func(t *testing.T) {
		for _, p := range []string{"/metrics", "/v1/status", "/v1/jobs", "/v1/jobs/" + id, "/v1/jobs/" + id + "/bids",
			"/v1/jobs/" + id + "/logs", "/v1/providers", "/v1/services", "/v1/provider/stats"} {
			for _, tok := range []string{"", "console-secret-0123456780"} {
				code, _, b := consoleGet(t, http.MethodGet, rAddr, p, tok)
				if code != http.StatusUnauthorized || bytes.Contains(b, []byte(id)) || bytes.Contains(b, []byte("first line")) {
					t.Errorf("GET %s with token %q: %d %.100q", p, tok, code, b)
				}
			}
		}
		for _, p := range []string{"/v1/jobs/" + id + "/cancel", "/v1/jobs", "/v1/services", "/v1/jobs/" + id + "/exec", "/v1/provider/drain"} {
			if code, _, b := consoleGet(t, http.MethodPost, rAddr, p, token); code != http.StatusMethodNotAllowed {
				t.Errorf("POST %s on the console: %d %.100q", p, code, b)
			}
		}
		if js, _ := rc.Jobs(ctx); len(js) != 1 || js[0].Run != terms.RunSucceeded {
			t.Errorf("jobs after the POSTs: %+v", js)
		}
		// Without a token any local user reads the listener: no logs there.
		code, _, b := consoleGet(t, http.MethodGet, pAddr, "/v1/jobs/"+id+"/logs", "")
		if code != http.StatusForbidden || !strings.Contains(string(b), "metrics_token_file") {
			t.Errorf("logs on a listener without a token: %d %q", code, b)
		}
		// The pages hold no data: they are served without the token (and
		// send it with their calls).
		code, hdr, b := consoleGet(t, http.MethodGet, rAddr, "/job.html", "")
		if code != http.StatusOK || hdr.Get("Content-Security-Policy") != console.CSP || !bytes.Contains(b, []byte(`src="console.js"`)) {
			t.Errorf("job page: %d CSP %q", code, hdr.Get("Content-Security-Policy"))
		}
	})

	t.Run("pages show the API's figures", func(t *testing.T) {
		if br == "" {
			t.Skip(noChromium)
		}
		// Provider: provider stats --json, and its history ends with them.
		// The history's samples are whole minutes of the clock plus one
		// of now: a minute that turns while the page renders adds one,
		// so the page's count lies between the API's before and after.
		history := func() int {
			var h api.ProviderHistoryView
			if err := pc.Do(ctx, "GET", "/provider/history", nil, nil, &h); err != nil {
				t.Fatal(err)
			}
			return len(h.Samples)
		}
		samplesBefore := history()
		doc, _ := renderConsole(t, br, page(pAddr, "/provider.html"))
		samplesAfter := history()
		st, err := pc.ProviderStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sameFields(t, "provider page", fields(one(t, doc, "stats", hasAttr("id", "provider"))), map[string]string{
			"gpus": fmt.Sprint(st.GPUs), "calls": fmt.Sprint(st.Calls), "bids": fmt.Sprint(st.Bids), "won": fmt.Sprint(st.Won),
			"lost": fmt.Sprint(st.Lost), "earnings_usd": usd(st.EarningsUSD), "ledger_earned_usd": usd(st.LedgerEarnedUSD),
			"occupancy": fmt.Sprintf("%.1f", 100*st.Occupancy), "running": fmt.Sprint(len(st.Running)),
			"reputation.score": fmt.Sprintf("%.3f", st.Reputation.Score), "usd_per_gpu_hour": usd(st.USDPerGPUHour),
		})
		earn := one(t, doc, "earnings chart", hasAttr("id", "earnings"))
		sameFields(t, "earnings chart", fields(earn), map[string]string{
			"history.ledger_earned_usd": usd(st.LedgerEarnedUSD), "history.earnings_usd": usd(st.EarningsUSD)})
		// A sample taken when the provider started (and one at each turn of
		// a minute since), and one of now: what the API held as the page
		// rendered, two lines (settled, booked).
		if svg := one(t, earn, "svg", isTag("svg")); len(all(svg, isTag("polyline"))) != 2 {
			t.Errorf("earnings chart: %d lines, want 2", len(all(svg, isTag("polyline"))))
		} else if n, err := strconv.Atoi(attr(svg, "data-samples")); err != nil || n < max(2, samplesBefore) || n > samplesAfter {
			t.Errorf("earnings chart: %s samples, want between the API's %d before the page and %d after (at least 2)", attr(svg, "data-samples"), samplesBefore, samplesAfter)
		}
		sameFields(t, "occupancy chart", fields(one(t, doc, "occupancy chart", hasAttr("id", "occupancy"))),
			map[string]string{"history.occupancy": fmt.Sprintf("%.1f", 100*st.Occupancy)})
		if st.Won != 1 || len(all(doc, hasAttr("data-lease", st.Recent[0].Lease.ID))) != 1 {
			t.Errorf("provider page lacks the finished lease (won %d)", st.Won)
		}

		// The renter's overview: gpumesh status.
		doc, _ = renderConsole(t, br, page(rAddr, "/"))
		s := renter.Status()
		f := fields(doc)
		sameFields(t, "overview", f, map[string]string{"peer_id": s.PeerID, "version": s.Version, "provider": "no",
			"peers": fmt.Sprint(s.Peers)})
		if len(all(doc, hasAttr("data-peer", prov.ID().String()))) == 0 {
			t.Errorf("overview does not list the provider among its peers")
		}

		// Providers: providers --json (free GPUs, price now, reliability).
		doc, _ = renderConsole(t, br, page(rAddr, "/providers.html"))
		ps, err := rc.Providers(ctx, terms.Query{})
		if err != nil || len(ps) != 1 {
			t.Fatalf("providers: %v %v", ps, err)
		}
		free := "-"
		if ps[0].FreeGPUs != nil {
			free = fmt.Sprint(*ps[0].FreeGPUs)
		}
		sameFields(t, "providers page", fields(one(t, doc, "provider row", hasAttr("data-provider", ps[0].Peer))), map[string]string{
			"region": ps[0].Region, "free_gpus": free, "price_now": usd(ps[0].PriceNow), "reliability": fmt.Sprintf("%.3f", ps[0].Reliability),
			"gpus": "2× A100"})

		// Jobs and the job: job status --json and bids --json.
		doc, _ = renderConsole(t, br, page(rAddr, "/jobs.html"))
		js, err := rc.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameFields(t, "jobs page", fields(one(t, doc, "job row", hasAttr("data-job", id))), map[string]string{
			"state": string(js.State), "run": string(js.Run), "cost_usd": usd(js.CostUSD), "lease.price": usd(js.Lease.Price)})
		doc, _ = renderConsole(t, br, page(rAddr, "/job.html?id="+id))
		bids, err := rc.Bids(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameFields(t, "job page", fields(one(t, doc, "status", hasAttr("id", "job"))), map[string]string{
			"state": string(js.State), "run": string(js.Run), "exit_code": fmt.Sprint(*js.ExitCode), "cost_usd": usd(js.CostUSD),
			"lease.provider": js.Lease.Provider, "lease.price": usd(js.Lease.Price), "evidence": js.Evidence})
		e := bids.Explain
		sameFields(t, "why the winner won", fields(one(t, doc, "explanation", hasAttr("id", "explanation"))), map[string]string{
			"explain.winner": e.Winner, "explain.rank": fmt.Sprint(e.Rank), "explain.rule": e.Rule, "explain.score": fmt.Sprintf("%.4f", e.Score)})
		if e.Winner != prov.ID().String() || e.Rule != terms.RuleOnlyEligible {
			t.Errorf("explanation %+v", e)
		}
		bidRows := all(one(t, doc, "bids", hasAttr("id", "bids")), hasAttr("data-bid", prov.ID().String()))
		if len(bids.Bids) != 1 || len(bidRows) != 1 || attr(bidRows[0], "data-won") != "1" {
			t.Fatalf("bids %+v, rows %d", bids.Bids, len(bidRows))
		}
		sameFields(t, "bid", fields(bidRows[0]), map[string]string{"rank": "1 (lease)", "price": usd(bids.Bids[0].Bid.Price),
			"reliability": fmt.Sprintf("%.3f", bids.Bids[0].Reliability), "score": fmt.Sprintf("%.4f", bids.Bids[0].Score), "rejected": "-"})
		attempts := all(one(t, doc, "attempts", hasAttr("id", "attempts")), func(n *html.Node) bool { return attr(n, "data-attempt") != "" })
		if len(attempts) != 1 || fields(attempts[0])["run"] != string(js.Run) || fields(attempts[0])["cost_usd"] != usd(js.Receipt.Amount) {
			t.Errorf("attempts: %d rows", len(attempts))
		}
		body := one(t, doc, "body", isTag("body"))
		if l := textOf(one(t, doc, "log", hasAttr("id", "log"))); attr(body, "data-log") != "ended" || l != readLog() {
			t.Errorf("finished job's log (%s): %q, want %q", attr(body, "data-log"), l, readLog())
		}
	})

	// A service: serve status --json, and its latency over time.
	bin := buildServer(t)
	spec := serviceSpec(bin, 1, 1)
	sv, err := rc.PostService(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitService(t, rc, renter.Daemon, sv.ID, 30*time.Second, "a ready replica", func(v api.ServiceView) bool { return v.Ready == 1 })
	client := gatewayClient(sv, 1)
	for i := range 20 {
		resp, err := client.Get(fmt.Sprintf("http://%s/work?ms=%d", sv.Gateway, 2+i%5))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	t.Run("service views keep the gateway's token", func(t *testing.T) {
		for _, p := range []string{"/v1/services", "/v1/services/" + sv.ID} {
			code, _, b := consoleGet(t, http.MethodGet, rAddr, p, token)
			if code != http.StatusOK || !bytes.Contains(b, []byte(sv.ID)) || bytes.Contains(b, []byte(sv.Token)) {
				t.Errorf("console %s: %d, gateway token shown: %v", p, code, bytes.Contains(b, []byte(sv.Token)))
			}
			// Otherwise the same view (the figures of the last 10 s move,
			// and so do a running replica's GPU-seconds and cost).
			sameView(t, rc, rAddr, token, p, "token", "rate_per_sec", "time",
				"gpu_seconds", "cost_usd", "usd_per_1k_requests", "tokens_per_sec", "usd_per_1m_tokens")
		}
		sameView(t, rc, rAddr, token, "/v1/services/"+sv.ID+"/history", "time", "rate_per_sec")
	})

	t.Run("service page shows serve status", func(t *testing.T) {
		if br == "" {
			t.Skip(noChromium)
		}
		doc, _ := renderConsole(t, br, page(rAddr, "/service.html?id="+sv.ID))
		st, err := rc.Service(ctx, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		tot := st.Totals
		ms := func(v float64) string { return fmt.Sprintf("%.1f", v) }
		if tot.Requests < 20 {
			t.Fatalf("service totals %+v", tot)
		}
		sameFields(t, "service page", fields(one(t, doc, "status", hasAttr("id", "service"))), map[string]string{
			"desired": fmt.Sprint(st.Desired), "ready": fmt.Sprint(st.Ready), "totals.requests": fmt.Sprint(tot.Requests),
			"totals.errors": fmt.Sprint(tot.Errors), "totals.p50_ms": ms(tot.P50MS), "totals.p95_ms": ms(tot.P95MS), "gateway": st.Gateway})
		chart := one(t, doc, "latency chart", hasAttr("id", "latency"))
		sameFields(t, "latency chart", fields(chart), map[string]string{"history.p50_ms": ms(tot.P50MS), "history.p95_ms": ms(tot.P95MS)})
		h, err := rc.ServiceHistory(ctx, sv.ID)
		if err != nil {
			t.Fatal(err)
		}
		if svg := one(t, chart, "svg", isTag("svg")); attr(svg, "data-samples") != fmt.Sprint(len(h.Samples)) || len(all(svg, isTag("polyline"))) != 2 {
			t.Errorf("latency chart: %s samples (history has %d)", attr(svg, "data-samples"), len(h.Samples))
		}
		reps := all(doc, func(n *html.Node) bool { return attr(n, "data-replica") != "" })
		if len(reps) != 1 || attr(reps[0], "data-replica") != st.Replicas[0].JobID || fields(reps[0])["state"] != st.Replicas[0].State {
			t.Errorf("replicas shown %d, serve status %+v", len(reps), st.Replicas)
		}
		doc, _ = renderConsole(t, br, page(rAddr, "/services.html"))
		sameFields(t, "services page", fields(one(t, doc, "service row", hasAttr("data-service", sv.ID))), map[string]string{
			"desired": fmt.Sprint(st.Desired), "ready": fmt.Sprint(st.Ready), "replicas": "1", "totals.requests": fmt.Sprint(tot.Requests),
			"totals.p95_ms": ms(tot.P95MS)})
	})
}

// TestConsoleOnlyOnLoopback: the console comes with the loopback metrics
// listener; a node told to serve it on another address does not start,
// and nothing answers there.
func TestConsoleOnlyOnLoopback(t *testing.T) {
	cfg := renterConfig()
	cfg.MetricsAddr = freeLoopback(t)
	n := startNode(t, t.TempDir(), cfg, nil)
	code, _, b := consoleGet(t, http.MethodGet, cfg.MetricsAddr, "/v1/status", "")
	var st api.StatusInfo
	if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil || st.PeerID != n.ID().String() {
		t.Fatalf("console on %s: %d %q", cfg.MetricsAddr, code, b)
	}
	n.Close()
	_, port, _ := net.SplitHostPort(cfg.MetricsAddr)
	for _, addr := range []string{"0.0.0.0:" + port, "[::]:" + port, ":" + port} {
		cfg := renterConfig()
		cfg.MetricsAddr = addr
		d, err := Start(context.Background(), Options{DataDir: t.TempDir(), Config: cfg, Log: testLogger(t)})
		if err == nil {
			d.Close()
			t.Errorf("metrics_addr %s: the node started", addr)
		} else if !strings.Contains(err.Error(), "metrics_addr") || strings.Contains(err.Error(), "\n") {
			t.Errorf("metrics_addr %s: %q", addr, err)
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			t.Errorf("metrics_addr %s: something listens on port %s", addr, port)
		}
	}
}
