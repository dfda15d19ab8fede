package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestUsageScanner: an OpenAI-compatible answer's usage is found in a
// JSON body or in the last server-sent event carrying one, however the
// body is cut into reads; what it cannot hold within its bounds, or
// cannot read (encoded, another type), gives no usage.
func TestUsageScanner(t *testing.T) {
	const final = `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`
	chunk := `{"choices":[{"delta":{"content":"tok"}}],"usage":null}`
	stream := "data: " + chunk + "\n\n" + "data: " + chunk + "\r\n\r\n" + ": keep-alive\n\n" + "data: " + final + "\n\ndata: [DONE]\n\n"
	want := usage{Prompt: 12, Completion: 30, Total: 42}
	cases := []struct {
		name, ctype, encoding, body string
		want                        usage
		ok                          bool
	}{
		{"json", "application/json", "", `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":` + final[len(`{"choices":[],"usage":`):], want, true},
		{"json with charset", "application/json; charset=utf-8", "", final, want, true},
		{"event stream", "text/event-stream", "", stream, want, true},
		{"event stream, last line unterminated", "text/event-stream", "", "data: " + chunk + "\n\ndata: " + final, want, true},
		{"usage in every event: the last counts", "text/event-stream", "", strings.ReplaceAll(stream, `"usage":null`, `"usage":{"prompt_tokens":12,"completion_tokens":1}`), want, true},
		{"over-long event skipped", "text/event-stream", "", "data: " + strings.Repeat("x", maxUsageLine+10) + `"usage":{"prompt_tokens":1}` + "\n" + stream, want, true},
		{"json over the bound", "application/json", "", `{"pad":"` + strings.Repeat("x", maxUsageBody) + `",` + final[1:], usage{}, false},
		{"no usage", "application/json", "", `{"choices":[]}`, usage{}, false},
		{"not json", "text/plain", "", final, usage{}, false},
		{"gzip", "application/json", "gzip", final, usage{}, false},
		{"malformed", "application/json", "", `{"usage":{"prompt_tokens":"many"}}`, usage{}, false},
		{"negative", "application/json", "", `{"usage":{"prompt_tokens":5,"completion_tokens":-3}}`, usage{}, false},
		{"too large", "application/json", "", `{"usage":{"prompt_tokens":1e30}}`, usage{}, false},
		{"implausible", "text/event-stream", "", "data: " + `{"usage":{"prompt_tokens":1,"completion_tokens":9000000000000000000}}` + "\n", usage{}, false},
	}
	for _, tc := range cases {
		for _, step := range []int{1, 7, len(tc.body)} {
			t.Run(fmt.Sprintf("%s/reads of %d", tc.name, step), func(t *testing.T) {
				resp := &http.Response{Header: http.Header{"Content-Type": {tc.ctype}}}
				if tc.encoding != "" {
					resp.Header.Set("Content-Encoding", tc.encoding)
				}
				u := newUsageScanner(resp)
				for i := 0; i < len(tc.body) && u != nil; i += step {
					u.write([]byte(tc.body[i:min(i+step, len(tc.body))]))
				}
				if u != nil && len(u.buf) > maxUsageBody {
					t.Fatalf("the scanner holds %d bytes", len(u.buf))
				}
				got, ok := u.result()
				if got != tc.want || ok != tc.ok {
					t.Fatalf("usage %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
				}
			})
		}
	}
}

// openAI is an OpenAI-compatible chat completion handler: n completion
// tokens ("?n=N"), streamed as server-sent events with the usage in the
// last chunk when the body asks for a stream.
func openAI(w http.ResponseWriter, r *http.Request) {
	var n, prompt int
	fmt.Sscan(r.URL.Query().Get("n"), &n)
	fmt.Sscan(r.URL.Query().Get("prompt"), &prompt)
	u := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, n, prompt+n)
	if r.URL.Query().Get("stream") == "" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"chat.completion","choices":[{"message":{"content":%q}}],"usage":%s}`, strings.Repeat("tok ", n), u)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for range n {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok \"}}],\"usage\":null}\n\n")
		http.NewResponseController(w).Flush()
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", u)
}

// TestGatewayCountsTokensAndCost: the gateway adds up the tokens of the
// answers passing through it, streamed or not, per replica and for the
// service; tokens/s is completion tokens over the last 10 s; costs
// follow the replicas' lease time and price.
func TestGatewayCountsTokensAndCost(t *testing.T) {
	a := localReplica(t, "a", http.HandlerFunc(openAI))
	b := localReplica(t, "b", http.HandlerFunc(openAI))
	start := time.Now().Add(-time.Hour)
	for _, r := range []*replica{a, b} {
		r.leaseID, r.leaseStart, r.leaseEnd, r.gpus, r.price = "lease-"+r.jobID, start, start.Add(2*time.Hour), 2, 1.5
	}
	s := testService(t, a, b)
	var prompt, completion int64
	for i := range 10 {
		path := fmt.Sprintf("/v1/chat/completions?n=%d&prompt=%d", 5+i, 3)
		if i%2 == 0 {
			path += "&stream=1"
		}
		if w := call(s, http.MethodPost, path, `{"messages":[]}`); w.Code != 200 {
			t.Fatalf("%s: %d %q", path, w.Code, w.Body.String())
		}
		prompt, completion = prompt+3, completion+int64(5+i)
	}
	v := s.view()
	tot := v.Totals
	if tot.PromptTokens != prompt || tot.CompletionTokens != completion {
		t.Fatalf("service tokens %d + %d, want %d + %d", tot.PromptTokens, tot.CompletionTokens, prompt, completion)
	}
	if tot.TokensPerSec != float64(completion)/10 {
		t.Fatalf("tokens/s %v, want %v", tot.TokensPerSec, float64(completion)/10)
	}
	var repPrompt int64
	for _, r := range v.Replicas {
		repPrompt += r.PromptTokens
		if r.Requests != 5 || r.GPUSeconds < 2*3600 || r.GPUSeconds > 2*3700 || !near(r.CostUSD, r.GPUSeconds/3600*1.5) {
			t.Fatalf("replica %s: %d requests, %v GPU-s, $%v", r.JobID, r.Requests, r.GPUSeconds, r.CostUSD)
		}
	}
	if repPrompt != prompt {
		t.Fatalf("replicas' prompt tokens add up to %d, want %d", repPrompt, prompt)
	}
	if !near(tot.CostUSD, v.Replicas[0].CostUSD+v.Replicas[1].CostUSD) ||
		!near(tot.USDPer1kRequests, tot.CostUSD/10*1000) || !near(tot.USDPer1MTokens, tot.CostUSD/float64(prompt+completion)*1e6) {
		t.Fatalf("service cost %+v", tot)
	}
	// A replica gone still counts in the service's cost.
	s.mu.Lock()
	s.m.cfg.Leaser = &fakeLeaser{}
	s.retire(a, "test")
	s.mu.Unlock()
	if after := s.view().Totals; after.CostUSD < tot.CostUSD {
		t.Fatalf("the service's cost fell from %v to %v when a replica went", tot.CostUSD, after.CostUSD)
	}
}

func near(a, b float64) bool { return a-b < 1e-9*max(1, b) && b-a < 1e-9*max(1, b) }
