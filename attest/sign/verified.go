package sign

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// verifiedCache remembers the last signatures that verified, so that verifying
// the same signed bytes again costs a hash instead of an Ed25519
// verification. A DHT node checks one capability record up to four times
// as it stores it (validation of the put, of the record it already holds,
// then both again to select the newer), and every provider re-puts its
// record every third of its TTL: on an idle network that was most of the
// cost of keeping records. A signature that verified once verifies
// forever, so a hit is exact; only successes are remembered.
type verifiedCache struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{}
}

// maxVerified bounds the cache; when full it starts afresh. Repeats come
// within one DHT operation, so a small cache catches them.
const maxVerified = 512

var verified = verifiedCache{seen: make(map[[sha256.Size]byte]struct{}, maxVerified)}

// verifiedKey digests everything a verification depends on, each part
// length-prefixed so that no two inputs share a digest by concatenation.
func verifiedKey(id peer.ID, domain string, payload, sig []byte) [sha256.Size]byte {
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
	_, ok := c.seen[k]
	return ok
}

func (c *verifiedCache) add(k [sha256.Size]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) >= maxVerified {
		clear(c.seen)
	}
	c.seen[k] = struct{}{}
}

func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
