package artifact

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
)

// Tenancy: who may read an artifact. Store.MayRead is the one rule, and
// every path that hands an artifact's bytes (or the fact that we hold
// them) to someone goes through it: serving a peer (transfer.go), a store
// hit for a job's fetch, warm or checkpoint (Fetch, Missing), laying an
// artifact out for a job (Export, Open) and advertising it (Held).
//
// A public artifact is anyone's. A private one is its owner's: for one
// this node published (Owner ""), this node, the peers it is shared with
// and the providers whose current lease names it (ServiceConfig.Authorize);
// for one held for a peer, that peer. Beyond the owner, a peer showing the
// owner's signed grant may read it, and so may a peer that served this
// store every byte of it (it holds them itself: content addressing never
// hands one owner's private bytes to another). A chunk counts as held for
// a reader only when it is part of a complete artifact the reader may
// read or the reader's own fetch brought it (Missing).

// Reader is who reads an artifact: the peer fetching it from us, the
// renter whose job it is laid out for, the sender of a warm request, the
// provider claiming a checkpoint. The zero Reader is anonymous: it reads
// public artifacts only.
type Reader struct {
	// Peer is the reading peer.
	Peer sign.ID
	// Grant is a signed wire.ArtifactGrant the peer shows.
	Grant []byte
	local bool
}

// Local is this node's own operator (its control API and daemon reading
// for itself): it reads whatever the store holds.
var Local = Reader{local: true}

// For is peer p reading, with no grant.
func For(p sign.ID) Reader { return Reader{Peer: p} }

// key names the reader in the store's record of who brought which chunk.
func (rd Reader) key() string {
	if rd.local {
		return "local"
	}
	return rd.Peer.String() // "" for anonymous
}

// guard is what MayRead needs of one record, copied under the store's
// lock (the lease check runs outside it).
type guard struct {
	id      string
	private bool
	owner   string   // "" for ours
	owners  []string // further owners: peers that served us every byte
	shares  []string
}

func guardOf(id string, r *record) guard {
	return guard{id: id, private: r.Private, owner: r.Owner, owners: r.Owners, shares: r.Shares}
}

// admits is the rule (see above).
func (g guard) admits(rd Reader, self sign.ID, lease func(string, sign.ID) bool) bool {
	if rd.local || !g.private {
		return true
	}
	if rd.Peer == "" {
		return false
	}
	p := rd.Peer.String()
	owner := g.owner
	if owner == "" {
		if slices.Contains(g.shares, p) || (lease != nil && lease(g.id, rd.Peer)) {
			return true
		}
		owner = self.String()
	}
	if p == owner || slices.Contains(g.owners, p) {
		return true
	}
	if len(rd.Grant) == 0 {
		return false
	}
	for _, o := range append([]string{owner}, g.owners...) {
		if op, err := sign.Decode(o); err == nil && validGrant(rd.Grant, op, g.id, rd.Peer) {
			return true
		}
	}
	return false
}

// SetAccess tells the store who it is and who holds a lease naming one of
// its own private artifacts (ServiceConfig.Authorize).
func (s *Store) SetAccess(self sign.ID, lease func(id string, from sign.ID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.self, s.lease = self, lease
}

// MayRead says whether rd may read artifact id: nil, ErrNotFound, or why
// not. It is the one access rule (see Reader).
func (s *Store) MayRead(id string, rd Reader) error {
	s.mu.Lock()
	r, ok := s.recs[id]
	var g guard
	if ok {
		g = guardOf(id, r)
	}
	self, lease := s.self, s.lease
	s.mu.Unlock()
	if !ok || !ValidID(id) {
		return fmt.Errorf("artifact %s: %w", ShortID(id), ErrNotFound)
	}
	if g.admits(rd, self, lease) {
		return nil
	}
	who := rd.Peer.String()
	if rd.Peer == "" {
		who = "an anonymous reader"
	}
	return fmt.Errorf("artifact %s is private: %s is not its owner and shows no lease naming it, share or grant", ShortID(id), who)
}

// HeldToken is what a provider's capability record lists for a private
// artifact it holds for owner: not the id (which would tell every peer
// what other renters keep), but a digest only a peer that knows the id
// can match (terms.HeldToken).
func HeldToken(owner, id string) string { return terms.HeldToken(owner, id) }

// validGrant reports whether grant is owner's unexpired permission for
// peer to to fetch artifact id.
func validGrant(grant []byte, owner sign.ID, id string, to sign.ID) bool {
	if len(grant) == 0 {
		return false
	}
	env, err := sign.UnmarshalEnvelope(grant)
	if err != nil {
		return false
	}
	var g wire.ArtifactGrant
	signer, err := sign.Open(env, sign.DomainArtifactGrant, &g)
	return err == nil && signer == owner && g.ID == id && g.Peer == to.String() && time.Now().Before(g.Expires)
}
