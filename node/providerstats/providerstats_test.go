package providerstats

import (
	"errors"
	"net/http"
	"testing"

	"github.com/gpumesh/gpumesh/node/api"
)

// TestNotAProvider: a node that is not a provider has no figures, and
// says why as a bad request.
func TestNotAProvider(t *testing.T) {
	var s *Stats
	_, err := s.Now()
	_, herr := s.History()
	for _, err := range []error{err, herr} {
		var se *api.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusBadRequest || se.Msg != "this node is not a provider (set provider.enabled in its config)" {
			t.Fatalf("figures of a renter-only node: %v", err)
		}
	}
}
