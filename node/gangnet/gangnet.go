// Package gangnet carries a gang's private network between its providers.
// Each member of a gang (one job placed on K providers) runs in its own
// network namespace where member r has the address Addr(r) (127.77.0.r+1);
// the runtime captures every TCP connection the job opens to another
// member's address, on any port (runtime.GangNet), and this package
// carries it over a libp2p stream (wire.ProtoGang) to that member's
// provider, which connects it to its job at the member's own address,
// from the dialing member's address. Only the provider of another member
// of the same gang may open such a stream: the one its renter signed into
// the gang's terms (terms.Gang, in each member's lease), proven by the
// stream's authenticated peer and a digest of those terms that both
// members' providers hold.
//
// The seam with the lease supervisor is its Network hook
// (lease.Network), which Net.Hook is: before a gang
// lease's job starts, it joins the member (Net.Join: the lease's signed
// gang terms, checked to name it) and puts its network into the job's
// runtime.Spec.Gang; once the job started it hands the job over
// (LocalMember.Started); when the job has ended, the member leaves
// (LocalMember.Leave).
package gangnet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/service"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// startWait is how long a stream to a member that has joined waits for
// its job to start (within the stream's handshake timeout).
const startWait = 5 * time.Second

// MasterPort is where rank 0's rendezvous listens (torchrun's default
// MASTER_PORT).
const MasterPort = 29500

// Addr is the gang address of member rank, the same in every member's
// namespace: MASTER_ADDR is Addr(0). A gang has at most terms.MaxNodes
// members, well within 127.77.0.0/24.
func Addr(rank int) netip.Addr { return netip.AddrFrom4([4]byte{127, 77, 0, byte(rank + 1)}) }

// rankOf is the rank whose address a is, or -1.
func rankOf(a netip.Addr, k int) int {
	b := a.As4()
	if !a.Is4() || b[0] != 127 || b[1] != 77 || b[2] != 0 || int(b[3]) < 1 || int(b[3]) > k {
		return -1
	}
	return int(b[3]) - 1
}

// roster is what the network needs of a gang, derived from its terms as
// the renter signed them into a member's lease (terms.Gang, the one
// definition of a gang): its id, the member this provider runs, each
// member's provider by rank, and the digest both members' providers must
// agree on.
type roster struct {
	id        string
	rank      int
	providers []peer.ID
	digest    string
}

// digest names a gang: two providers agree on it only when they hold the
// same terms (every member's rank, provider and lease) from the same
// renter. The terms differ only in whose rank they are, which the digest
// leaves out.
func digest(renter string, g terms.Gang) string {
	g.Rank = 0
	b, _ := json.Marshal(struct {
		Renter string     `json:"renter"`
		Gang   terms.Gang `json:"gang"`
	}{renter, g}) // plain fields: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// rosterOf is the roster of the gang lease l is a member of, from its
// terms (l.Gang), checked to name l at its rank on this provider; nil for
// a lease of no gang. A gang job's lease without gang terms fails.
func (n *Net) rosterOf(l terms.Lease, job terms.Job) (*roster, error) {
	g := l.Gang
	if g == nil {
		if job.Nodes > 1 {
			return nil, fmt.Errorf("gangnet: lease %s of a gang of %d carries no gang terms", l.ID, job.Nodes)
		}
		return nil, nil
	}
	if l.Provider != n.self.String() {
		return nil, fmt.Errorf("gangnet: lease %s is %s's, not this provider's", l.ID, l.Provider)
	}
	if err := g.Check(l.ID, l.Provider); err != nil {
		return nil, fmt.Errorf("gangnet: lease %s: %w", l.ID, err)
	}
	if _, err := peer.Decode(l.Renter); err != nil {
		return nil, fmt.Errorf("gangnet: lease %s: renter: %w", l.ID, err)
	}
	r := &roster{id: g.ID, rank: g.Rank, providers: make([]peer.ID, g.Size), digest: digest(l.Renter, *g)}
	for i, m := range g.Members {
		p, err := peer.Decode(m.Provider)
		if err != nil { // Check decoded it already
			return nil, fmt.Errorf("gangnet: gang %s: member %d's provider: %w", g.ID, i, err)
		}
		r.providers[i] = p
	}
	return r, nil
}

// Opener opens a ProtoGang stream to a provider.
type Opener func(ctx context.Context, provider peer.ID) (network.Stream, error)

// Net is this provider's side of every gang it runs a member of: the
// members it runs, the streams it opens for their jobs and those it
// serves to them.
type Net struct {
	self peer.ID
	open Opener
	log  *slog.Logger

	mu      sync.Mutex
	members map[memberKey]*LocalMember

	count func(what string)
}

// Counter names: a member's connection carried to another member, another
// member's connection let in, a stream refused.
const (
	CountOut     = "provider.gang_out"
	CountIn      = "provider.gang_in"
	CountRefused = "provider.gang_refused"
)

type memberKey struct {
	gang string
	rank int
}

// New is the gang network of the provider self, opening streams with
// open and counting connections with count (CountOut, ...; nil: none).
func New(self peer.ID, open Opener, log *slog.Logger, count func(what string)) *Net {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	return &Net{self: self, open: open, log: log, count: count, members: make(map[memberKey]*LocalMember)}
}

// LocalMember is a member of a gang that this provider runs, from Join to
// Leave.
type LocalMember struct {
	n      *Net
	gang   *roster
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	job     runtime.GangDialer
	started chan struct{} // closed by Started
	conns   sync.WaitGroup
}

// Join makes this provider's lease l a member of the gang its terms
// carry (l.Gang, which the renter signed in the award the provider
// verified): they must name l at its rank, on this provider. The
// returned member's Spec goes into the job's runtime.Spec.Gang. A lease
// of no gang joins nothing (nil, nil); a gang job's lease (job.Nodes > 1)
// without gang terms fails.
func (n *Net) Join(l terms.Lease, job terms.Job) (*LocalMember, error) {
	g, err := n.rosterOf(l, job)
	if err != nil || g == nil {
		return nil, err
	}
	k := memberKey{g.id, g.rank}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.members[k]; ok {
		return nil, fmt.Errorf("gangnet: gang %s: member %d has already joined", g.id, g.rank)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &LocalMember{n: n, gang: g, ctx: ctx, cancel: cancel, started: make(chan struct{})}
	n.members[k] = m
	return m, nil
}

// Hook is the lease supervisor's Network hook: a lease whose terms make
// it a gang member joins that gang's network for its job's run.
func (n *Net) Hook(l terms.Lease, job terms.Job, spec *runtime.Spec) (func(runtime.Handle), func(), error) {
	m, err := n.Join(l, job)
	if err != nil || m == nil {
		return nil, nil, err
	}
	spec.Gang = m.Spec()
	return func(h runtime.Handle) {
		if d, ok := h.(runtime.GangDialer); ok {
			m.Started(d)
		}
	}, m.Leave, nil
}

// Spec is the member's network as the runtime sets it up.
func (m *LocalMember) Spec() *runtime.GangNet {
	addrs := make([]netip.Addr, len(m.gang.providers))
	for r := range addrs {
		addrs[r] = Addr(r)
	}
	return &runtime.GangNet{Rank: m.gang.rank, Addrs: addrs, MasterPort: MasterPort, Accept: m.carry}
}

// Started hands over the member's started job, which other members'
// connections reach from then on.
func (m *LocalMember) Started(job runtime.GangDialer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.job == nil {
		m.job = job
		close(m.started)
	}
}

// Leave ends the membership: the connections carried for it are cut and
// no other member reaches it any more.
func (m *LocalMember) Leave() {
	m.n.mu.Lock()
	if k := (memberKey{m.gang.id, m.gang.rank}); m.n.members[k] == m {
		delete(m.n.members, k)
	}
	m.n.mu.Unlock()
	m.mu.Lock()
	m.cancel()
	m.mu.Unlock()
	m.conns.Wait()
}

// track counts a carried connection, unless the member has left.
func (m *LocalMember) track() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return false
	}
	m.conns.Add(1)
	return true
}

// carry takes a connection the member's job opened to member dst's
// address and carries it to that member's provider (runtime.GangNet's
// Accept).
func (m *LocalMember) carry(c net.Conn, dst netip.AddrPort) {
	defer c.Close()
	to := rankOf(dst.Addr(), len(m.gang.providers))
	if to < 0 || to == m.gang.rank || !m.track() {
		return
	}
	defer m.conns.Done()
	req := wire.GangRequest{Gang: m.gang.id, Roster: m.gang.digest, From: m.gang.rank, To: to, Port: int(dst.Port())}
	s, err := service.ConnectGang(m.ctx, service.Opener(m.n.open), m.gang.providers[to], req)
	if err != nil {
		m.n.log.Debug("gang connection not carried", "gang", m.gang.id, "from", m.gang.rank, "to", to, "port", dst.Port(), "err", err)
		// The job's connect succeeded locally: a reset, not an orderly
		// close, tells it the member could not be reached.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	}
	m.n.count(CountOut)
	_ = service.Pipe(m.ctx, s, c)
}

// Serve handles one ProtoGang stream: another member's connection to a
// member this provider runs.
func (n *Net) Serve(ctx context.Context, s network.Stream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var held *LocalMember
	stop := func() bool { return false }
	defer func() {
		if held != nil {
			stop()
			held.conns.Done()
		}
	}()
	err := service.ServeGang(ctx, s, func(req wire.GangRequest, from peer.ID) (service.Target, error) {
		m, job, err := n.authorize(req, from)
		if err != nil {
			n.count(CountRefused)
			return nil, err
		}
		if !m.track() {
			n.count(CountRefused)
			return nil, fmt.Errorf("gang %s: member %d has left", req.Gang, req.To)
		}
		held = m
		stop = context.AfterFunc(m.ctx, cancel)
		n.count(CountIn)
		return service.DialFunc(func(ctx context.Context) (net.Conn, error) {
			return job.DialGang(ctx, Addr(req.From), req.Port)
		}), nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		n.log.Debug("gang stream", "peer", s.Conn().RemotePeer(), "err", err)
	}
	return err
}

// authorize answers which member's job a stream from peer from asking for
// req reaches: member req.To of a gang this provider runs a member of,
// whose roster (the same, by digest) names from as member req.From's
// provider.
func (n *Net) authorize(req wire.GangRequest, from peer.ID) (*LocalMember, runtime.GangDialer, error) {
	n.mu.Lock()
	m, ok := n.members[memberKey{req.Gang, req.To}]
	n.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("gang %s: no member %d here", req.Gang, req.To)
	}
	if req.Roster != m.gang.digest {
		return nil, nil, fmt.Errorf("gang %s: another roster", req.Gang)
	}
	if req.From < 0 || req.From >= len(m.gang.providers) || req.From == req.To || m.gang.providers[req.From] != from {
		return nil, nil, fmt.Errorf("gang %s: %s is not member %d's provider", req.Gang, from, req.From)
	}
	if req.Port < 1 || req.Port > 65535 {
		return nil, nil, fmt.Errorf("gang %s: invalid port %d", req.Gang, req.Port)
	}
	// Members start at slightly different times: one that joined but has
	// not started yet is waited for a little.
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case <-m.started:
	case <-m.ctx.Done():
		return nil, nil, fmt.Errorf("gang %s: member %d has left", req.Gang, req.To)
	case <-t.C:
		return nil, nil, fmt.Errorf("gang %s: member %d has not started", req.Gang, req.To)
	}
	m.mu.Lock()
	job := m.job
	m.mu.Unlock()
	return m, job, nil
}
