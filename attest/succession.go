package attest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
)

// SuccessionNamespace is the DHT namespace of identity successions
// (sign.Succession): an identity's succession lives under
// "/gpumesh-succ/<old peer id>", where anyone who knows the old identity
// can look up who speaks for it now.
const SuccessionNamespace = "gpumesh-succ"

// SuccessionKey is the DHT key of old's succession.
func SuccessionKey(old sign.ID) string { return "/" + SuccessionNamespace + "/" + old.String() }

// SuccessionValidator is the DHT record validator of successions. It
// accepts only a succession signed by both its keys whose old identity is
// the key's, and learns each one it accepts into the node's registry: a
// succession proves itself, from whichever peer it comes, and a second,
// different one for the same identity is the evidence that its key is
// compromised. Of several valid records it selects the one the registry
// learned first, else the earliest issued: the first valid succession wins.
type SuccessionValidator struct {
	// Successions is the node's registry; nil verifies and learns nothing.
	Successions *sign.Successions
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (v SuccessionValidator) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Validate implements record.Validator.
func (v SuccessionValidator) Validate(key string, value []byte) error {
	old, err := successionKeyPeer(key)
	if err != nil {
		return err
	}
	ss, rec, err := sign.OpenSuccession(value)
	if err != nil {
		return fmt.Errorf("attest: succession under %s: %w", key, err)
	}
	if rec.Old != old.String() {
		return fmt.Errorf("attest: succession under %s hands over %s", key, rec.Old)
	}
	if _, _, err := v.Successions.Learn(ss, v.now()); err != nil && !errors.Is(err, sign.ErrCompromised) {
		return fmt.Errorf("attest: succession under %s: %w", key, err)
	}
	return nil
}

// Select implements record.Validator.
func (v SuccessionValidator) Select(key string, vals [][]byte) (int, error) {
	old, err := successionKeyPeer(key)
	if err != nil {
		return 0, err
	}
	first, known := v.Successions.Of(old.String())
	best, bestAt := -1, time.Time{}
	for i, b := range vals {
		_, rec, err := sign.OpenSuccession(b)
		if err != nil || rec.Old != old.String() {
			continue
		}
		if known && rec.New == first.New {
			return i, nil
		}
		if best < 0 || rec.Issued.Before(bestAt) {
			best, bestAt = i, rec.Issued
		}
	}
	if best < 0 {
		return 0, errors.New("attest: no valid succession")
	}
	return best, nil
}

func successionKeyPeer(key string) (sign.ID, error) {
	prefix := "/" + SuccessionNamespace + "/"
	if !strings.HasPrefix(key, prefix) {
		return "", fmt.Errorf("attest: key %q is not in namespace %s", key, SuccessionNamespace)
	}
	id, err := sign.Decode(strings.TrimPrefix(key, prefix))
	if err != nil {
		return "", fmt.Errorf("attest: key %q: %w", key, err)
	}
	return id, nil
}
