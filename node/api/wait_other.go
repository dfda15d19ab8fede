//go:build !linux

package api

import (
	"context"
	"time"
)

// pathWatch, off linux, has no file notifications to wait on: it wakes
// every 100 ms.
type pathWatch struct{}

func newPathWatch(string) (*pathWatch, error) { return &pathWatch{}, nil }

func (*pathWatch) arm() error { return nil }

func (*pathWatch) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

func (*pathWatch) close() {}
