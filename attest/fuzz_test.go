package attest_test

import (
	"bytes"
	"testing"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
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
