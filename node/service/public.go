package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/lease"
	"golang.org/x/time/rate"
)

// A service's public endpoint serves its gateway on a public address to
// end users: over TLS, each request carrying one of the service's API
// tokens (never the owner's gateway token, which stays on loopback),
// naming the endpoint as its Host, within the body size limit and its
// token's rate limit.

// MaxAPITokens bounds a service's API tokens.
const MaxAPITokens = 256

// selfSignedFor is how long a self-signed certificate is valid; one with
// less than selfSignedRenew left is made again when the service starts.
const (
	selfSignedFor   = 2 * 365 * 24 * time.Hour
	selfSignedRenew = 30 * 24 * time.Hour
)

// normalizePublic checks a public endpoint's spec and fills its defaults.
func normalizePublic(p *api.PublicSpec) error {
	host, port, err := net.SplitHostPort(p.Addr)
	if err != nil {
		return badRequest("service: public address %q: want IP:PORT or :PORT", p.Addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return badRequest("service: public address %q: bad port", p.Addr)
	}
	if host != "" && net.ParseIP(host) == nil {
		return badRequest("service: public address %q: the host must be an IP address (or empty: every interface)", p.Addr)
	}
	if (p.TLSCert == "") != (p.TLSKey == "") {
		return badRequest("service: public endpoint: give both a TLS certificate and its key, or neither (a self-signed certificate)")
	}
	hosts := make([]string, 0, len(p.Hosts))
	for _, h := range p.Hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if !hostName.MatchString(h) && net.ParseIP(h) == nil {
			return badRequest("service: public host %q is not a host name", h)
		}
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	p.Hosts = hosts
	if p.MaxBody < 0 {
		return badRequest("service: public max body must not be negative")
	}
	if p.MaxBody == 0 {
		p.MaxBody = api.DefaultMaxBody
	}
	if p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) || p.Burst < 0 {
		return badRequest("service: public rate and burst must be finite and not negative")
	}
	if p.Rate > 0 && p.Burst == 0 {
		p.Burst = int(math.Ceil(p.Rate))
	}
	return nil
}

var (
	hostName  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// public is a service's public endpoint as it runs.
type public struct {
	ln          net.Listener
	srv         *http.Server
	fingerprint string
	notAfter    time.Time
	// selfCert and selfKey are the self-signed certificate and its key
	// (PEM), kept with the service so that a restart serves the same one
	// (its clients trust it by its fingerprint).
	selfCert, selfKey string
}

// apiToken is one of a service's API tokens: only its hash is kept.
type apiToken struct {
	name     string
	hash     [sha256.Size]byte
	created  time.Time
	limiter  *rate.Limiter // nil: no rate limit
	requests atomic.Int64
	limited  atomic.Int64
}

// openPublic starts the public endpoint on addr. With no certificate
// files, the self-signed certificate in selfCert/selfKey (PEM) is used
// while it is valid for long enough, else a new one is made.
func (s *Service) openPublic(addr, selfCert, selfKey string) (*public, error) {
	spec := s.spec.Public
	p := &public{}
	var cert tls.Certificate
	var err error
	switch {
	case spec.TLSCert != "":
		if cert, err = tls.LoadX509KeyPair(spec.TLSCert, spec.TLSKey); err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
	case selfCert != "":
		cert, err = tls.X509KeyPair([]byte(selfCert), []byte(selfKey))
		if err == nil && cert.Leaf.NotAfter.Sub(s.now()) > selfSignedRenew {
			p.selfCert, p.selfKey = selfCert, selfKey
			break
		}
		fallthrough
	default:
		if p.selfCert, p.selfKey, err = selfSigned(spec.Hosts, addr, s.now()); err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
		if cert, err = tls.X509KeyPair([]byte(p.selfCert), []byte(p.selfKey)); err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
	}
	sum := sha256.Sum256(cert.Leaf.Raw)
	p.fingerprint = fingerprint(sum[:])
	p.notAfter = cert.Leaf.NotAfter
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p.ln = ln
	// HTTP/1.1 only: upgrades (WebSockets) pass through as on loopback.
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	p.srv = &http.Server{Handler: http.HandlerFunc(s.servePublic), ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: s.proxy.ErrorLog}
	go func() { _ = p.srv.Serve(tls.NewListener(ln, cfg)) }()
	return p, nil
}

// fingerprint is a certificate digest as openssl prints it: AB:CD:...
func fingerprint(sum []byte) string {
	h := strings.ToUpper(hex.EncodeToString(sum))
	parts := make([]string, 0, len(sum))
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, ":")
}

// selfSigned makes a self-signed certificate (ECDSA P-256) for the
// endpoint's host names and addresses: the listening IP, or, listening on
// every interface, the machine's own addresses and localhost.
func selfSigned(hosts []string, addr string, now time.Time) (certPEM, keyPEM string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"gpumesh service gateway"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(selfSignedFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			addIP(ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		addIP(ip)
	} else {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					addIP(n.IP)
				}
			}
		}
		tmpl.DNSNames = append(tmpl.DNSNames, "localhost")
	}
	if len(tmpl.DNSNames) > 0 {
		tmpl.Subject.CommonName = tmpl.DNSNames[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})), nil
}

// publicHostOK is the public endpoint's Host check: one of the spec's
// host names, or an IP address (a page on a name rebound to this machine
// sends that name).
func publicHostOK(hosts []string, host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	return host != "" && (net.ParseIP(host) != nil || slices.Contains(hosts, host))
}

// servePublic is the public endpoint's handler: Host, API token, rate
// limit and body size are checked, then the request goes through the
// gateway's proxy without its token.
func (s *Service) servePublic(w http.ResponseWriter, req *http.Request) {
	spec := s.spec.Public
	if !publicHostOK(spec.Hosts, req.Host) {
		http.Error(w, fmt.Sprintf("gpumesh gateway: host %q is not this endpoint", req.Host), http.StatusMisdirectedRequest)
		return
	}
	tok := s.apiToken(req)
	if tok == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpumesh"`)
		http.Error(w, "gpumesh gateway: an API token is required (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
		return
	}
	if tok.limiter != nil && !tok.limiter.Allow() {
		tok.limited.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(1/spec.Rate))))
		http.Error(w, "gpumesh gateway: rate limit of this token reached", http.StatusTooManyRequests)
		return
	}
	tok.requests.Add(1)
	if req.ContentLength > spec.MaxBody {
		tooLarge(w, spec.MaxBody)
		return
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = http.MaxBytesReader(w, req.Body, spec.MaxBody)
	}
	s.proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), credentialKey{}, credential{header: "Authorization"})))
}

func tooLarge(w http.ResponseWriter, limit int64) {
	http.Error(w, fmt.Sprintf("gpumesh gateway: request body over %d bytes", limit), http.StatusRequestEntityTooLarge)
}

// apiToken is the API token a request carries as its bearer token, or
// nil. Every token's hash is compared in constant time.
func (s *Service) apiToken(req *http.Request) *apiToken {
	scheme, tok, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found *apiToken
	for _, t := range *s.tokens.Load() {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found = t
		}
	}
	return found
}

// newAPIToken is a token named name with hash sum, rate limited by the
// public endpoint's spec.
func (s *Service) newAPIToken(name string, sum [sha256.Size]byte, created time.Time) *apiToken {
	t := &apiToken{name: name, hash: sum, created: created}
	if p := s.spec.Public; p != nil && p.Rate > 0 {
		t.limiter = rate.NewLimiter(rate.Limit(p.Rate), p.Burst)
	}
	return t
}

// setTokens replaces the service's tokens; s.mu is held.
func (s *Service) setTokens(ts []*apiToken) {
	s.tokens.Store(&ts)
	s.dirty = true
}

func tokenView(t *apiToken) api.APIToken {
	return api.APIToken{Name: t.name, Created: t.created, Requests: t.requests.Load(), Limited: t.limited.Load()}
}

// addToken makes a new API token named name.
func (s *Service) addToken(name string) (api.APIToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.tokensUsable(); err != nil {
		return api.APIToken{}, err
	}
	if s.stopped {
		return api.APIToken{}, badRequest("service %s is stopped", s.spec.ID)
	}
	if !tokenName.MatchString(name) {
		return api.APIToken{}, badRequest("token name %q: want 1-64 letters, digits, '.', '_' or '-'", name)
	}
	ts := *s.tokens.Load()
	if slices.ContainsFunc(ts, func(t *apiToken) bool { return t.name == name }) {
		return api.APIToken{}, badRequest("service %s already has a token named %s", s.spec.ID, name)
	}
	if len(ts) >= MaxAPITokens {
		return api.APIToken{}, badRequest("service %s has %d API tokens, the most it may have", s.spec.ID, len(ts))
	}
	secret := newToken()
	t := s.newAPIToken(name, sha256.Sum256([]byte(secret)), s.now())
	s.setTokens(append(slices.Clone(ts), t))
	s.event("API token %s added", name)
	s.save()
	v := tokenView(t)
	v.Token = secret
	return v, nil
}

// revokeToken removes the API token named name: it is refused from the
// next request on.
func (s *Service) revokeToken(name string) (api.APIToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.tokensUsable(); err != nil {
		return api.APIToken{}, err
	}
	ts := *s.tokens.Load()
	i := slices.IndexFunc(ts, func(t *apiToken) bool { return t.name == name })
	if i < 0 {
		return api.APIToken{}, &lease.RequestError{Missing: true, Msg: fmt.Sprintf("service %s has no token named %q", s.spec.ID, name)}
	}
	t := ts[i]
	s.setTokens(slices.Delete(slices.Clone(ts), i, i+1))
	s.event("API token %s revoked", name)
	s.save()
	return tokenView(t), nil
}

// listTokens is the service's API tokens, without their secrets.
func (s *Service) listTokens() ([]api.APIToken, error) {
	if err := s.tokensUsable(); err != nil {
		return nil, err
	}
	out := []api.APIToken{}
	for _, t := range *s.tokens.Load() {
		out = append(out, tokenView(t))
	}
	return out, nil
}

func (s *Service) tokensUsable() error {
	if s.spec.Public == nil {
		return badRequest("service %s has no public endpoint, the only one API tokens are for (serve post --public ADDR)", s.spec.ID)
	}
	return nil
}
