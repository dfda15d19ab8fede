package terms

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

// TestStreamMessageKinds: the bid and award streams decode a message once,
// by the kind its envelope names: each kind they carry lands in its own
// field; a kind they do not carry is refused by name (one line, as a wrong
// domain); a message of a carried kind that fails that kind's checks is
// refused for them, not re-read as another kind.
func TestStreamMessageKinds(t *testing.T) {
	s := signtest.New(t)
	me := s.ID().String()
	now := at(0, "10:00")
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bid := must(EncodeBid(s, Bid{JobID: "job-1", Provider: me, Price: 1, Start: now, End: now.Add(time.Hour), Nonce: "n"}))
	decline := must(EncodeDecline(s, Decline{JobID: "job-1", Provider: me, Kind: "busy", IssuedAt: now}))
	notice := must(EncodeCapacityNotice(s, CapacityNotice{Provider: me, FreeGPUs: 1, Jobs: []string{"job-1"}, IssuedAt: now}))
	award := must(EncodeAward(s, Award{LeaseID: "l", JobID: "job-1", Renter: me, Provider: "p", Job: fuzzJob(s)}))
	release := must(EncodeBidRelease(s, BidRelease{JobID: "job-1", Attempt: 1, Renter: me, Provider: "p", BidNonce: "n", IssuedAt: now}))
	confirm := must(EncodeConfirm(s, Confirm{LeaseID: "l", Accepted: true}))
	badDecline := signtest.RawBytes(t, s, sign.DomainDecline, []byte(`{"job_id":"../x","provider":"`+me+`","kind":"busy"}`))

	for _, c := range []struct {
		name string
		data []byte
		want string // the field set, or the error's text
	}{
		{"bid", bid, "bid"}, {"decline", decline, "decline"}, {"notice", notice, "notice"},
		{"award", award, `unknown message kind "award/v1"`}, {"confirm", confirm, `unknown message kind "confirm/v1"`},
		{"decline failing its checks", badDecline, "decline: job id"},
	} {
		m, err := DecodeBidMessage(c.data)
		got := map[bool]string{m.Bid != nil: "bid", m.Decline != nil: "decline", m.Notice != nil: "notice"}[true]
		if err != nil {
			got = err.Error()
			if strings.Contains(c.want, "unknown") && !errors.Is(err, sign.ErrWrongDomain) {
				t.Errorf("bid stream, %s: %v is not a wrong domain", c.name, err)
			}
		}
		if !strings.Contains(got, c.want) || strings.Contains(got, "\n") {
			t.Errorf("bid stream, %s: got %q, want %q", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"award", award, "award"}, {"release", release, "release"},
		{"bid", bid, `unknown message kind "bid/v1"`}, {"confirm", confirm, `unknown message kind "confirm/v1"`},
	} {
		m, err := DecodeAwardMessage(c.data)
		got := map[bool]string{m.Award != nil: "award", m.Release != nil: "release"}[true]
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("award stream, %s: got %q, want %q", c.name, got, c.want)
		}
	}
	long := signtest.RawBytes(t, s, strings.Repeat("k", 5000), []byte("{}"))
	if _, err := DecodeBidMessage(long); err == nil || !strings.Contains(err.Error(), "unknown message kind") || len(err.Error()) > 300 {
		t.Errorf("a 5000-byte kind is not refused by a short error: %v", err)
	}
}

// TestDecodeCallValidatesTheJob: a call is where a job enters a provider,
// so DecodeCall validates it: a signed call of an invalid job is refused
// (ErrInvalidJob, its FieldErrors naming the problem), and what it returns
// is valid with its defaults filled (a bid window), needing no check again.
func TestDecodeCallValidatesTheJob(t *testing.T) {
	s := signtest.New(t)
	j := validJob()
	j.ID, j.Owner = "job-1", s.ID().String()
	data, err := EncodeCall(s, j, "topic")
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCall(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Job.BidWindow != DefaultBidWindow {
		t.Fatalf("decoded job's bid window %v, want the default %v filled", c.Job.BidWindow, DefaultBidWindow)
	}
	j.MaxPrice = -1
	data, err = EncodeCall(s, j, "topic")
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeCall(data)
	if fes := FieldErrors(err); !errors.Is(err, ErrInvalidJob) || len(fes) != 1 || fes[0].Field != "max_price" {
		t.Fatalf("call of a job with a negative price: %v, want an invalid job on max_price", err)
	}
}
