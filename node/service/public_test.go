package service

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// publicClient is an HTTPS client that trusts only certPEM (the
// endpoint's self-signed certificate, as the daemon shows it) and
// records the certificate it was served.
func publicClient(t testing.TB, certPEM string, served *[]byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(certPEM)) {
		t.Fatalf("the daemon's certificate %q is not PEM", certPEM)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			*served = cs.PeerCertificates[0].Raw
			return nil
		}}}}
}

// TestPublicEndpoint: a service's public endpoint serves over TLS (the
// client trusts the self-signed certificate the daemon shows, whose
// fingerprint is the one served) to end users with an API token only:
// none, a wrong one, a revoked one or the owner's gateway token get 401,
// another Host 421; each token is rate limited on its own (429 after its
// burst), a body over the limit gets 413 (announced or not); the token is
// not forwarded. After a restart the same endpoint, certificate and
// tokens are served.
func TestPublicEndpoint(t *testing.T) {
	var mu sync.Mutex
	var seenAuth []string
	open, prov := p2pProvider(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seenAuth = append(seenAuth, r.Header.Get("Authorization")+r.Header.Get(TokenHeader))
		mu.Unlock()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Write(append([]byte("echo "), b...))
	}))
	f := &lossLeaser{lost: map[string]bool{}, provider: prov.String()}
	store := &memStore{m: map[string][]byte{}}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: open, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Public = &api.PublicSpec{Addr: "127.0.0.1:0", Hosts: []string{"API.example."}, MaxBody: 1000, Rate: 0.001, Burst: 3}
	v, err := m.Post(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a ready replica", func() bool { v, _ := m.View(v.ID); return v.Ready == 1 })
	v, _ = m.View(v.ID)
	pub := v.Public
	if pub == nil || pub.CertPEM == "" || !strings.HasPrefix(pub.URL, "https://127.0.0.1:") || len(pub.Fingerprint) != 95 {
		t.Fatalf("public view %+v", pub)
	}
	if _, err := m.AddToken(v.ID, "bad name!"); err == nil {
		t.Fatal("a token name with a space and ! was accepted")
	}
	toks := map[string]string{}
	for _, name := range []string{"alice", "bob", "carol"} {
		tok, err := m.AddToken(v.ID, name)
		if err != nil || len(tok.Token) < 32 {
			t.Fatalf("add token %s: %+v %v", name, tok, err)
		}
		toks[name] = tok.Token
	}
	if _, err := m.AddToken(v.ID, "bob"); err == nil {
		t.Fatal("a second token named bob was made")
	}

	var served []byte
	client := publicClient(t, pub.CertPEM, &served)
	do := func(host, token, body string, chunked bool) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // no length known: sent chunked
			}
		}
		req, err := http.NewRequest(http.MethodPost, pub.URL+"/x", rd)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request over TLS: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, host, token string
		code              int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"wrong token", "", strings.Repeat("0", len(toks["alice"])), http.StatusUnauthorized},
		{"owner's gateway token", "", v.Token, http.StatusUnauthorized},
		{"rebound name", "evil.example", toks["alice"], http.StatusMisdirectedRequest},
	} {
		if code, body := do(tc.host, tc.token, "", false); code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.code)
		}
	}
	if sum := sha256.Sum256(served); fingerprint(sum[:]) != pub.Fingerprint {
		t.Fatalf("served certificate's fingerprint %s, the daemon says %s", fingerprint(sum[:]), pub.Fingerprint)
	}
	if len(seenAuth) != 0 {
		t.Fatalf("refused requests reached the replica: %q", seenAuth)
	}
	for _, host := range []string{"", "api.example", "API.EXAMPLE:443"} {
		if code, body := do(host, toks["alice"], "hi", false); code != 200 || body != "echo hi" {
			t.Fatalf("alice on host %q: %d %q", host, code, body)
		}
	}
	// alice's burst is spent: 429, while bob's is his own.
	if code, _ := do("", toks["alice"], "", false); code != http.StatusTooManyRequests {
		t.Fatalf("alice after her burst: %d, want 429", code)
	}
	if code, body := do("", toks["bob"], "", false); code != 200 {
		t.Fatalf("bob: %d %q", code, body)
	}
	// Bodies over 1000 bytes: refused at once when announced, cut off when
	// streamed.
	big := strings.Repeat("x", 1001)
	if code, body := do("", toks["carol"], big, false); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("announced 1001-byte body: %d %q", code, body)
	}
	if code, body := do("", toks["carol"], big, true); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("streamed 1001-byte body: %d %q", code, body)
	}
	if code, body := do("", toks["carol"], big[:1000], true); code != 200 || body != "echo "+big[:1000] {
		t.Fatalf("1000-byte body: %d %.20q", code, body)
	}
	if _, err := m.RevokeToken(v.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if code, _ := do("", toks["bob"], "", false); code != http.StatusUnauthorized {
		t.Fatalf("bob's revoked token: %d, want 401", code)
	}
	mu.Lock()
	for _, a := range seenAuth {
		if a != "" {
			t.Fatalf("the replica saw the credential %q", a)
		}
	}
	mu.Unlock()
	list, err := m.Tokens(v.ID)
	if err != nil || len(list) != 2 || list[0].Name != "alice" || list[0].Requests != 3 || list[0].Limited != 1 || list[0].Token != "" {
		t.Fatalf("tokens %+v %v", list, err)
	}

	// A restarted daemon serves the same endpoint and certificate, and
	// the tokens (with fresh rate limits).
	m.Close()
	m2, err := NewManager(context.Background(), Config{Log: testLog, Leaser: f, Open: open, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Restore(); err != nil {
		t.Fatal(err)
	}
	defer m2.Stop(v.ID)
	waitFor(t, "the replica adopted", func() bool { v, _ := m2.View(v.ID); return v.Ready == 1 })
	v2, _ := m2.View(v.ID)
	if v2.Public == nil || v2.Public.URL != pub.URL || v2.Public.Fingerprint != pub.Fingerprint || v2.Public.Tokens != 2 {
		t.Fatalf("public endpoint after a restart: %+v, was %+v", v2.Public, pub)
	}
	client.CloseIdleConnections()
	if code, body := do("", toks["alice"], "again", false); code != 200 || body != "echo again" {
		t.Fatalf("alice after a restart: %d %q", code, body)
	}
	if code, _ := do("", toks["bob"], "", false); code != http.StatusUnauthorized {
		t.Fatalf("bob's revoked token after a restart: %d, want 401", code)
	}
}

// TestPublicEndpointServesTheOwnersCertificate: with certificate files,
// the endpoint serves that certificate and shows none of its own.
func TestPublicEndpointServesTheOwnersCertificate(t *testing.T) {
	certPEM, keyPEM, err := selfSigned([]string{"svc.example"}, "127.0.0.1:0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if os.WriteFile(certFile, []byte(certPEM), 0o600) != nil || os.WriteFile(keyFile, []byte(keyPEM), 0o600) != nil {
		t.Fatal("write certificate files")
	}
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: &fakeLeaser{}, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec()
	spec.Public = &api.PublicSpec{Addr: "127.0.0.1:0", Hosts: []string{"svc.example"}, TLSCert: certFile, TLSKey: filepath.Join(dir, "missing.pem")}
	if _, err := m.Post(spec); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("post with a missing key file: %v", err)
	}
	spec.Public.TLSKey = keyFile
	v, err := m.Post(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	if v.Public.CertPEM != "" {
		t.Fatal("the owner's certificate is shown as a self-signed one")
	}
	var served []byte
	client := publicClient(t, certPEM, &served)
	req, _ := http.NewRequest(http.MethodGet, v.Public.URL+"/", nil)
	req.Host = "svc.example"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s", resp.Status)
	}
	if sum := sha256.Sum256(served); fingerprint(sum[:]) != v.Public.Fingerprint {
		t.Fatal("the served certificate is not the owner's")
	}
}

// TestPublicSpecChecked: a public endpoint's spec is checked when the
// service is posted, each mistake with a one-line reason.
func TestPublicSpecChecked(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	m, err := NewManager(context.Background(), Config{Log: testLog, Leaser: &fakeLeaser{}, Open: noStreams})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pub  api.PublicSpec
		want string
	}{
		{api.PublicSpec{Addr: "8443"}, "want IP:PORT"},
		{api.PublicSpec{Addr: "example.com:8443"}, "must be an IP address"},
		{api.PublicSpec{Addr: ":99999"}, "bad port"},
		{api.PublicSpec{Addr: ":0", TLSCert: "c.pem"}, "both a TLS certificate and its key"},
		{api.PublicSpec{Addr: ":0", Hosts: []string{"a b"}}, "not a host name"},
		{api.PublicSpec{Addr: ":0", MaxBody: -1}, "max body"},
		{api.PublicSpec{Addr: ":0", Rate: -1}, "rate and burst"},
		{api.PublicSpec{Addr: taken.Addr().String()}, "address already in use"},
	} {
		spec := testSpec()
		spec.Public = &tc.pub
		_, err := m.Post(spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("public %+v: %v, want %q", tc.pub, err, tc.want)
		}
	}
	v, err := m.Post(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(v.ID)
	if _, err := m.AddToken(v.ID, "alice"); err == nil || !strings.Contains(err.Error(), "no public endpoint") {
		t.Fatalf("a token for a service without a public endpoint: %v", err)
	}
}
