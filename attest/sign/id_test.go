package sign

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"github.com/mr-tron/base58/base58"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestIDIsLibp2psPeerID: an Ed25519 key's ID is, byte for byte, the peer ID
// libp2p gives it; both print, parse (base58 and CID) and encode alike;
// and a signature made by either side verifies on the other.
func TestIDIsLibp2psPeerID(t *testing.T) {
	for i := 0; i < 20; i++ {
		priv, pub, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := peer.IDFromPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := priv.Raw()
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSigner(ed25519.PrivateKey(raw))
		if err != nil {
			t.Fatal(err)
		}
		if string(s.ID()) != string(pid) || s.ID().String() != pid.String() {
			t.Fatalf("ID %s, libp2p's peer ID %s", s.ID(), pid)
		}
		for _, text := range []string{pid.String(), peer.ToCid(pid).String()} {
			got, err := Decode(text)
			if err != nil || got != s.ID() {
				t.Fatalf("Decode(%s) = %s, %v; want %s", text, got, err, s.ID())
			}
		}
		a, _ := json.Marshal(struct{ P peer.ID }{pid})
		b, _ := json.Marshal(struct{ P ID }{s.ID()})
		if string(a) != string(b) {
			t.Fatalf("JSON %s, libp2p's %s", b, a)
		}
		var back struct{ P ID }
		if err := json.Unmarshal(a, &back); err != nil || back.P != s.ID() {
			t.Fatalf("JSON back: %s, %v", back.P, err)
		}

		payload := []byte("a bid")
		sig, err := s.Sign(DomainBid, payload)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := pub.Verify(signingBytes(DomainBid, payload), sig); err != nil || !ok {
			t.Fatalf("libp2p's key does not verify the signer's signature: %v", err)
		}
		theirs, err := priv.Sign(signingBytes(DomainAward, payload))
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(s.ID(), DomainAward, payload, theirs); err != nil {
			t.Fatalf("libp2p key's signature refused: %v", err)
		}
		if err := Verify(s.ID(), DomainBid, payload, theirs); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("signature replayed under another domain: %v", err)
		}
	}
}

// TestHostileIDs: text that is no peer ID is refused with ErrBadID, and an
// ID that inlines no Ed25519 key (a hashed RSA key, an inline secp256k1
// one, a truncated one) verifies nothing.
func TestHostileIDs(t *testing.T) {
	for _, text := range []string{"", "Qm", "1", "12D3KooW", "not a peer", "bafzzzz", "z", "b",
		"QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N" + "x",        // base58 of a multihash with a byte too many
		"bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy", // a CID of codec raw, not libp2p-key
	} {
		if id, err := Decode(text); !errors.Is(err, ErrBadID) {
			t.Errorf("Decode(%q) = %q, %v; want ErrBadID", text, id, err)
		}
	}
	if _, err := Decode(strings.Repeat("1", 64)); !errors.Is(err, ErrBadID) {
		t.Errorf("a run of zero bytes decoded: %v", err)
	}
	// A multihash whose length varint is not minimal (0x80 0x00 for 0).
	if id, err := Decode(base58.Encode([]byte{0x00, 0x80, 0x00})); !errors.Is(err, ErrBadID) {
		t.Errorf("a varint that is not minimal read: %q, %v", id, err)
	}

	rsa, _, err := crypto.GenerateRSAKeyPair(2048, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secp, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ed := testSigner(t)
	payload := []byte("x")
	for name, priv := range map[string]crypto.PrivKey{"rsa": rsa, "secp256k1": secp} {
		pid, err := peer.IDFromPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		id, err := Decode(pid.String())
		if err != nil {
			t.Fatalf("%s peer ID %s not read: %v", name, pid, err)
		}
		if _, err := id.PublicKey(); err == nil {
			t.Errorf("%s peer ID gave an Ed25519 key", name)
		}
		sig, _ := priv.Sign(signingBytes(DomainBid, payload))
		if err := Verify(id, DomainBid, payload, sig); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s peer's signature: %v, want ErrBadSignature", name, err)
		}
	}
	short := ed.ID()[:len(ed.ID())-1]
	sig, _ := ed.Sign(DomainBid, payload)
	if err := Verify(short, DomainBid, payload, sig); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a truncated ID verified: %v", err)
	}
	if _, err := NewSigner(ed25519.PrivateKey(make([]byte, 12))); err == nil {
		t.Error("a 12-byte private key made a signer")
	}
}
