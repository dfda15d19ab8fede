//go:build linux

package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// gangNS is a gang job's network namespace, made before the job starts so
// that its first connection is already carried: loopback up, a listener
// of the daemon's on 127.0.0.1 (a port the kernel picks, which the job
// cannot have taken), and one nat rule per other member redirecting every
// TCP connection to that member's address there. The original destination
// (SO_ORIGINAL_DST) says which member and port the job dialed. The job's
// uid has no capabilities, so it cannot change the rules; a connection it
// makes to the listener itself has no original destination and is closed.
type gangNS struct {
	id string
	g  *GangNet
	ns *os.File
	ln net.Listener

	closeOnce sync.Once
	served    sync.WaitGroup
}

// iptablesRestore is the program that loads the nat rules (from the
// iptables package: either backend, legacy or nf_tables, does).
const iptablesRestore = "iptables-restore"

// newGangNS prepares job id's network namespace for gang g.
func newGangNS(id string, g *GangNet) (*gangNS, error) {
	restore, err := exec.LookPath(iptablesRestore)
	if err != nil {
		return nil, fmt.Errorf("runtime: job %s: a gang network needs %s (package iptables): %w", id, iptablesRestore, err)
	}
	type result struct {
		ns  *os.File
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	// Exits locked: the runtime discards the thread with its namespace.
	onSpareThread(func() {
		fail := func(err error) { ch <- result{err: fmt.Errorf("runtime: job %s: gang network: %w", id, err)} }
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			fail(fmt.Errorf("new network namespace: %w", err))
			return
		}
		if err := loopbackUp(); err != nil {
			fail(err)
			return
		}
		if err := ownAddressFirst(g.Addrs[g.Rank]); err != nil {
			fail(err)
			return
		}
		// Made on this thread, so in the new namespace.
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			fail(err)
			return
		}
		port := ln.Addr().(*net.TCPAddr).Port
		var rules strings.Builder
		rules.WriteString("*nat\n")
		for _, a := range g.peers() {
			fmt.Fprintf(&rules, "-A OUTPUT -p tcp -d %s/32 -j REDIRECT --to-ports %d\n", a, port)
		}
		rules.WriteString("COMMIT\n")
		// A child of this thread: it runs in the new namespace.
		cmd := exec.Command(restore, "--wait")
		cmd.Stdin = strings.NewReader(rules.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			ln.Close()
			fail(fmt.Errorf("%s: %w: %s", iptablesRestore, err, strings.TrimSpace(string(out))))
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ln.Close()
			fail(err)
			return
		}
		ch <- result{ns: ns, ln: ln}
	})
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	n := &gangNS{id: id, g: g, ns: r.ns, ln: r.ln}
	n.served.Add(1)
	go n.serve()
	return n, nil
}

// ownAddressFirst makes the member's own address lo's primary one, ahead
// of 127.0.0.1 (which stays): connections to the other members come from
// it, and what picks an interface's address to advertise to its peers
// (NCCL_SOCKET_IFNAME=lo, GLOO_SOCKET_IFNAME=lo) picks it.
func ownAddressFirst(own netip.Addr) error {
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if err := loAddr(unix.RTM_DELADDR, 0, lo); err != nil {
		return fmt.Errorf("remove 127.0.0.1 from lo: %w", err)
	}
	if err := loAddr(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, own); err != nil {
		return fmt.Errorf("add %s to lo: %w", own, err)
	}
	if err := loAddr(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, lo); err != nil {
		return fmt.Errorf("add 127.0.0.1 to lo: %w", err)
	}
	return nil
}

// loAddr adds (RTM_NEWADDR) or removes (RTM_DELADDR) a/8 on lo in the
// calling thread's network namespace, over rtnetlink.
func loAddr(cmd, flags uint16, a netip.Addr) error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ip := a.As4()
	const hdr, ifa, attr = unix.SizeofNlMsghdr, unix.SizeofIfAddrmsg, unix.SizeofRtAttr + 4
	b := make([]byte, hdr+ifa+2*attr)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], cmd)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	ne.PutUint32(b[8:], 1) // sequence
	b[hdr] = unix.AF_INET
	b[hdr+1] = 8 // prefix length
	b[hdr+3] = unix.RT_SCOPE_HOST
	ne.PutUint32(b[hdr+4:], uint32(lo.Index))
	for i, typ := range []uint16{unix.IFA_LOCAL, unix.IFA_ADDRESS} {
		o := hdr + ifa + i*attr
		ne.PutUint16(b[o:], attr)
		ne.PutUint16(b[o+2:], typ)
		copy(b[o+4:], ip[:])
	}
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	ack := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, ack, 0)
	if err != nil {
		return err
	}
	if n < hdr+4 || ne.Uint16(ack[4:]) != unix.NLMSG_ERROR {
		return errors.New("no netlink acknowledgement")
	}
	if errno := int32(ne.Uint32(ack[hdr:])); errno != 0 {
		return unix.Errno(-errno)
	}
	return nil
}

// nsFile is the namespace the job's spawn enters.
func (n *gangNS) nsFile() *os.File { return n.ns }

// serve hands each captured connection to another member to the gang's
// Accept, until close.
func (n *gangNS) serve() {
	defer n.served.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		dst, err := originalDst(c)
		if err != nil || !n.g.isPeer(dst.Addr()) {
			c.Close() // a dial to the listener itself
			continue
		}
		go n.g.Accept(c, dst)
	}
}

// close stops capturing (the job has ended); connections already handed
// to Accept are its own.
func (n *gangNS) close() {
	n.closeOnce.Do(func() {
		n.ln.Close()
		n.served.Wait()
		n.ns.Close()
	})
}

// dial connects to the job's own member address at port from member
// address from, inside the namespace.
func (n *gangNS) dial(ctx context.Context, from netip.Addr, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("runtime: job %s: invalid port %d", n.id, port)
	}
	if !n.g.isPeer(from) {
		return nil, fmt.Errorf("runtime: job %s: %s is no other member's address", n.id, from)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
	addr := net.JoinHostPort(n.g.Addrs[n.g.Rank].String(), strconv.Itoa(port))
	return dialIn(ctx, n.id, n.ns, d, addr)
}

// originalDst is where a redirected connection was headed.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var dst netip.AddrPort
	var gerr error
	err = sc.Control(func(fd uintptr) {
		// A sockaddr_in: the 16 bytes an IPv6 mreq holds.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			gerr = err
			return
		}
		b := m.Multiaddr
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
	})
	if err == nil {
		err = gerr
	}
	return dst, err
}

// DialGang connects another member's connection to the job (GangDialer).
func (h *processHandle) DialGang(ctx context.Context, from netip.Addr, port int) (net.Conn, error) {
	if h.gang == nil {
		return nil, fmt.Errorf("runtime: job %s is not a gang member", h.spec.ID)
	}
	select {
	case <-h.exited:
		return nil, fmt.Errorf("runtime: job %s has ended", h.spec.ID)
	default:
	}
	return h.gang.dial(ctx, from, port)
}

// ProbeGangNetworks reports whether this host can give a gang member's
// job its network (a network namespace of its own with nat rules loaded
// by iptables-restore), by preparing one for a throwaway gang. It needs
// root.
func ProbeGangNetworks() error {
	g := &GangNet{Addrs: []netip.Addr{netip.AddrFrom4([4]byte{127, 77, 0, 1}), netip.AddrFrom4([4]byte{127, 77, 0, 2})},
		MasterPort: 1, Accept: func(c net.Conn, _ netip.AddrPort) { c.Close() }}
	n, err := newGangNS("probe", g)
	if err != nil {
		return err
	}
	n.close()
	return nil
}
