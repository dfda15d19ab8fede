package sign

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/mr-tron/base58/base58"
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

// Validate reports an empty ID.
func (id ID) Validate() error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrBadID)
	}
	return nil
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

// Decode reads a peer ID's text as libp2p writes it: base58 of the
// multihash ("12D3KooW…", "Qm…"), or a CIDv1 of codec libp2p-key in
// base32 ("bafz…") or base58 ("z…").
func Decode(s string) (ID, error) {
	if strings.HasPrefix(s, "Qm") || strings.HasPrefix(s, "1") {
		b, err := base58.Decode(s)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrBadID, err)
		}
		return multihashID(b)
	}
	var raw []byte
	var err error
	switch {
	case strings.HasPrefix(s, "b"):
		raw, err = base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(s[1:]))
	case strings.HasPrefix(s, "z"):
		raw, err = base58.Decode(s[1:])
	default:
		return "", fmt.Errorf("%w: %q", ErrBadID, s)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadID, err)
	}
	version, n := uvarint(raw)
	if n <= 0 || version != 1 {
		return "", fmt.Errorf("%w: not a CIDv1", ErrBadID)
	}
	raw = raw[n:]
	codec, n := uvarint(raw)
	if n <= 0 || codec != 0x72 { // libp2p-key
		return "", fmt.Errorf("%w: a CID of codec %#x, not a libp2p key", ErrBadID, codec)
	}
	return multihashID(raw[n:])
}

// multihashID checks that b is one whole multihash (code, digest length,
// digest) and returns it as an ID.
func multihashID(b []byte) (ID, error) {
	_, n := uvarint(b)
	if n <= 0 {
		return "", fmt.Errorf("%w: multihash code", ErrBadID)
	}
	size, m := uvarint(b[n:])
	if m <= 0 || size != uint64(len(b)-n-m) {
		return "", fmt.Errorf("%w: multihash length", ErrBadID)
	}
	return ID(b), nil
}

// uvarint reads an unsigned varint of at most 9 bytes (multiformats'
// limit), minimally encoded; n <= 0 when b holds none.
func uvarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			if i > 0 && b[i] == 0 {
				return 0, -1 // not minimal
			}
			return v, i + 1
		}
	}
	return 0, -1
}
