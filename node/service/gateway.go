package service

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"
)

// hopHeaders are per-connection headers a proxy must not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// drain discards and closes a response body, so its connection is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 256<<10))
	_ = resp.Body.Close()
}

// pick chooses a replica by the power of two choices: of two random
// routable replicas, the one with the lower (outstanding+1) × latency
// EWMA. Replicas suspected after a failed request, and skip, are passed
// over while another is routable.
func (s *Service) pick(skip *replica) *replica {
	all := *s.routable.Load()
	cands := make([]*replica, 0, len(all))
	for _, r := range all {
		if r != skip && !r.suspect.Load() {
			cands = append(cands, r)
		}
	}
	switch len(cands) {
	case 0:
		return nil
	case 1:
		return cands[0]
	}
	i := mrand.IntN(len(cands))
	j := mrand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	if score(cands[j]) < score(cands[i]) {
		return cands[j]
	}
	return cands[i]
}

func score(r *replica) float64 {
	lat := r.win.latency()
	if lat == 0 {
		lat = 1e-3 // unmeasured: a new replica is tried as a fast one
	}
	return float64(r.outstanding.Load()+1) * lat
}

// retryable reports whether a request may be sent again to another
// replica after a failure: idempotent methods without a body.
func retryable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
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

// ServeHTTP is the gateway: it routes the request to a replica over
// libp2p and streams the answer back as it comes (chunked bodies and
// server-sent events pass through, flushed per read). A failed idempotent
// request is retried once on another replica.
func (s *Service) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	status, msg, inQuery := s.admit(req)
	if status != 0 {
		http.Error(w, msg, status)
		return
	}
	canRetry := retryable(req)
	var skip *replica
	var lastErr error
	for attempt := 0; ; attempt++ {
		r := s.pick(skip)
		if r == nil {
			msg := "gpumesh gateway: no ready replica"
			if lastErr != nil {
				msg = "gpumesh gateway: " + lastErr.Error()
				http.Error(w, msg, http.StatusBadGateway)
				return
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		r.outstanding.Add(1)
		start := time.Now()
		resp, err := r.transport.RoundTrip(s.outRequest(req, inQuery))
		if err == nil && resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && canRetry && attempt == 0 {
			drain(resp)
			err = fmt.Errorf("%w %s", errReplicaStatus, resp.Status)
			resp = nil
		}
		if err != nil {
			s.record(r, start, err)
			r.outstanding.Add(-1)
			if req.Context().Err() == nil && !errors.Is(err, errReplicaStatus) {
				// A transport failure: keep requests off the replica until a
				// probe passes.
				r.suspect.Store(true)
			}
			lastErr = err
			if canRetry && attempt == 0 && req.Context().Err() == nil {
				s.retries.Add(1)
				skip = r
				continue
			}
			http.Error(w, "gpumesh gateway: "+err.Error(), http.StatusBadGateway)
			return
		}
		ttfb := time.Since(start)
		err = copyResponse(w, resp)
		var rerr error
		if err != nil && !errors.Is(err, errClient) {
			rerr = err
		} else if resp.StatusCode >= 500 {
			rerr = fmt.Errorf("%w: %s", errReplicaStatus, resp.Status)
		}
		s.recordLatency(r, ttfb, rerr)
		r.outstanding.Add(-1)
		return
	}
}

var (
	errReplicaStatus = errors.New("replica answered")
	errClient        = errors.New("client went away")
)

// outRequest is the request as sent to a replica: without the gateway's
// token (in its header, and in the query when it came there).
func (s *Service) outRequest(req *http.Request, tokenInQuery bool) *http.Request {
	out := req.Clone(req.Context())
	out.Header.Del(TokenHeader)
	if tokenInQuery {
		q := out.URL.Query()
		q.Del(TokenParam)
		out.URL.RawQuery = q.Encode()
	}
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = "http", "replica"
	out.Host = req.Host
	if req.ContentLength == 0 {
		out.Body = nil
	}
	removeHopHeaders(out.Header)
	if ip, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		if prior := out.Header.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	return out
}

func (s *Service) record(r *replica, start time.Time, err error) {
	s.recordLatency(r, time.Since(start), err)
}

func (s *Service) recordLatency(r *replica, lat time.Duration, err error) {
	sm := sample{at: time.Now(), lat: lat, err: err != nil}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	r.win.add(sm, msg)
	s.win.add(sm, msg)
}

// copyResponse writes resp to w, flushing after every read so that
// streamed answers reach the client as they are produced. A failure to
// write to the client wraps errClient.
func copyResponse(w http.ResponseWriter, resp *http.Response) error {
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if resp.ContentLength < 0 {
		// A streamed answer: the client sees its headers at once.
		_ = rc.Flush()
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("%w: %v", errClient, werr)
			}
			if err := rc.Flush(); err != nil {
				return fmt.Errorf("%w: %v", errClient, err)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
