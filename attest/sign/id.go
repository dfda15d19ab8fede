package sign

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/ipfs/go-cid"
	"github.com/mr-tron/base58/base58"
	mh "github.com/multiformats/go-multihash"
)

// ID is a peer's identity: the bytes of its libp2p peer ID, a multihash of
// its public key. For the Ed25519 keys every gpumesh node has, the
// multihash is the identity hash of the key itself, so anyone verifies a
// signature from the signer's ID alone (PublicKey). The bytes are those a
// libp2p peer.ID holds, so the two convert freely at the network's edge
// (peer.ID(id), sign.ID(p)) and print alike; the signing core, and every
// package of the market's nouns above it, need no libp2p to name a peer.
type ID string

// ErrBadID is Decode's error for text that is no peer ID.
var ErrBadID = errors.New("sign: malformed peer id")

// edPrefix is the identity multihash (code 0x00, length 36) of a libp2p
// public key message {Type: Ed25519 (1), Data: 32 bytes}, as libp2p
// encodes it: every Ed25519 peer ID is these 6 bytes and the key.
var edPrefix = []byte{0x00, 0x24, 0x08, 0x01, 0x12, 0x20}

// IDOf is the ID of an Ed25519 public key.
func IDOf(pub ed25519.PublicKey) ID {
	b := make([]byte, 0, len(edPrefix)+ed25519.PublicKeySize)
	return ID(append(append(b, edPrefix...), pub...))
}

// String is the ID's base58 text, as libp2p prints a peer ID.
func (id ID) String() string { return base58.Encode([]byte(id)) }

// PublicKey is the Ed25519 key the ID inlines. An ID of any other key
// type (or a hashed one) has none: its signatures never verify here.
func (id ID) PublicKey() (ed25519.PublicKey, error) {
	b := []byte(id)
	if len(b) != len(edPrefix)+ed25519.PublicKeySize || !bytes.HasPrefix(b, edPrefix) {
		return nil, errors.New("sign: peer id inlines no Ed25519 key")
	}
	return ed25519.PublicKey(b[len(edPrefix):]), nil
}

// MarshalText writes the ID's base58 text (libp2p's JSON and text form).
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an ID's text (Decode).
func (id *ID) UnmarshalText(b []byte) error {
	v, err := Decode(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// Decode reads a peer ID's text as libp2p's peer.Decode does: base58 of
// the multihash ("12D3KooW…", "Qm…"), or a CID of codec libp2p-key in any
// multibase ("bafz…").
func Decode(s string) (ID, error) {
	if strings.HasPrefix(s, "Qm") || strings.HasPrefix(s, "1") {
		m, err := mh.FromB58String(s)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrBadID, err)
		}
		return ID(m), nil
	}
	c, err := cid.Decode(s)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadID, err)
	}
	if c.Type() != cid.Libp2pKey {
		return "", fmt.Errorf("%w: a CID of codec %#x, not a libp2p key", ErrBadID, c.Type())
	}
	return ID(c.Hash()), nil
}
