package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"time"
)

// pick chooses the replica for a request: in the nearest region (the
// first routing group) with a replica under the target concurrency, else
// the least loaded of all, the one with the fewest requests in flight,
// equals taken in turn, so that load is shared evenly whatever each
// replica's latency. Replicas suspected after a failed request, and those
// tried, are passed over.
func (s *Service) pick(tried []*replica) *replica {
	limit := int64(s.spec.TargetConcurrency)
	var spill *replica
	var spillLoad int64
	for _, g := range *s.routable.Load() {
		r, load := s.leastLoaded(g.reps, tried)
		switch {
		case r == nil:
		case limit <= 0 || load < limit:
			return r
		case spill == nil || load < spillLoad:
			spill, spillLoad = r, load
		}
	}
	return spill
}

// leastLoaded is the replica of reps with the fewest requests in flight
// (equals in turn), passing over suspected and tried ones, and its load.
func (s *Service) leastLoaded(reps, tried []*replica) (*replica, int64) {
	var buf [16]*replica
	least := buf[:0]
	var low int64
	for _, r := range reps {
		if r.suspect.Load() || slices.Contains(tried, r) {
			continue
		}
		switch o := r.outstanding.Load(); {
		case len(least) == 0 || o < low:
			least, low = append(least[:0], r), o
		case o == low:
			least = append(least, r)
		}
	}
	if len(least) == 0 {
		return nil, 0
	}
	return least[(s.turn.Add(1)-1)%uint64(len(least))], low
}

// IdempotencyKey is the header (IETF draft-ietf-httpapi-idempotency-key)
// by which a client marks a request safe to send again: the gateway
// retries such a request on another replica as it does a GET.
const IdempotencyKey = "Idempotency-Key"

// Retry bounds: a request is sent to at most maxTries replicas; a body
// is kept for sending again up to maxRetryBody bytes, and up to
// maxKeptBodies for all the requests of a service in flight (past
// either, it is sent once), so that clients cannot make the gateway hold
// more than that.
const (
	maxTries      = 8
	maxRetryBody  = 1 << 20
	maxKeptBodies = 64 << 20
)

// retryable reports whether a request may be sent again to another
// replica after a failure: idempotent methods without a body, and
// requests with an Idempotency-Key (whose body, if any, the balancer
// keeps to send again).
func retryable(req *http.Request) bool {
	switch {
	case req.Header.Get(IdempotencyKey) != "":
		return true
	case req.Method == http.MethodGet, req.Method == http.MethodHead, req.Method == http.MethodOptions:
		return req.ContentLength == 0
	}
	return false
}

// TokenHeader carries a service's gateway token (TokenParam, in the
// query, is the alternative for clients that cannot set headers).
const (
	TokenHeader = "X-Gpumesh-Token"
	TokenParam  = "token"
)

// newToken is a fresh gateway secret: 32 random bytes, hex.
func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("service: no randomness for a gateway token: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// gatewayHosts are the Host values a gateway listening on addr answers:
// addr itself and localhost on its port.
func gatewayHosts(addr string) []string {
	hosts := []string{addr}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		hosts = append(hosts, net.JoinHostPort("localhost", port))
	}
	return hosts
}

// admit checks a request's Host and token. It returns the HTTP status
// and message of a refusal (0 when admitted), and whether the token came
// in the query (which is then stripped before forwarding).
func (s *Service) admit(req *http.Request) (status int, msg string, inQuery bool) {
	hostOK := false
	for _, h := range s.hosts {
		if strings.EqualFold(req.Host, h) {
			hostOK = true
		}
	}
	if !hostOK {
		// A page on another origin whose name now resolves to loopback
		// (DNS rebinding) sends its own name as Host.
		return http.StatusMisdirectedRequest, fmt.Sprintf("gpumesh gateway: host %q is not this gateway", req.Host), false
	}
	if tok := req.Header.Get(TokenHeader); tok != "" {
		if s.tokenMatches(tok) {
			return 0, "", false
		}
		return http.StatusUnauthorized, "gpumesh gateway: wrong token", false
	}
	if tok := req.URL.Query().Get(TokenParam); tok != "" {
		if s.tokenMatches(tok) {
			return 0, "", true
		}
		return http.StatusUnauthorized, "gpumesh gateway: wrong token", false
	}
	return http.StatusUnauthorized, "gpumesh gateway: token required (" + TokenHeader + " header or ?token=; see gpumesh serve status)", false
}

func (s *Service) tokenMatches(tok string) bool {
	return s.token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1
}

// ServeHTTP is the gateway: an admitted request goes to a replica
// through the service's reverse proxy.
func (s *Service) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	status, msg, inQuery := s.admit(req)
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	if inQuery {
		req = req.WithContext(context.WithValue(req.Context(), credentialKey{}, credential{query: TokenParam}))
	}
	s.proxy.ServeHTTP(w, req)
}

// credentialKey marks, in an admitted request's context, where its
// gateway credential came apart from the TokenHeader (always removed), so
// that the proxy removes it too.
type credentialKey struct{}

type credential struct {
	query  string // the query parameter that carried it
	header string // the header that carried it
}

// newProxy is the service's reverse proxy: httputil.ReverseProxy (hop
// headers, protocol upgrades such as WebSockets, trailers), sending each
// request through the balancer. An answer of unknown length (chunked,
// server-sent events) is flushed to the client as it comes; one of known
// length goes out in full writes (flushing each piece cost every request
// an extra write).
func (s *Service) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:      rewrite,
		Transport:    balancer{s},
		ErrorHandler: proxyError,
		ErrorLog:     slog.NewLogLogger(s.m.log.Handler(), slog.LevelDebug),
	}
}

// rewrite makes the request a replica gets: addressed to the replica
// (whose transport dials it), with the client's Host and X-Forwarded-*
// for it, and without the gateway's credential. The client's own
// X-Forwarded-For is not passed on: the gateway is the edge, and what a
// client claims there is not known.
func rewrite(pr *httputil.ProxyRequest) {
	pr.Out.Header.Del(TokenHeader)
	c, _ := pr.In.Context().Value(credentialKey{}).(credential)
	if c.header != "" {
		pr.Out.Header.Del(c.header)
	}
	if c.query != "" {
		q := pr.Out.URL.Query()
		q.Del(c.query)
		pr.Out.URL.RawQuery = q.Encode()
	}
	if pr.Out.Body != nil {
		pr.Out.Body = &clientBody{ReadCloser: pr.Out.Body}
	}
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "replica"
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
}

// proxyError answers a request no replica answered: 503 when none is
// ready, 413 when its body went over the public endpoint's limit on the
// way, else 502 with the reason.
func proxyError(w http.ResponseWriter, _ *http.Request, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errNoReplica):
		http.Error(w, "gpumesh gateway: "+err.Error(), http.StatusServiceUnavailable)
	case errors.As(err, &tooBig):
		tooLarge(w, tooBig.Limit)
	default:
		http.Error(w, "gpumesh gateway: "+err.Error(), http.StatusBadGateway)
	}
}

var (
	errNoReplica     = errors.New("no ready replica")
	errReplicaStatus = errors.New("replica answered")
)

// balancer is the proxy's transport: it sends a request to the replica
// pick chooses, over that replica's libp2p transport. A failed retryable
// request is sent again to the next replica pick chooses, until one
// answers or none is left (at most maxTries): the transport failed, or
// the replica answered 5xx other than 501 (that, once). So a request in
// flight when its region's replicas fail goes to the next region.
type balancer struct{ s *Service }

func (b balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	s := b.s
	s.requested()
	canRetry := retryable(req)
	body, release, err := s.keepBody(req, canRetry)
	defer release()
	if err != nil {
		return nil, err
	}
	if body == nil && req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
		canRetry = false // a body too long to keep, or not retryable
	}
	var tried []*replica
	var lastErr error
	for attempt := 0; ; attempt++ {
		r := s.pick(tried)
		if r == nil && attempt == 0 {
			r = s.awaitReplica(req.Context()) // a service scaled to zero wakes
		}
		if r == nil {
			if lastErr != nil {
				return nil, lastErr
			}
			return nil, errNoReplica
		}
		out := req
		if body != nil {
			out = req.WithContext(req.Context())
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		r.outstanding.Add(1)
		start := time.Now()
		resp, err := r.transport.RoundTrip(out)
		if err == nil && resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && canRetry && attempt == 0 {
			drain(resp)
			err = fmt.Errorf("%w %s", errReplicaStatus, resp.Status)
		}
		if cerr := clientFailed(req); err != nil && cerr != nil {
			// The client's body failed (cut off, over the limit): not the
			// replica's doing, and not to be sent again.
			s.requested() // idle counts from a request's end
			r.outstanding.Add(-1)
			return nil, cerr
		}
		if err != nil {
			s.record(r, time.Since(start), err, usage{})
			s.requested() // idle counts from a request's end
			r.outstanding.Add(-1)
			if req.Context().Err() == nil && !errors.Is(err, errReplicaStatus) {
				// A transport failure: keep requests off the replica until a
				// probe passes.
				r.suspect.Store(true)
			}
			lastErr = err
			if canRetry && attempt+1 < maxTries && req.Context().Err() == nil {
				s.retries.Add(1)
				tried = append(tried, r)
				continue
			}
			return nil, err
		}
		resp.Body = s.track(r, req, resp, time.Since(start))
		return resp, nil
	}
}

// keepBody reads the body of a retryable request that has one, to send
// it again, and returns it with the function that gives its room back
// (to call once the request is done): nil when there is none, or it is
// over maxRetryBody (then the part read is put back in front of the
// rest, and the request is sent once), or the service's requests in
// flight already keep maxKeptBodies. A failure reading it is the
// client's (clientFailed).
func (s *Service) keepBody(req *http.Request, retry bool) ([]byte, func(), error) {
	none := func() {}
	if !retry || req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 || req.ContentLength > maxRetryBody {
		return nil, none, nil
	}
	room := req.ContentLength
	if room < 0 {
		room = maxRetryBody + 1 // unknown: as much as may be read
	}
	if s.keptBytes.Add(room) > maxKeptBodies {
		s.keptBytes.Add(-room)
		return nil, none, nil
	}
	release := func() { s.keptBytes.Add(-room) }
	b, err := io.ReadAll(io.LimitReader(req.Body, maxRetryBody+1))
	if err != nil {
		return nil, release, err
	}
	if len(b) > maxRetryBody {
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
		return nil, release, nil
	}
	return b, release, nil
}

// clientBody is a request's body on its way to a replica; it keeps the
// error reading it failed with.
type clientBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}
	return n, err
}

// clientFailed is the error reading req's body failed with, if it did.
func clientFailed(req *http.Request) error {
	b, ok := req.Body.(*clientBody)
	if !ok {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// drain discards and closes a response body, so its connection is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10))
	_ = resp.Body.Close()
}

// track wraps a replica's answer so that, once the proxy is done with it
// (the body closed: copied to the client, or the upgraded connection
// ended), the request leaves the replica's outstanding count and is
// recorded: its time to first byte, the tokens the answer says it used,
// and an error if reading the answer failed while the client was still
// there, or the replica answered 5xx.
func (s *Service) track(r *replica, req *http.Request, resp *http.Response, ttfb time.Duration) io.ReadCloser {
	done := func(readErr error, u usage) {
		err := readErr
		if req.Context().Err() != nil {
			err = nil // the client went away: not the replica's failure
		}
		if err == nil && resp.StatusCode >= 500 {
			err = fmt.Errorf("%w: %s", errReplicaStatus, resp.Status)
		}
		s.record(r, ttfb, err, u)
		s.requested() // idle counts from a request's end, before it leaves outstanding
		r.outstanding.Add(-1)
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// The proxy needs the upgraded connection writable; it reads and
		// writes it from two goroutines and closes it while one may still
		// be reading, so nothing of its reads is kept.
		return &trackedConn{ReadWriteCloser: rw, done: done}
	}
	return &tracked{ReadCloser: resp.Body, scan: newUsageScanner(resp), done: done}
}

// tracked is a replica's response body that reports its end once, with
// the usage scanned from it as it passed.
type tracked struct {
	io.ReadCloser
	once    sync.Once
	readErr error
	scan    *usageScanner // nil: the answer carries no usage
	done    func(readErr error, u usage)
}

func (t *tracked) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 && t.scan != nil {
		t.scan.write(p[:n])
	}
	if err != nil && err != io.EOF && t.readErr == nil {
		t.readErr = err
	}
	return n, err
}

func (t *tracked) Close() error {
	err := t.ReadCloser.Close()
	t.once.Do(func() {
		u, _ := t.scan.result()
		t.done(t.readErr, u)
	})
	return err
}

// trackedConn is an upgraded connection's tracked body.
type trackedConn struct {
	io.ReadWriteCloser
	once sync.Once
	done func(readErr error, u usage)
}

func (c *trackedConn) Close() error {
	err := c.ReadWriteCloser.Close()
	c.once.Do(func() { c.done(nil, usage{}) })
	return err
}

func (s *Service) record(r *replica, lat time.Duration, err error, u usage) {
	sm := sample{at: time.Now(), lat: lat, err: err != nil, prompt: u.Prompt, completion: u.Completion}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	r.win.add(sm, msg)
	s.win.add(sm, msg)
}
