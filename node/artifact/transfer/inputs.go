package transfer

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/libp2p/go-libp2p/core/peer"
)

// PrepareInputs fetches a job's input artifacts (name → id) from the job's
// owner (origin, addrs its multiaddrs) and any other holder, and lays them
// out read-only under dir: dir/NAME is the file or directory tree. The
// artifacts stay pinned until release is called, which also removes dir.
// A failure (an input no one serves, one that does not fit, an export
// error) releases what was done and is returned: it fails the lease, never
// the daemon. A sealed input is unsealed with its content key in keys
// (given by the job's renter for the lease); one with no key there fails.
func (s *Service) PrepareInputs(ctx context.Context, inputs map[string]string, origin peer.ID, addrs []string, dir string, keys map[string]artifact.Key) (release func(), err error) {
	var unpins []func()
	// cleanup is not the named result: a failing return sets that to nil
	// before the deferred call below runs.
	cleanup := func() {
		for _, u := range unpins {
			u()
		}
		_ = removeTree(dir)
	}
	defer func() {
		if err != nil {
			cleanup()
			release = nil
		}
	}()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("inputs dir: %w", err)
	}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		id := inputs[name]
		unpin, err := s.FetchForJob(ctx, id, origin, addrs)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		unpins = append(unpins, unpin)
		target := filepath.Join(dir, name)
		if err := s.cfg.Store.ExportFor(id, target, artifact.For(sign.ID(origin)), keys); err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
		if err := readOnly(target); err != nil {
			return nil, fmt.Errorf("input %s: %w", name, err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		return nil, fmt.Errorf("inputs dir: %w", err)
	}
	return cleanup, nil
}

// FetchForJob fetches artifact id for a job whose owner (origin, addrs
// its multiaddrs where the caller knows them first-hand; else the
// peerstore or the DHT, see p2p.Node.Resolve) serves it, and pins it until unpin is called. The
// store's copy serves only if the job's owner may read it (Store.MayRead):
// another renter's private artifact is fetched from the origin like any
// other, and so fails unless the origin holds the bytes. The origin
// learns of the lease as the award is confirmed, maybe just after this
// fetch starts, so a failure is retried briefly (not one that does not
// fit the store: ErrFull).
func (s *Service) FetchForJob(ctx context.Context, id string, origin peer.ID, addrs []string) (unpin func(), err error) {
	s.cfg.Net.AddAddrs(origin, addrs)
	s.cfg.Net.Resolve(ctx, origin)
	oi := peer.AddrInfo{ID: origin}
	unpin = s.cfg.Store.Pin(id)
	for attempt := 1; attempt <= 4; attempt++ {
		if _, err = s.Fetch(ctx, id, FetchOptions{Origin: &oi, For: artifact.For(sign.ID(origin))}); err == nil || ctx.Err() != nil || errors.Is(err, artifact.ErrFull) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
	if err != nil {
		unpin()
		return nil, err
	}
	return unpin, nil
}

// readOnly makes a tree readable (and traversable) by anyone, writable by
// no one.
func readOnly(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o444)
		if fi.Mode()&0o111 != 0 {
			mode = 0o555
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return err
	}
	// Directories last, deepest first, so the walk could still enter them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i], 0o555); err != nil {
			return err
		}
	}
	return nil
}

// removeTree deletes a tree made read-only by readOnly.
func removeTree(root string) error {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(root)
}
