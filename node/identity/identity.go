// Package identity is a node's identity over time: rotating its key (a
// succession both keys sign, recorded in the ledger), refusing to start
// under a key that is not the ledger's owner or mid-rotation, and
// spreading its successions (DHT and gossip) while taking in others'.
package identity

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/p2p"
)

// Rotate gives the node of dataDir a new identity key that its old
// one hands over to: it makes a fresh Ed25519 key, seals the succession
// issued at now (signed by both keys, sign.SealSuccession), records it in
// the ledger (record.KindSuccession: the ledger's owner becomes the new
// identity and its chain goes on) and puts the new key in place, keeping
// the old one as Paths.KeyRetired (0600). It works on a stopped daemon's
// data dir: a running daemon holds the ledger, and rotating under it is
// config.ErrAlreadyRunning. The next start runs under the new key and publishes
// the succession (DHT and gossip), and peers move the old identity's
// reputation to the new one.
//
// A crash cannot leave a ledger and a key that disagree unnoticed: the new
// key is written aside (Paths.KeyNext) before the ledger records the
// succession and put in place after; a daemon refuses to start while it is
// there, and Rotate run again finishes the rotation the ledger
// recorded, or drops a key the ledger never took and rotates afresh.
func Rotate(dataDir string, now time.Time) (sign.Succession, error) {
	paths := config.Paths{Dir: dataDir}
	if paths.Running() {
		return sign.Succession{}, fmt.Errorf("%w (%s): stop it first, then rotate", config.ErrAlreadyRunning, dataDir)
	}
	if _, err := os.Stat(paths.Key()); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(paths.KeyNext()); errors.Is(err, os.ErrNotExist) {
			return sign.Succession{}, fmt.Errorf("no identity key in %s: nothing to rotate (the daemon makes one on first start)", dataDir)
		}
	}
	db, err := ledger.Open(paths.DB(), ledger.WithLogger(slog.New(slog.DiscardHandler)))
	if errors.Is(err, ledger.ErrInUse) {
		return sign.Succession{}, fmt.Errorf("%w (%s): stop it first, then rotate", config.ErrAlreadyRunning, dataDir)
	}
	if err != nil {
		return sign.Succession{}, err
	}
	defer db.Close()
	owner, seq, err := db.Owner()
	if err != nil {
		return sign.Succession{}, err
	}
	// An earlier rotation that stopped half-way.
	switch next, err := loadSigner(paths.KeyNext()); {
	case err == nil && next.ID().String() == owner:
		e, err := db.Get(seq)
		if err != nil {
			return sign.Succession{}, err
		}
		_, rec, err := sign.OpenSuccession(e.Data)
		if err != nil {
			return sign.Succession{}, fmt.Errorf("ledger entry %d: %w", seq, err)
		}
		return rec, installKey(paths, rec)
	case err == nil:
		if err := os.Remove(paths.KeyNext()); err != nil {
			return sign.Succession{}, fmt.Errorf("drop the unrecorded key of an interrupted rotation: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return sign.Succession{}, err
	}
	old, err := loadSigner(paths.Key())
	if err != nil {
		return sign.Succession{}, err
	}
	if err := CheckOwner(paths, old, db); err != nil {
		return sign.Succession{}, err
	}
	nextKey, err := p2p.NewKey()
	if err != nil {
		return sign.Succession{}, err
	}
	next, err := p2p.Signer(nextKey)
	if err != nil {
		return sign.Succession{}, err
	}
	ss, err := sign.SealSuccession(old, next, now)
	if err != nil {
		return sign.Succession{}, err
	}
	rec, err := ss.Open()
	if err != nil {
		return sign.Succession{}, err
	}
	data, err := ss.Marshal()
	if err != nil {
		return sign.Succession{}, err
	}
	if err := p2p.WriteKey(paths.KeyNext(), nextKey); err != nil {
		return sign.Succession{}, err
	}
	if _, err := db.Append(record.Entry{Kind: record.KindSuccession, Time: rec.Issued, Counterparty: rec.Old, Data: data}); err != nil {
		_ = os.Remove(paths.KeyNext())
		return sign.Succession{}, err
	}
	return rec, installKey(paths, rec)
}

// loadSigner reads the identity key at path.
func loadSigner(path string) (*sign.Signer, error) {
	key, err := p2p.LoadKey(path)
	if err != nil {
		return nil, err
	}
	return p2p.Signer(key)
}

// installKey finishes a rotation the ledger recorded: the old key (if
// still in place) to its retired name, the new one into place.
func installKey(paths config.Paths, rec sign.Succession) error {
	cur, err := loadSigner(paths.Key())
	switch {
	case err == nil && cur.ID().String() == rec.Old:
		if err := os.Rename(paths.Key(), paths.KeyRetired(rec.Issued)); err != nil {
			return fmt.Errorf("keep the old identity key: %w", err)
		}
	case err == nil:
		return fmt.Errorf("%s holds %s, neither the old identity %s nor the new %s", paths.Key(), cur.ID(), rec.Old, rec.New)
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.Rename(paths.KeyNext(), paths.Key()); err != nil {
		return fmt.Errorf("put the new identity key in place: %w", err)
	}
	return nil
}

// Unfinished refuses to start a data dir whose rotation stopped
// half-way: before the key is even loaded, so that none is made in its
// place.
func Unfinished(paths config.Paths) error {
	if _, err := os.Stat(paths.KeyNext()); err == nil {
		return fmt.Errorf("an identity rotation did not finish (%s is there): run `gpumesh identity rotate` again to finish it", paths.KeyNext())
	}
	return nil
}

// CheckOwner refuses to run under a key that is not its ledger's owner: a
// key file from before a rotation.
func CheckOwner(paths config.Paths, self *sign.Signer, db *ledger.DB) error {
	owner, _, err := db.Owner()
	if err != nil || owner == "" {
		return err
	}
	if self.ID().String() != owner {
		return fmt.Errorf("the ledger belongs to %s since its last identity rotation, but %s is %s: not this ledger's key",
			owner, paths.Key(), self.ID())
	}
	return nil
}
