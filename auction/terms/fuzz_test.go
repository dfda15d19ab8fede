package terms

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
)

// The decoders' fuzz targets each take a pair: raw bytes as a peer sends
// them, or (signed) a payload the target signs itself, as a hostile peer
// signs whatever it likes, so that the checks past the signature are
// reached. Whatever a decoder accepts must be one line of error away from
// nothing: sealed again by its own encoder it decodes to the same value
// (compared as JSON, the form it travels in).

// fuzzWire is the decoder's input: data as it came, or data signed by s
// under domain.
func fuzzWire(t *testing.T, s *sign.Signer, domain string, data []byte, signed bool) []byte {
	if !signed {
		return data
	}
	return signtest.RawBytes(t, s, domain, data)
}

// payloadOf is the payload of wire bytes sealed by an encoder: the seed of
// the signed half of a target.
func payloadOf(f *testing.F, data []byte) []byte {
	env, err := sign.UnmarshalEnvelope(data)
	if err != nil {
		f.Fatal(err)
	}
	return env.Payload
}

// addSeeds adds valid encodings both ways (as sealed, and as the payload to
// sign), and malformed ones.
func addSeeds(f *testing.F, sealed ...[]byte) {
	for _, b := range sealed {
		f.Add(b, false)
		f.Add(payloadOf(f, b), true)
	}
	for _, b := range [][]byte{nil, []byte("{}"), []byte(`{"domain":"bid/v1","signer":"x","payload":"","sig":"AA=="}`),
		[]byte(`{"topic":"t","job":{"domain":"job/v1"}}`), []byte("null"), []byte(`[1,2`)} {
		f.Add(b, false)
		f.Add(b, true)
	}
}

// oneLine fails t when a decoder's error spans lines.
func oneLine(t *testing.T, err error) {
	t.Helper()
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// sameJSON fails t unless a and b encode alike.
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatalf("%s does not encode: %v", what, err)
	}
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("%s changed in a round trip:\n%s\n%s", what, ja, jb)
	}
}

// reencoded reports whether an encoder's refusal of an accepted value is
// only its size: JSON escapes (<, >, &, invalid UTF-8) can make the
// re-encoding longer than the bytes that came.
func reencoded(t *testing.T, what string, err error) bool {
	t.Helper()
	if errors.Is(err, ErrOversized) || errors.Is(err, sign.ErrOversized) {
		return false
	}
	if err != nil {
		t.Fatalf("accepted %s does not encode again: %v", what, err)
	}
	return true
}

func fuzzJob(fuzzSigner *sign.Signer) Job {
	j := validJob()
	j.ID, j.Owner, j.CreatedAt = "job-1", fuzzSigner.ID().String(), at(0, "10:00")
	return j
}

func FuzzDecodeCall(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	call, err := EncodeCall(fuzzSigner, fuzzJob(fuzzSigner), "gpumesh/jobs/2/eu/a100")
	if err != nil {
		f.Fatal(err)
	}
	var w callWire
	if err := json.Unmarshal(call, &w); err != nil {
		f.Fatal(err)
	}
	f.Add(call, false)
	f.Add(w.Job.Payload, true)
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		if signed {
			data, _ = json.Marshal(callWire{Topic: "t", Job: signtest.Raw(t, fuzzSigner, sign.DomainJob, data)})
		}
		c, err := DecodeCall(data)
		if err != nil {
			oneLine(t, err)
			return
		}
		// A decoded call's job is valid (DecodeCall validated it: nobody
		// validates it again), and its owner is a real peer id (the signer).
		if err := c.Job.Validate(); err != nil {
			t.Fatalf("decoded a call of an invalid job: %v", err)
		}
		if c.Job.Owner != fuzzSigner.ID().String() {
			t.Fatalf("decoded a call of %q, signed by %s", c.Job.Owner, fuzzSigner.ID())
		}
		again, err := EncodeCall(fuzzSigner, c.Job, c.Topic)
		if !reencoded(t, "call", err) {
			return
		}
		c2, err := DecodeCall(again)
		if err != nil {
			t.Fatalf("re-encoded call refused: %v", err)
		}
		sameJSON(t, "call", c, c2)
	})
}

func FuzzDecodeBid(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	now := at(0, "10:00")
	bid, err := EncodeBid(fuzzSigner, Bid{JobID: "job-1", Provider: fuzzSigner.ID().String(), Price: 1, Start: now, End: now.Add(time.Hour), Nonce: "n"})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, bid)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		b, err := DecodeBid(fuzzWire(t, fuzzSigner, sign.DomainBid, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		if b.Provider != fuzzSigner.ID().String() {
			t.Fatalf("decoded a bid of %q, signed by %s", b.Provider, fuzzSigner.ID())
		}
		again, err := EncodeBid(fuzzSigner, b)
		if !reencoded(t, "bid", err) {
			return
		}
		b2, err := DecodeBid(again)
		if err != nil {
			t.Fatalf("re-encoded bid refused: %v", err)
		}
		sameJSON(t, "bid", b, b2)
	})
}

func FuzzDecodeAward(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	j := fuzzJob(fuzzSigner)
	award, err := EncodeAward(fuzzSigner, Award{LeaseID: "l", JobID: "job-1", Renter: j.Owner, Provider: "p", Job: j})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, award)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		a, err := DecodeAward(fuzzWire(t, fuzzSigner, sign.DomainAward, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		if a.Renter != fuzzSigner.ID().String() || a.Renter != a.Job.Owner {
			t.Fatal("decoded award whose renter is not the job owner")
		}
		again, err := EncodeAward(fuzzSigner, a)
		if !reencoded(t, "award", err) {
			return
		}
		a2, err := DecodeAward(again)
		if err != nil {
			t.Fatalf("re-encoded award refused: %v", err)
		}
		sameJSON(t, "award", a, a2)
	})
}

func FuzzDecodeBidRelease(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	rel, err := EncodeBidRelease(fuzzSigner, BidRelease{JobID: "job-1", Attempt: 1, Renter: fuzzSigner.ID().String(), Provider: "p",
		BidNonce: "n", IssuedAt: at(0, "10:00")})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, rel)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		r, err := DecodeBidRelease(fuzzWire(t, fuzzSigner, sign.DomainBidRelease, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		again, err := EncodeBidRelease(fuzzSigner, r)
		if !reencoded(t, "bid release", err) {
			return
		}
		r2, err := DecodeBidRelease(again)
		if err != nil {
			t.Fatalf("re-encoded bid release refused: %v", err)
		}
		sameJSON(t, "bid release", r, r2)
	})
}

func FuzzDecodeGangDecision(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	d, err := EncodeGangDecision(fuzzSigner, GangDecision{GangID: "gang-1", JobID: "job-1", Attempt: 1, Renter: fuzzSigner.ID().String(),
		Provider: "p", LeaseID: "lease-1", Commit: true, IssuedAt: at(0, "10:00")})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, d)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		g, err := DecodeGangDecision(fuzzWire(t, fuzzSigner, sign.DomainGangDecision, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		again, err := EncodeGangDecision(fuzzSigner, g)
		if !reencoded(t, "gang decision", err) {
			return
		}
		g2, err := DecodeGangDecision(again)
		if err != nil {
			t.Fatalf("re-encoded gang decision refused: %v", err)
		}
		sameJSON(t, "gang decision", g, g2)
	})
}

func FuzzDecodeDecline(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	d, err := EncodeDecline(fuzzSigner, Decline{JobID: "job-1", Provider: fuzzSigner.ID().String(), Kind: "busy", IssuedAt: at(0, "10:00")})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, d)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		d, err := DecodeDecline(fuzzWire(t, fuzzSigner, sign.DomainDecline, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		again, err := EncodeDecline(fuzzSigner, d)
		if !reencoded(t, "decline", err) {
			return
		}
		d2, err := DecodeDecline(again)
		if err != nil {
			t.Fatalf("re-encoded decline refused: %v", err)
		}
		sameJSON(t, "decline", d, d2)
	})
}

func FuzzDecodeConfirm(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	for _, c := range []Confirm{{LeaseID: "l", Accepted: true, Devices: []int{0, 1}}, {LeaseID: "l", Reason: "no such bid"}} {
		b, err := EncodeConfirm(fuzzSigner, c)
		if err != nil {
			f.Fatal(err)
		}
		addSeeds(f, b)
	}
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		c, id, err := DecodeConfirm(fuzzWire(t, fuzzSigner, sign.DomainConfirm, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		if id != fuzzSigner.ID() {
			t.Fatalf("confirm signed by %s, decoded as %s's", fuzzSigner.ID(), id)
		}
		again, err := EncodeConfirm(fuzzSigner, c)
		if !reencoded(t, "confirm", err) {
			return
		}
		c2, _, err := DecodeConfirm(again)
		if err != nil {
			t.Fatalf("re-encoded confirm refused: %v", err)
		}
		sameJSON(t, "confirm", c, c2)
	})
}

func FuzzDecodeCapacityNotice(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	n, err := EncodeCapacityNotice(fuzzSigner, CapacityNotice{Provider: fuzzSigner.ID().String(), FreeGPUs: 2, Jobs: []string{"job-1", "job-2"},
		IssuedAt: at(0, "10:00")})
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, n)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		n, err := DecodeCapacityNotice(fuzzWire(t, fuzzSigner, sign.DomainCapacityNotice, data, signed))
		if err != nil {
			oneLine(t, err)
			return
		}
		if len(n.Jobs) > MaxNoticeJobs || n.FreeGPUs < 1 {
			t.Fatalf("accepted a notice of %d jobs, %d free gpus", len(n.Jobs), n.FreeGPUs)
		}
		again, err := EncodeCapacityNotice(fuzzSigner, n)
		if !reencoded(t, "capacity notice", err) {
			return
		}
		n2, err := DecodeCapacityNotice(again)
		if err != nil {
			t.Fatalf("re-encoded capacity notice refused: %v", err)
		}
		sameJSON(t, "capacity notice", n, n2)
	})
}

// FuzzOpenCapability: capability records come from the DHT, put there by
// anyone; the renter's holdings lookups and the provider's eligibility read
// them.
func FuzzOpenCapability(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	now := at(0, "10:00")
	c := Capability{Peer: fuzzSigner.ID().String(), Region: "eu-west", GPUs: []GPU{{Model: "A100", VRAMGB: 80}, {Model: "A100", VRAMGB: 80}}, Seq: 3,
		Artifacts: []string{strings.Repeat("ab", 32)}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	// One device in MIG mode, sold as its two instances.
	c.GPUs[1].Isolation = IsolationMIG
	c.GPUs[1].MIG = &MIG{Enabled: true, Instances: []MIGInstance{{UUID: "MIG-a", Profile: "3g.40gb", MemoryMB: 40192}, {UUID: "MIG-b", MemoryMB: 40192}}}
	c.Policy.Slices = []SliceRule{{Devices: []int{1}, Count: 2}}
	b, err := SealCapability(fuzzSigner, c)
	if err != nil {
		f.Fatal(err)
	}
	addSeeds(f, b)
	f.Fuzz(func(t *testing.T, data []byte, signed bool) {
		c, err := OpenCapability(fuzzWire(t, fuzzSigner, sign.DomainCapability, data, signed), now)
		if err != nil {
			oneLine(t, err)
			return
		}
		if err := (CapabilityValidator{Now: func() time.Time { return now }}).Validate(CapabilityKey(fuzzSigner.ID()), data); signed && err == nil {
			t.Fatal("the validator took a payload for an envelope")
		}
		again, err := SealCapability(fuzzSigner, c)
		if !reencoded(t, "capability", err) {
			return
		}
		c2, err := OpenCapability(again, now)
		if err != nil {
			t.Fatalf("re-sealed capability refused: %v", err)
		}
		sameJSON(t, "capability", c, c2)
	})
}

func TestDecodeRoundTrip(t *testing.T) {
	s, other := signtest.Pair(t)
	now := at(0, "10:00")
	j := validJob()
	j.ID, j.Owner = "job-1", s.ID().String()
	data, err := EncodeCall(s, j, "topic")
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCall(data)
	if err != nil || c.Job.ID != "job-1" || c.Topic != "topic" || c.Job.Duration != time.Hour {
		t.Fatalf("call round trip: %+v %v", c, err)
	}
	if _, err := EncodeCall(other, j, "topic"); err == nil {
		t.Fatal("sealed a job for another owner")
	}
	b := Bid{JobID: "job-1", Provider: s.ID().String(), Price: 1.25, Start: now, End: now.Add(time.Hour), Nonce: "n"}
	data, _ = EncodeBid(s, b)
	got, err := DecodeBid(data)
	if err != nil || got.Price != 1.25 || !got.Start.Equal(now) {
		t.Fatalf("bid round trip: %+v %v", got, err)
	}
	if _, err := EncodeBid(other, b); err == nil {
		t.Fatal("sealed a bid for another provider")
	}
	data, _ = EncodeConfirm(other, Confirm{LeaseID: "l", Accepted: true})
	if cf, id, err := DecodeConfirm(data); err != nil || id != other.ID() || !cf.Accepted {
		t.Fatalf("confirm round trip: %+v %v %v", cf, id, err)
	}
}

// streamDomains are the kinds a fuzzed stream message is signed as: those
// the bid and award streams carry and some they do not.
var streamDomains = []string{sign.DomainBid, sign.DomainDecline, sign.DomainCapacityNotice, sign.DomainAward,
	sign.DomainBidRelease, sign.DomainConfirm, sign.DomainJob, "bid/v2"}

// FuzzDecodeStreamMessage: the bid and award streams' decoders never panic
// and refuse in one line; what they accept has exactly one field set, of
// the kind its envelope names, and is what that kind's own decoder makes of
// the same bytes; a kind a stream does not carry is refused as
// sign.ErrWrongDomain.
func FuzzDecodeStreamMessage(f *testing.F) {
	fuzzSigner := signtest.Seeded(f, "auction")
	me := fuzzSigner.ID().String()
	now := at(0, "10:00")
	j := fuzzJob(fuzzSigner)
	var sealed [][]byte
	for _, enc := range []func() ([]byte, error){
		func() ([]byte, error) {
			return EncodeBid(fuzzSigner, Bid{JobID: "job-1", Provider: me, Price: 1, Start: now, End: now.Add(time.Hour), Nonce: "n"})
		},
		func() ([]byte, error) {
			return EncodeDecline(fuzzSigner, Decline{JobID: "job-1", Provider: me, Kind: "busy", IssuedAt: now})
		},
		func() ([]byte, error) {
			return EncodeCapacityNotice(fuzzSigner, CapacityNotice{Provider: me, FreeGPUs: 1, Jobs: []string{"job-1"}, IssuedAt: now})
		},
		func() ([]byte, error) {
			return EncodeAward(fuzzSigner, Award{LeaseID: "l", JobID: "job-1", Renter: me, Provider: "p", Job: j})
		},
		func() ([]byte, error) {
			return EncodeBidRelease(fuzzSigner, BidRelease{JobID: "job-1", Attempt: 1, Renter: me, Provider: "p", BidNonce: "n", IssuedAt: now})
		},
		func() ([]byte, error) {
			return EncodeConfirm(fuzzSigner, Confirm{LeaseID: "l", Accepted: true})
		},
	} {
		b, err := enc()
		if err != nil {
			f.Fatal(err)
		}
		sealed = append(sealed, b)
	}
	for i, b := range sealed {
		f.Add(b, uint8(i), false)
		f.Add(payloadOf(f, b), uint8(i), true)
	}
	for _, b := range [][]byte{nil, []byte("{}"), []byte(`{"domain":"bid/v1","signer":"x","payload":"","sig":"AA=="}`), []byte("null")} {
		f.Add(b, uint8(0), false)
		f.Add(b, uint8(7), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8, signed bool) {
		domain := streamDomains[int(kind)%len(streamDomains)]
		wire := fuzzWire(t, fuzzSigner, domain, data, signed)
		env, envErr := sign.UnmarshalEnvelope(wire)

		bm, err := DecodeBidMessage(wire)
		if err != nil {
			oneLine(t, err)
			if bm != (BidMessage{}) {
				t.Fatalf("refused bid stream message has a field set: %+v", bm)
			}
			if envErr == nil && len(wire) <= MaxMessageSize && env.Domain != sign.DomainBid && env.Domain != sign.DomainDecline &&
				env.Domain != sign.DomainCapacityNotice && !errors.Is(err, sign.ErrWrongDomain) {
				t.Fatalf("kind %q refused on the bid stream as %v, not as a wrong domain", env.Domain, err)
			}
		} else {
			switch {
			case bm.Bid != nil && bm.Decline == nil && bm.Notice == nil:
				b, err := DecodeBid(wire)
				if err != nil {
					t.Fatalf("bid stream took a bid DecodeBid refuses: %v", err)
				}
				sameJSON(t, "bid", b, *bm.Bid)
			case bm.Decline != nil && bm.Bid == nil && bm.Notice == nil:
				d, err := DecodeDecline(wire)
				if err != nil {
					t.Fatalf("bid stream took a decline DecodeDecline refuses: %v", err)
				}
				sameJSON(t, "decline", d, *bm.Decline)
			case bm.Notice != nil && bm.Bid == nil && bm.Decline == nil:
				n, err := DecodeCapacityNotice(wire)
				if err != nil {
					t.Fatalf("bid stream took a notice DecodeCapacityNotice refuses: %v", err)
				}
				sameJSON(t, "capacity notice", n, *bm.Notice)
			default:
				t.Fatalf("bid stream message has not exactly one field set: %+v", bm)
			}
		}

		am, err := DecodeAwardMessage(wire)
		if err != nil {
			oneLine(t, err)
			if am != (AwardMessage{}) {
				t.Fatalf("refused award stream message has a field set: %+v", am)
			}
			if envErr == nil && len(wire) <= MaxMessageSize && env.Domain != sign.DomainAward && env.Domain != sign.DomainBidRelease &&
				!errors.Is(err, sign.ErrWrongDomain) {
				t.Fatalf("kind %q refused on the award stream as %v, not as a wrong domain", env.Domain, err)
			}
			return
		}
		switch {
		case am.Award != nil && am.Release == nil:
			a, err := DecodeAward(wire)
			if err != nil {
				t.Fatalf("award stream took an award DecodeAward refuses: %v", err)
			}
			sameJSON(t, "award", a, *am.Award)
		case am.Release != nil && am.Award == nil:
			r, err := DecodeBidRelease(wire)
			if err != nil {
				t.Fatalf("award stream took a release DecodeBidRelease refuses: %v", err)
			}
			sameJSON(t, "bid release", r, *am.Release)
		default:
			t.Fatalf("award stream message has not exactly one field set: %+v", am)
		}
	})
}
