package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

type teapot struct{}

func (teapot) Error() string   { return "short and stout" }
func (teapot) HTTPStatus() int { return http.StatusTeapot }

// TestAnswers: a value is answered as JSON; a refusal with the status of
// the first error in its chain that has one, else 500, its message in an
// ErrorBody.
func TestAnswers(t *testing.T) {
	mux := http.NewServeMux()
	errs := map[string]error{
		"bad":     BadRequest("bad %s", "input"),
		"missing": NotFound("no job %q", "j1"),
		"wrapped": fmt.Errorf("post: %w", teapot{}),
		"plain":   errors.New("disk full"),
	}
	Handle(mux, "GET /v/{what}", func(r *http.Request) (any, error) {
		if err := errs[r.PathValue("what")]; err != nil {
			return nil, err
		}
		return map[string]int{"n": 1}, nil
	})
	for what, want := range map[string]struct {
		code int
		body string
	}{
		"ok": {200, ""}, "bad": {400, "bad input"}, "missing": {404, `no job "j1"`},
		"wrapped": {http.StatusTeapot, "post: short and stout"}, "plain": {500, "disk full"},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "/v/"+what, nil))
		var eb ErrorBody
		if w.Code != want.code || json.Unmarshal(w.Body.Bytes(), &eb) != nil || eb.Error != want.body {
			t.Errorf("%s: %d %q, want %d %q", what, w.Code, w.Body.String(), want.code, want.body)
		}
	}
}
