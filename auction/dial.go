package auction

import (
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxDialHints bounds how many of a call's owner addresses a provider dials.
const MaxDialHints = 8

// DialHints is the rule for the addresses a call names for its owner
// (Job.OwnerAddrs), which anyone can fill: it keeps only well-formed
// multiaddrs that end in /p2p/<owner> or have no /p2p part (then /p2p/<owner>
// is appended), drops unspecified (0.0.0.0, ::) and empty transport
// addresses and duplicates, and keeps at most MaxDialHints. A provider
// passes only these to Transport.SendBid, so a call cannot make it dial a
// third party's peer id or flood it with addresses.
func DialHints(owner peer.ID, addrs []string) []string {
	if owner == "" {
		return nil
	}
	suffix, err := ma.NewComponent("p2p", owner.String())
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range addrs {
		if len(out) == MaxDialHints {
			break
		}
		m, err := ma.NewMultiaddr(s)
		if err != nil || len(m) == 0 {
			continue
		}
		if _, err := m.ValueForProtocol(ma.P_P2P); err == nil {
			// It names a peer: only the owner, and only at the end.
			if last := m[len(m)-1]; last.Protocol().Code != ma.P_P2P || last.Value() != owner.String() {
				continue
			}
			m = m[:len(m)-1]
		}
		if len(m) == 0 || manet.IsIPUnspecified(m) {
			continue
		}
		if _, err := m.ValueForProtocol(ma.P_P2P); err == nil && !hasCircuit(m) {
			// Another peer before the owner is only meaningful as a relay.
			continue
		}
		full := m.Encapsulate(suffix).String()
		if !seen[full] {
			seen[full] = true
			out = append(out, full)
		}
	}
	return out
}

func hasCircuit(m ma.Multiaddr) bool {
	_, err := m.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
