package attest_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

func FuzzOpenReceipt(f *testing.F) {
	prov, renter := signtest.Pair(f)
	full := signed(f, prov, renter, receipt("L1", prov, renter, t0))
	b, err := full.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	half, err := attest.NewReceipt(prov, receipt("L2", prov, renter, t0))
	if err != nil {
		f.Fatal(err)
	}
	hb, err := half.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hb)
	f.Add([]byte(`{"payload":"e30=","provider_sig":"AA=="}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := attest.OpenReceipt(b)
		if err != nil {
			if sr != nil {
				t.Fatal("error with a receipt")
			}
			// Decodable but unverified receipts must not panic either.
			if u, err := attest.UnmarshalReceipt(b); err == nil {
				_ = u.Verify()
				_ = u.Countersign(renter)
			}
			return
		}
		if err := sr.Verify(); err != nil {
			t.Fatalf("opened receipt does not verify: %v", err)
		}
		if sr.Receipt.Renter == sr.Receipt.Provider {
			t.Fatal("opened a self-dealing receipt")
		}
		again, err := sr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		sr2, err := attest.OpenReceipt(again)
		if err != nil || !bytes.Equal(sr2.Payload, sr.Payload) {
			t.Fatalf("re-marshalled receipt does not reopen: %v", err)
		}
		if err := attest.NewBook(attest.BookOptions{}).AddReceipt(sr); err != nil {
			t.Fatalf("book rejects a verified receipt: %v", err)
		}
	})
}

func FuzzUnmarshalEnvelope(f *testing.F) {
	prov := signtest.New(f)
	fpEnv, err := attest.SignFingerprint(prov, nvmlFingerprint(prov))
	if err != nil {
		f.Fatal(err)
	}
	hbEnv, err := attest.SignHeartbeat(prov, attest.Heartbeat{LeaseID: "L1", Seq: 1, Time: t0, Source: attest.SourceNVML})
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range []*sign.Envelope{fpEnv, hbEnv} {
		b, err := e.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"domain":"heartbeat/v1","signer":"x","payload":"","sig":"AA=="}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := sign.UnmarshalEnvelope(b)
		if err != nil {
			return
		}
		again, err := env.Marshal()
		if err != nil {
			t.Fatalf("accepted envelope does not encode again: %v", err)
		}
		if env2, err := sign.UnmarshalEnvelope(again); err != nil || !reflect.DeepEqual(env, env2) {
			t.Fatalf("envelope changed in a round trip (%v): %+v, %+v", err, env, env2)
		}
		if fp, err := attest.OpenFingerprint(env); err == nil {
			if len(fp.Hash()) != 64 || fp.Peer != env.Signer {
				t.Fatalf("opened fingerprint %+v from %s", fp, env.Signer)
			}
		}
		hb, err := attest.OpenHeartbeat(env)
		if err == nil && hb.Provider != env.Signer {
			t.Fatalf("opened heartbeat of %s signed by %s", hb.Provider, env.Signer)
		}
		m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, 0)
		_ = m.Accept(env, t0)
		_ = m.Accept(env, t0)
		s := m.Summary(t0.Add(attest.DefaultHeartbeatInterval * 10))
		if s.Count+s.Rejected != 2 || s.Count > 1 {
			t.Fatalf("monitor accepted the same envelope twice: %+v", s)
		}
	})
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

// addSigned adds each envelope's payload as a seed (the targets below sign
// what they are given, as a hostile provider signs what it likes), and
// malformed ones.
func addSigned(f *testing.F, envs ...*sign.Envelope) {
	for _, e := range envs {
		f.Add(e.Payload)
	}
	for _, b := range []string{"", "{}", "null", "[]", `{"lease_id":"L1","seq":1}`, `{"gpu_util":1e400}`} {
		f.Add([]byte(b))
	}
}

// FuzzOpenHeartbeat: a provider's heartbeats reach its renter's monitor
// (wire.ProtoHeartbeat). Whatever OpenHeartbeat accepts, SignHeartbeat
// seals again to the same heartbeat, and the monitor and the fingerprint
// check take it without panicking.
func FuzzOpenHeartbeat(f *testing.F) {
	prov := signtest.Seeded(f, "provider")
	fp := nvmlFingerprint(prov)
	fpEnv, err := attest.SignFingerprint(prov, fp)
	if err != nil {
		f.Fatal(err)
	}
	var envs []*sign.Envelope
	for _, hb := range []attest.Heartbeat{
		{LeaseID: "L1", Seq: 1, Time: t0, Source: attest.SourceProcess, CPUSeconds: 2},
		{LeaseID: "L1", Seq: 2, Time: t0, Source: attest.SourceNVML, GPUUtil: 90, MemUsedMB: 1000, GPUUUIDs: []string{"GPU-aaaa"},
			Devices: []attest.DeviceSample{{Index: 0, UUID: "GPU-aaaa", Util: 90}}, Fingerprint: fpEnv},
	} {
		env, err := attest.SignHeartbeat(prov, hb)
		if err != nil {
			f.Fatal(err)
		}
		envs = append(envs, env)
	}
	addSigned(f, envs...)
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := signtest.Raw(t, prov, sign.DomainHeartbeat, payload)
		hb, err := attest.OpenHeartbeat(env)
		if err != nil {
			oneLine(t, err)
			return
		}
		_ = attest.CheckHeartbeatAgainstFingerprint(hb, fp)
		m := attest.NewHeartbeatMonitor(hb.LeaseID, prov.ID(), t0, 0)
		_ = m.SetFingerprint(fpEnv)
		_ = m.Accept(env, t0.Add(time.Minute))
		_ = m.Summary(t0.Add(time.Hour))
		again, err := attest.SignHeartbeat(prov, hb)
		if err != nil {
			t.Fatalf("accepted heartbeat does not seal again: %v", err)
		}
		hb2, err := attest.OpenHeartbeat(again)
		if err != nil {
			t.Fatalf("re-sealed heartbeat refused: %v", err)
		}
		sameJSON(t, "heartbeat", hb, hb2)
	})
}

// FuzzOpenFingerprint: a provider's signed fingerprint comes with its
// heartbeats; what OpenFingerprint accepts seals again to the same
// fingerprint, with the same hash.
func FuzzOpenFingerprint(f *testing.F) {
	prov := signtest.Seeded(f, "provider")
	var envs []*sign.Envelope
	for _, fp := range []attest.Fingerprint{nvmlFingerprint(prov), {Peer: prov.ID().String(), Source: attest.SourceDeclared,
		GPUs: []terms.GPU{{Model: "H100", VRAMGB: 80}}, IssuedAt: t0}} {
		env, err := attest.SignFingerprint(prov, fp)
		if err != nil {
			f.Fatal(err)
		}
		envs = append(envs, env)
	}
	addSigned(f, envs...)
	f.Fuzz(func(t *testing.T, payload []byte) {
		fp, err := attest.OpenFingerprint(signtest.Raw(t, prov, sign.DomainFingerprint, payload))
		if err != nil {
			oneLine(t, err)
			return
		}
		again, err := attest.SignFingerprint(prov, fp)
		if err != nil {
			t.Fatalf("accepted fingerprint does not seal again: %v", err)
		}
		fp2, err := attest.OpenFingerprint(again)
		if err != nil {
			t.Fatalf("re-sealed fingerprint refused: %v", err)
		}
		sameJSON(t, "fingerprint", fp, fp2)
		if fp.Hash() != fp2.Hash() {
			t.Fatal("a fingerprint's hash changed in a round trip")
		}
	})
}

// FuzzDecodeHeartbeatSummary: the renter answers a lease's final report
// with its heartbeat summary, which the provider's receipt carries; one
// it accepts makes a receipt that is valid, bills no more than the span,
// and comes back the same from the wire.
func FuzzDecodeHeartbeatSummary(f *testing.F) {
	prov, renter := signtest.Seeded(f, "provider"), signtest.Seeded(f, "renter")
	for _, hs := range []attest.HeartbeatSummary{{Count: 360, Expected: 360, Coverage: 1},
		{Count: 3, Expected: 360, Coverage: 0.01, Rejected: 2, RateLimited: 1, MaxTempC: 80, MeanGPUUtil: 50,
			Gaps: []terms.Interval{{Start: t0.Add(-time.Hour), End: t0.Add(-time.Minute)}}}} {
		b, err := json.Marshal(hs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range []string{"", "{}", "null", `{"coverage":1.5}`, `{"rate_limited":2,"rejected":1}`, `{"count":-1}`,
		`{"gaps":[{"start":"2026-03-01T12:00:00Z","end":"2026-03-01T11:00:00Z"}]}`} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := attest.DecodeHeartbeatSummary(b)
		if err != nil {
			oneLine(t, err)
			return
		}
		r := receipt("L1", prov, renter, t0)
		r.Heartbeats = hs
		lease := terms.Lease{Start: r.Start, End: r.End, GPUCount: 1}
		if s := attest.BillableSeconds(lease, r.Start, r.End, r.End, hs); s < 0 || s > r.End.Sub(r.Start).Seconds() {
			t.Fatalf("the summary bills %v seconds of a %v lease", s, r.End.Sub(r.Start))
		}
		sr, err := attest.NewReceipt(prov, r)
		if err != nil {
			t.Fatalf("an accepted summary makes no receipt: %v", err)
		}
		wire, err := sr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := attest.UnmarshalReceipt(wire)
		if err != nil {
			t.Fatalf("a receipt with an accepted summary does not decode: %v", err)
		}
		sameJSON(t, "heartbeat summary", hs, back.Receipt.Heartbeats)
	})
}
