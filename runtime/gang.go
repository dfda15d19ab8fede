package runtime

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// GangNet is a gang job's private network as the runtime sets it up: the
// job's own network namespace, prepared before its first instruction,
// where every member of the gang has a stable loopback address
// (Addrs[rank]) and a TCP connection the job opens to another member's
// address, on any port, is captured and handed to Accept, which carries
// it to that member (node/gangnet does, over libp2p). The job has no
// other network. Only process jobs in a sandbox of their own (root) can
// have one.
type GangNet struct {
	// Rank is this member's rank, an index into Addrs.
	Rank int
	// Addrs are the members' addresses by rank, each in 127.0.0.0/8 and
	// none twice: loopback addresses need no interface set up, and a job
	// can listen on its own (or on 0.0.0.0).
	Addrs []netip.Addr
	// MasterPort is where rank 0's rendezvous listens (MASTER_PORT).
	MasterPort int
	// GPUsPerMember is what torchrun starts per member (PET_NPROC_PER_NODE);
	// 0 means the job's own number of GPUs (at least 1).
	GPUsPerMember int
	// Accept takes each captured connection and the member address and
	// port the job dialed (always another member's); it owns conn.
	Accept func(conn net.Conn, dst netip.AddrPort)
}

// GangDialer is a started gang job into whose network another member's
// connection is delivered.
type GangDialer interface {
	// DialGang connects to the job's own member address at port, from
	// the address of the member that opened the connection (from), as the
	// job sees it.
	DialGang(ctx context.Context, from netip.Addr, port int) (net.Conn, error)
}

// GangNetworks reports why e cannot run a gang member's job, or nil when
// it can (given iptables-restore, which ProbeGangNetworks checks): only a
// process executor whose jobs get a network namespace of their own can.
func GangNetworks(e Executor) error {
	switch x := e.(type) {
	case *ProcessExecutor:
		return x.gangNetworks()
	case *AutoExecutor:
		return x.Process().gangNetworks()
	}
	return fmt.Errorf("runtime: the %s executor runs no gang members (process jobs only)", e.Name())
}

func (e *ProcessExecutor) gangNetworks() error {
	if e.sb == nil || e.sb.network {
		return fmt.Errorf("runtime: a gang job needs a network namespace of its own, which this provider does not give jobs (%s)", e.Limits())
	}
	return nil
}

// check validates g for job id.
func (g *GangNet) check(id string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: job %s: gang network: %s", ErrInvalidSpec, id, fmt.Sprintf(format, a...))
	}
	if len(g.Addrs) < 2 {
		return bad("%d members (a gang has at least 2)", len(g.Addrs))
	}
	if g.Rank < 0 || g.Rank >= len(g.Addrs) {
		return bad("rank %d of %d members", g.Rank, len(g.Addrs))
	}
	seen := make(map[netip.Addr]bool, len(g.Addrs))
	for r, a := range g.Addrs {
		if !a.Is4() || !a.IsLoopback() || a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) {
			return bad("member %d's address %s is not a loopback address other than 127.0.0.1", r, a)
		}
		if seen[a] {
			return bad("address %s given to two members", a)
		}
		seen[a] = true
	}
	if g.MasterPort < 1 || g.MasterPort > 65535 {
		return bad("master port %d", g.MasterPort)
	}
	if g.GPUsPerMember < 0 {
		return bad("%d GPUs per member", g.GPUsPerMember)
	}
	if g.Accept == nil {
		return bad("nothing accepts its connections")
	}
	return nil
}

// peers are the other members' addresses: those whose connections are
// captured.
func (g *GangNet) peers() []netip.Addr {
	out := make([]netip.Addr, 0, len(g.Addrs)-1)
	for r, a := range g.Addrs {
		if r != g.Rank {
			out = append(out, a)
		}
	}
	return out
}

// isPeer reports whether a is another member's address.
func (g *GangNet) isPeer(a netip.Addr) bool {
	for r, m := range g.Addrs {
		if r != g.Rank && m == a {
			return true
		}
	}
	return false
}

// Gang environment: what torchrun's env:// rendezvous reads, for one
// process per member (a job that runs torchrun gets its PET_ options
// too, so `torchrun train.py` needs no flags), every member's address, and
// the interface NCCL and Gloo take their address from.
const (
	EnvGangPeers = "GPUMESH_PEERS"
)

// env is the gang's environment for a job with gpus GPUs.
func (g *GangNet) env(gpus int) map[string]string {
	addrs := make([]string, len(g.Addrs))
	for i, a := range g.Addrs {
		addrs[i] = a.String()
	}
	nproc := g.GPUsPerMember
	if nproc == 0 {
		nproc = max(gpus, 1)
	}
	master := g.Addrs[0].String()
	port := strconv.Itoa(g.MasterPort)
	k := strconv.Itoa(len(g.Addrs))
	rank := strconv.Itoa(g.Rank)
	return map[string]string{
		"MASTER_ADDR":        master,
		"MASTER_PORT":        port,
		"WORLD_SIZE":         k,
		"RANK":               rank,
		"LOCAL_RANK":         "0",
		"LOCAL_WORLD_SIZE":   "1",
		"PET_NNODES":         k,
		"PET_NODE_RANK":      rank,
		"PET_NPROC_PER_NODE": strconv.Itoa(nproc),
		"PET_MASTER_ADDR":    master,
		"PET_MASTER_PORT":    port,
		EnvGangPeers:         strings.Join(addrs, ","),
		// The member's address is lo's first (the job has no other
		// interface): what NCCL and Gloo advertise to their peers.
		"NCCL_SOCKET_IFNAME": "lo",
		"GLOO_SOCKET_IFNAME": "lo",
	}
}
