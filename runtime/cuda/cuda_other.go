//go:build !cgo || !linux

package cuda

import (
	"fmt"
	"time"
)

// Load reports that this build has no CUDA path (no cgo, or not Linux).
func Load() error { return fmt.Errorf("%w: built without cgo on linux", ErrUnavailable) }

// Devices is Load's error.
func Devices() ([]Device, error) { return nil, Load() }

// Session is never opened in this build.
type Session struct{ Device Device }

// Open is Load's error.
func Open(string, int) (*Session, error) { return nil, Load() }

// MatPow is never reached in this build.
func (s *Session) MatPow(uint64, int) ([]uint32, time.Duration, error) { return nil, 0, Load() }

// Close does nothing.
func (s *Session) Close() {}

// Scrub is Load's error.
func Scrub(string) (uint64, uint64, error) { return 0, 0, Load() }
