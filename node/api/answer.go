package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// The daemon's side of the answers: a call's value as JSON, a refusal as
// an ErrorBody with its status. Every package that serves calls answers
// through these, so the client reads one contract.

// StatusError refuses a call with an HTTP status.
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string { return e.Msg }

// HTTPStatus is the answer's status.
func (e *StatusError) HTTPStatus() int { return e.Code }

// BadRequest refuses a call's input (400).
func BadRequest(format string, a ...any) error {
	return &StatusError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

// NotFound refuses a call about something the daemon does not have (404).
func NotFound(format string, a ...any) error {
	return &StatusError{http.StatusNotFound, fmt.Sprintf(format, a...)}
}

// MaxLongPoll bounds a long poll's wait (?wait=D: GET /v1/jobs/{id}, GET
// /v1/provider/drain), so a caller cannot hold a connection open for ever.
const MaxLongPoll = time.Minute

// LongPollWait is a call's ?wait=D: a Go duration from 0 to MaxLongPoll; ok
// is false when the call has none (it answers at once).
func LongPollWait(r *http.Request) (d time.Duration, ok bool, err error) {
	q := r.URL.Query().Get("wait")
	if q == "" {
		return 0, false, nil
	}
	d, err = time.ParseDuration(q)
	if err != nil || d < 0 || d > MaxLongPoll {
		return 0, false, BadRequest("wait: want a duration from 0s to %s, got %q", MaxLongPoll, q)
	}
	return d, true, nil
}

// ViewTag is the entity tag of a view answered as body (its JSON, as
// HandleTagged writes it): a digest of the bytes, quoted as HTTP's ETag
// header carries it.
func ViewTag(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// TaggedBody is v's JSON as Handle and HandleTagged answer it, and its
// ViewTag.
func TaggedBody(v any) ([]byte, string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", err
	}
	b = append(b, '\n')
	return b, ViewTag(b), nil
}

// HandleTagged registers h for pattern on mux as Handle does, answering
// with the view's ETag (ViewTag). h is handed the tag the caller already
// has (If-None-Match; "" for none), so that a long poll can answer at
// once when the view is no longer that one, whenever it changed.
func HandleTagged(mux *http.ServeMux, pattern string, h func(r *http.Request, seen string) (any, error)) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r, r.Header.Get("If-None-Match"))
		if err != nil {
			WriteError(w, err)
			return
		}
		b, tag, err := TaggedBody(v)
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", tag)
		_, _ = w.Write(b)
	})
}

// Handle registers h for pattern on mux: its value is answered as JSON,
// its error as WriteError does.
func Handle(mux *http.ServeMux, pattern string, h func(r *http.Request) (any, error)) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}

// WriteError answers err as an ErrorBody, with the status of the first
// error in its chain that has one (HTTPStatus), else 500.
func WriteError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var se interface{ HTTPStatus() int }
	if errors.As(err, &se) {
		code = se.HTTPStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(ErrorBody{Error: err.Error()})
}
