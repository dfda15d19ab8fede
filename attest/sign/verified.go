package sign

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
)

// verifiedCache remembers the signatures that verified lately, and the
// ones this process made (Signer.Sign), so that verifying the same signed
// bytes again costs a hash instead of an Ed25519 verification. A DHT node
// checks one capability record up to four times as it stores it
// (validation of the put, of the record it already holds, then both again
// to select the newer), and every provider re-puts its record every third
// of its TTL: on an idle network that was most of the cost of keeping
// records. A renter checks a receipt's two signatures as it countersigns,
// as it records it and as the gossip of each party brings it back, one
// of them its own. A signature that verified once verifies forever, so a
// hit is exact; only successes are remembered.
//
// It keeps two generations of at most maxVerified/2 entries: when the
// newer is full it becomes the older and the older is forgotten, so what
// was added last is never what goes first.
type verifiedCache struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]struct{}
}

// maxVerified bounds the cache (32 bytes an entry). Repeats come within
// one DHT operation, or within the seconds a receipt's gossip waits for a
// batch (at 90 jobs a second, a few thousand signatures).
const maxVerified = 16384

var verified = verifiedCache{cur: make(map[[sha256.Size]byte]struct{})}

// verifiedKey digests everything a verification depends on, each part
// length-prefixed so that no two inputs share a digest by concatenation.
func verifiedKey(id ID, domain string, payload, sig []byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(id), []byte(domain), payload, sig} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func (c *verifiedCache) has(k [sha256.Size]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cur[k]; ok {
		return true
	}
	_, ok := c.prev[k]
	return ok
}

func (c *verifiedCache) add(k [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cur) >= maxVerified/2 {
		c.prev, c.cur = c.cur, make(map[[sha256.Size]byte]struct{}, maxVerified/2)
	}
	c.cur[k] = struct{}{}
}

func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}
