package taskfile

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// TestConvertRequests: a client's task or service text that is missing,
// malformed, or names a certificate by a relative path is a bad request,
// named after the client's file.
func TestConvertRequests(t *testing.T) {
	now := time.Now()
	bad := func(what string, err error, want string) {
		t.Helper()
		var se *api.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusBadRequest || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %#v, want a bad request with %q", what, err, want)
		}
	}
	_, err := ConvertRequest("", "", now)
	bad("no task", err, "task is empty")
	_, err = ConvertRequest("resources: [", "job.yaml", now)
	bad("broken task", err, "job.yaml")
	_, err = ConvertServiceRequest("", "", now)
	bad("no service", err, "service is empty")
	_, err = ConvertServiceRequest(svcBase+"service:\n  public: {addr: ':8443', tls_cert: cert.pem, tls_key: /k.pem}\n", "s.yaml", now)
	bad("relative certificate", err, `public endpoint file "cert.pem": give an absolute path`)
	if _, err := ConvertServiceRequest(svcBase+"service: {}\n", "s.yaml", now); err != nil {
		t.Fatalf("a valid service: %v", err)
	}
}
