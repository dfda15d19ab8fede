package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

var statePrefix = []byte("state/") // + namespace + 0x00 + key

// Limits on state names.
const (
	MaxNamespaceLen = 255
	MaxKeyLen       = 1 << 10
)

// State is a namespace of the daemon's persistent state: JSON values under
// string keys. Its keys never collide with the ledger's or another
// namespace's. A State is a cheap handle; all its methods are safe for
// concurrent use, and every write is synchronous.
type State struct {
	db     *DB
	ns     string
	prefix []byte
	err    error // invalid namespace
}

// State returns the state store for namespace, which must be non-empty, at
// most MaxNamespaceLen bytes and free of NUL bytes (an invalid namespace
// makes every method of the returned State fail).
func (db *DB) State(namespace string) *State {
	s := &State{db: db, ns: namespace}
	switch {
	case namespace == "":
		s.err = errors.New("ledger: empty state namespace")
	case len(namespace) > MaxNamespaceLen:
		s.err = fmt.Errorf("ledger: state namespace is %d bytes, limit %d", len(namespace), MaxNamespaceLen)
	case strings.IndexByte(namespace, 0) >= 0:
		s.err = fmt.Errorf("ledger: state namespace %q contains a NUL byte", namespace)
	}
	s.prefix = make([]byte, 0, len(statePrefix)+len(namespace)+1)
	s.prefix = append(append(append(s.prefix, statePrefix...), namespace...), 0)
	return s
}

func (s *State) key(k string) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if k == "" {
		return nil, fmt.Errorf("ledger: state %s: empty key", s.ns)
	}
	if len(k) > MaxKeyLen {
		return nil, fmt.Errorf("ledger: state %s: key is %d bytes, limit %d", s.ns, len(k), MaxKeyLen)
	}
	b := make([]byte, 0, len(s.prefix)+len(k))
	return append(append(b, s.prefix...), k...), nil
}

// Put stores v, JSON-encoded, under key. Below the free-space floor it
// fails with ErrDiskFull (see WithMinFreeSpace).
func (s *State) Put(key string, v any) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("ledger: state %s: encode %q: %w", s.ns, key, err)
	}
	done, err := s.db.acquire()
	if err != nil {
		return err
	}
	defer done()
	if err := s.db.checkWrite(); err != nil {
		return err
	}
	if err := s.db.bdb.Update(func(txn *badger.Txn) error { return txn.Set(k, raw) }); err != nil {
		return fmt.Errorf("ledger: state %s: put %q: %w", s.ns, key, err)
	}
	s.db.wrote()
	return nil
}

// Get decodes the value under key into v. It reports false, and leaves v
// alone, when there is no such key.
func (s *State) Get(key string, v any) (bool, error) {
	k, err := s.key(key)
	if err != nil {
		return false, err
	}
	done, err := s.db.acquire()
	if err != nil {
		return false, err
	}
	defer done()
	found := false
	err = s.db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(raw []byte) error {
			if err := json.Unmarshal(raw, v); err != nil {
				return fmt.Errorf("decode: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("ledger: state %s: get %q: %w", s.ns, key, err)
	}
	return found, nil
}

// Delete removes key. Deleting a missing key is not an error.
func (s *State) Delete(key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	done, err := s.db.acquire()
	if err != nil {
		return err
	}
	defer done()
	if err := s.db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(k) }); err != nil {
		return fmt.Errorf("ledger: state %s: delete %q: %w", s.ns, key, err)
	}
	s.db.wrote()
	return nil
}

// List calls fn for every key of the namespace, in byte order of the keys,
// with the raw JSON value (which fn may keep). It reads one consistent
// snapshot. It stops at, and returns, the first error fn returns. fn must
// not Close the DB.
func (s *State) List(fn func(key string, raw []byte) error) error {
	if s.err != nil {
		return s.err
	}
	done, err := s.db.acquire()
	if err != nil {
		return err
	}
	defer done()
	var fnErr error
	err = s.db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.prefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			raw, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(string(item.Key()[len(s.prefix):]), raw); err != nil {
				fnErr = err
				return err
			}
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("ledger: state %s: list: %w", s.ns, err)
	}
	return nil
}
