package service

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// windowSize is how many recent requests a window keeps.
const windowSize = 2048

// sample is one finished request, with the tokens its answer said it
// used (OpenAI-compatible servers).
type sample struct {
	at                 time.Time
	lat                time.Duration
	err                bool
	prompt, completion int64
}

// window keeps a replica's (or a service's) totals and its recent requests
// for rates and percentiles.
type window struct {
	mu       sync.Mutex
	buf      [windowSize]sample
	n, next  int
	requests int64
	errors   int64
	lastErr  string
	// prompt and completion are the tokens of every answer that said.
	prompt, completion int64
}

func (w *window) add(s sample, errMsg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf[w.next] = s
	w.next = (w.next + 1) % windowSize
	w.n = min(w.n+1, windowSize)
	w.requests++
	w.prompt += s.prompt
	w.completion += s.completion
	if s.err {
		w.errors++
		w.lastErr = errMsg
	}
}

// rateSpan is the span of a status view's request rate.
const rateSpan = 10 * time.Second

// recent returns the samples of the last span before now.
func (w *window) recent(now time.Time, span time.Duration) []sample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recentLocked(now, span)
}

func (w *window) recentLocked(now time.Time, span time.Duration) []sample {
	out := make([]sample, 0, w.n)
	for i := 0; i < w.n; i++ {
		s := w.buf[(w.next-1-i+windowSize)%windowSize]
		if now.Sub(s.at) > span {
			break
		}
		out = append(out, s)
	}
	return out
}

// summary is the figures of a set of samples.
type summary struct {
	count, errs   int
	p50, p95, p99 time.Duration
}

func summarize(ss []sample) summary {
	var sum summary
	lats := make([]time.Duration, 0, len(ss))
	for _, s := range ss {
		sum.count++
		if s.err {
			sum.errs++
			continue
		}
		lats = append(lats, s.lat)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		sum.p50, sum.p95, sum.p99 = percentile(lats, 0.50), percentile(lats, 0.95), percentile(lats, 0.99)
	}
	return sum
}

// percentile is the nearest-rank percentile of sorted lats.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// statsSpan is the span of the figures in a status view.
const statsSpan = time.Minute

// view returns the window's figures for a status view.
func (w *window) view(now time.Time, outstanding int) api.ReplicaStats {
	sum := summarize(w.recent(now, statsSpan))
	w.mu.Lock()
	defer w.mu.Unlock()
	st := api.ReplicaStats{Outstanding: outstanding, Requests: w.requests, Errors: w.errors, LastError: w.lastErr,
		P50MS: ms(sum.p50), P95MS: ms(sum.p95), P99MS: ms(sum.p99)}
	if sum.count > 0 {
		st.ErrorRate = float64(sum.errs) / float64(sum.count)
	}
	recent := w.recentLocked(now, rateSpan)
	st.RatePerSec = float64(len(recent)) / rateSpan.Seconds()
	st.PromptTokens, st.CompletionTokens = w.prompt, w.completion
	var generated int64
	for _, s := range recent {
		generated += s.completion
	}
	st.TokensPerSec = float64(generated) / rateSpan.Seconds()
	return st
}

// setCost fills st's cost figures from the GPU time its requests had
// and what that cost.
func setCost(st *api.ReplicaStats, gpuSeconds, usd float64) {
	st.GPUSeconds, st.CostUSD = gpuSeconds, usd
	st.USDPer1kRequests, st.USDPer1MTokens = 0, 0
	if st.Requests > 0 {
		st.USDPer1kRequests = usd / float64(st.Requests) * 1e3
	}
	if tokens := st.PromptTokens + st.CompletionTokens; tokens > 0 {
		st.USDPer1MTokens = usd / float64(tokens) * 1e6
	}
}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

// sample is the window's figures over statsSpan before now: what a
// status view shows of them at now, as a point of the service's history.
func (w *window) sample(now time.Time) api.LatencySample {
	sum := summarize(w.recent(now, statsSpan))
	return api.LatencySample{Time: now, Requests: sum.count, Errors: sum.errs, P50MS: ms(sum.p50), P95MS: ms(sum.p95)}
}
