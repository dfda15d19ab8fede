//go:build !linux

package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
)

// gangNS exists only on linux (see gang_linux.go).
type gangNS struct{}

func newGangNS(id string, _ *GangNet) (*gangNS, error) {
	return nil, fmt.Errorf("runtime: job %s: gang networks exist only on linux", id)
}

func (*gangNS) nsFile() *os.File { return nil }

func (*gangNS) close() {}

// DialGang needs linux.
func (h *processHandle) DialGang(context.Context, netip.Addr, int) (net.Conn, error) {
	return nil, errors.New("runtime: gang networks exist only on linux")
}

// ProbeGangNetworks: gang networks need linux.
func ProbeGangNetworks() error { return errors.New("runtime: gang networks exist only on linux") }
