package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
)

// Reachability values, as AutoNAT decides them (or as configured).
const (
	ReachabilityAuto    = "auto"
	ReachabilityUnknown = "unknown"
	ReachabilityPublic  = "public"
	ReachabilityPrivate = "private"
)

// RelayLimits bounds what a node running the circuit relay v2 service gives
// away. Zero fields take libp2p's defaults (128 reservations, 16 circuits
// per peer, 1h reservations, 2 min and 128 KiB per relayed connection).
type RelayLimits struct {
	// MaxReservations is the number of peers that may hold a relay slot.
	MaxReservations int `yaml:"max_reservations"`
	// MaxCircuits is the number of relayed connections per peer.
	MaxCircuits int `yaml:"max_circuits"`
	// MaxReservationsPerIP is the number of slots one IP address may hold.
	MaxReservationsPerIP int `yaml:"max_reservations_per_ip"`
	// ReservationTTL is how long a reservation lasts before it is renewed.
	ReservationTTL time.Duration `yaml:"reservation_ttl"`
	// Duration is how long one relayed connection may stay open.
	Duration time.Duration `yaml:"limit_duration"`
	// Data is how many bytes one relayed connection may carry each way.
	Data int64 `yaml:"limit_data"`
}

// Validate rejects negative limits.
func (l RelayLimits) Validate() error {
	switch {
	case l.MaxReservations < 0:
		return fmt.Errorf("max_reservations must be >= 0, got %d", l.MaxReservations)
	case l.MaxCircuits < 0:
		return fmt.Errorf("max_circuits must be >= 0, got %d", l.MaxCircuits)
	case l.MaxReservationsPerIP < 0:
		return fmt.Errorf("max_reservations_per_ip must be >= 0, got %d", l.MaxReservationsPerIP)
	case l.ReservationTTL < 0:
		return fmt.Errorf("reservation_ttl must be >= 0, got %s", l.ReservationTTL)
	case l.Duration < 0:
		return fmt.Errorf("limit_duration must be >= 0, got %s", l.Duration)
	case l.Data < 0:
		return fmt.Errorf("limit_data must be >= 0, got %d", l.Data)
	}
	return nil
}

// resources maps the limits onto libp2p's relay resources.
func (l RelayLimits) resources() relay.Resources {
	rc := relay.DefaultResources()
	if l.MaxReservations > 0 {
		rc.MaxReservations = l.MaxReservations
	}
	if l.MaxCircuits > 0 {
		rc.MaxCircuits = l.MaxCircuits
	}
	if l.MaxReservationsPerIP > 0 {
		rc.MaxReservationsPerIP = l.MaxReservationsPerIP
	}
	if l.ReservationTTL > 0 {
		rc.ReservationTTL = l.ReservationTTL
	}
	if l.Duration > 0 {
		rc.Limit.Duration = l.Duration
	}
	if l.Data > 0 {
		rc.Limit.Data = l.Data
	}
	return rc
}

// ValidateReachability accepts "", auto, public and private.
func ValidateReachability(s string) error {
	switch s {
	case "", ReachabilityAuto, ReachabilityPublic, ReachabilityPrivate:
		return nil
	}
	return fmt.Errorf("reachability must be auto, public or private, got %q", s)
}

func reachabilityName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return ReachabilityPublic
	case network.ReachabilityPrivate:
		return ReachabilityPrivate
	}
	return ReachabilityUnknown
}

// Reachability is the node's reachability from the rest of the network as
// AutoNAT last decided it (or as configured): public, private or unknown.
func (n *Node) Reachability() string {
	n.natMu.Lock()
	defer n.natMu.Unlock()
	return n.reach
}

// reachabilityChanged is closed at the next change of reachability.
func (n *Node) reachabilityChanged() <-chan struct{} { return n.reachChanged.Wait() }

// watchReachability logs every change of reachability and remembers it.
func (n *Node) watchReachability(ctx context.Context) error {
	sub, err := n.raw.EventBus().Subscribe(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return fmt.Errorf("p2p: watch reachability: %w", err)
	}
	go func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-sub.Out():
				if !ok {
					return
				}
				r := reachabilityName(ev.(event.EvtLocalReachabilityChanged).Reachability)
				n.natMu.Lock()
				changed := r != n.reach
				n.reach = r
				if changed {
					n.reachChanged.Notify()
				}
				n.natMu.Unlock()
				if changed {
					n.log.Info("reachability decided", "reachability", r)
				}
			}
		}
	}()
	return nil
}

// circuitAddrs are the /p2p-circuit addresses through the static relays this
// node holds a reservation on, sorted.
func (n *Node) circuitAddrs() []ma.Multiaddr {
	n.natMu.Lock()
	defer n.natMu.Unlock()
	var out []ma.Multiaddr
	for _, as := range n.circuits {
		out = append(out, as...)
	}
	slices.SortFunc(out, ma.Multiaddr.Compare)
	return out
}

// addrsFactory is the host's address source: its own addresses plus the
// relay circuits it can be reached through.
func (n *Node) addrsFactory(addrs []ma.Multiaddr) []ma.Multiaddr {
	return append(slices.Clone(addrs), n.circuitAddrs()...)
}

func (n *Node) setCircuits(relay peer.ID, addrs []ma.Multiaddr) {
	n.natMu.Lock()
	defer n.natMu.Unlock()
	if len(addrs) == 0 {
		delete(n.circuits, relay)
		return
	}
	n.circuits[relay] = addrs
}

// keepReservation holds a slot on one static relay for as long as the node
// is not known to be publicly reachable, renewing it before it expires.
// first is closed after the first attempt, whatever its outcome.
func (n *Node) keepReservation(ctx context.Context, ai peer.AddrInfo, first chan<- struct{}) {
	once := sync.OnceFunc(func() { close(first) })
	defer once()
	backoff := 5 * time.Second
	for ctx.Err() == nil {
		changed := n.reachabilityChanged()
		if n.Reachability() == ReachabilityPublic {
			n.setCircuits(ai.ID, nil)
			once()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-time.After(time.Minute):
			}
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		rsvp, err := client.Reserve(rctx, n.raw, ai)
		cancel()
		if err != nil {
			n.setCircuits(ai.ID, nil)
			if ctx.Err() != nil {
				return
			}
			var re client.ReservationError
			if errors.As(err, &re) && re.Status != pbv2.Status_CONNECTION_FAILED {
				n.log.Warn("relay refused reservation", "relay", ai.ID, "status", re.Status.String(), "err", err)
			} else {
				n.log.Warn("relay reservation failed", "relay", ai.ID, "err", err)
			}
			// The first attempt is over once its outcome is logged: a
			// caller of Bootstrap (waitReservations) reads the log after
			// it (the refusal was seen missing when this came first).
			once()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Minute)
			continue
		}
		backoff = 5 * time.Second
		circuit := ma.StringCast("/p2p/" + ai.ID.String() + "/p2p-circuit")
		var addrs []ma.Multiaddr
		for _, a := range ai.Addrs {
			addrs = append(addrs, a.Encapsulate(circuit))
		}
		n.setCircuits(ai.ID, addrs)
		n.log.Info("relay reservation", "relay", ai.ID, "expires", rsvp.Expiration.Format(time.RFC3339),
			"limit_duration", rsvp.LimitDuration, "limit_data", rsvp.LimitData, "addrs", fmt.Sprint(addrs))
		once() // as for a failed attempt: over once its outcome is logged
		renew := time.Until(rsvp.Expiration) / 2
		if renew < time.Second {
			renew = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(renew):
		case <-changed:
		}
	}
}

// waitReservations waits, bounded by ctx, until every static relay has had
// its first reservation attempt, so that addresses read afterwards include
// the circuits that were granted.
func (n *Node) waitReservations(ctx context.Context) {
	for _, ch := range n.firstReserve {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// relayPeerSource offers auto-relay the DHT's routing-table peers as relay
// candidates (auto-relay itself keeps those that run the relay service).
func (n *Node) relayPeerSource(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo, num)
	defer close(out)
	n.natMu.Lock()
	kad := n.DHT
	n.natMu.Unlock()
	if kad == nil {
		return out
	}
	for _, p := range kad.RoutingTable().ListPeers() {
		if len(out) == num {
			break
		}
		if addrs := n.raw.Peerstore().Addrs(p); len(addrs) > 0 {
			out <- peer.AddrInfo{ID: p, Addrs: addrs}
		}
	}
	return out
}

// limitedOK is the host the rest of gpumesh opens streams through: its
// streams may run over a relayed (limited) connection, which is all a peer
// behind NAT offers until hole punching upgrades it to a direct one.
type limitedOK struct{ host.Host }

func (h limitedOK) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	return h.Host.NewStream(network.WithAllowLimitedConn(ctx, "gpumesh"), p, pids...)
}
