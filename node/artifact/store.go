// Package artifact is gpumesh's content-addressed data: a file or directory
// tree cut into 1 MiB chunks, each named by its SHA-256, described by a
// manifest whose SHA-256 is the artifact's id. The Store keeps artifacts
// under the data dir within a size budget (least recently used first out,
// never one pinned by a running job); the transfer protocol (transfer.go)
// serves manifests and chunks to authorised peers and fetches them from
// every peer that holds them.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpumesh/gpumesh/attest/sign"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
)

// ChunkSize is the size of every chunk but a file's last.
const ChunkSize = 1 << 20

// MaxManifestEntries bounds the files of one artifact.
const MaxManifestEntries = 100000

// ErrNotFound is returned for an artifact or chunk the store does not hold.
var ErrNotFound = errors.New("artifact not found")

// ErrFull is returned when a write does not fit the budget and nothing
// can be evicted.
var ErrFull = errors.New("artifact store full")

// Entry is one file of an artifact.
type Entry struct {
	// Path is slash-separated and relative to the artifact's root.
	Path   string   `json:"path"`
	Size   int64    `json:"size"`
	Exec   bool     `json:"exec,omitempty"`
	Chunks []string `json:"chunks"` // hex SHA-256 of each chunk, in order
}

// Manifest describes an artifact: a single file (Dir false, one entry) or
// a directory tree. Its id is the hex SHA-256 of its canonical JSON.
type Manifest struct {
	Name    string  `json:"name"`
	Dir     bool    `json:"dir,omitempty"`
	Size    int64   `json:"size"`
	Entries []Entry `json:"entries"`
	// Sealed says the artifact's one file is ciphertext (seal.go): its
	// name, files and bytes are readable only with its key.
	Sealed bool `json:"sealed,omitempty"`
}

// ID is the artifact's id.
func (m *Manifest) ID() string {
	b, _ := json.Marshal(m)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Chunks returns the distinct chunks of the artifact with their sizes, in
// order of first appearance.
func (m *Manifest) Chunks() []Chunk {
	seen := map[string]bool{}
	var out []Chunk
	for _, e := range m.Entries {
		for i, h := range e.Chunks {
			if seen[h] {
				continue
			}
			seen[h] = true
			out = append(out, Chunk{Hash: h, Size: chunkLen(e.Size, i)})
		}
	}
	return out
}

// Chunk names one chunk and its size.
type Chunk struct {
	Hash string
	Size int64
}

func chunkLen(fileSize int64, i int) int64 {
	rest := fileSize - int64(i)*ChunkSize
	if rest > ChunkSize {
		return ChunkSize
	}
	return rest
}

// MaxNameLen bounds an artifact's name and each path component.
const MaxNameLen = 255

// Validate checks a manifest received from a peer: a printable name, safe
// relative paths (no ".", "..", absolute or unclean paths, no control
// characters, no file where another entry needs a directory), sizes
// matching the chunk lists, well-formed (lower-case hex) hashes.
func (m *Manifest) Validate() error {
	if len(m.Entries) == 0 || len(m.Entries) > MaxManifestEntries {
		return fmt.Errorf("artifact manifest has %d entries", len(m.Entries))
	}
	if !m.Dir && len(m.Entries) != 1 {
		return errors.New("artifact manifest: a file artifact has exactly one entry")
	}
	if m.Sealed && m.Dir {
		return errors.New("artifact manifest: a sealed artifact is a single file")
	}
	if err := printable(m.Name); err != nil {
		return fmt.Errorf("artifact manifest: name %q: %v", m.Name, err)
	}
	var total int64
	files := make(map[string]bool, len(m.Entries))
	for _, e := range m.Entries {
		if err := safePath(e.Path); err != nil {
			return fmt.Errorf("artifact manifest: unsafe path %q: %v", e.Path, err)
		}
		if files[e.Path] {
			return fmt.Errorf("artifact manifest: duplicate path %q", e.Path)
		}
		files[e.Path] = true
		if e.Size < 0 || int64(len(e.Chunks)) != (e.Size+ChunkSize-1)/ChunkSize {
			return fmt.Errorf("artifact manifest: %q: %d chunks for %d bytes", e.Path, len(e.Chunks), e.Size)
		}
		for _, h := range e.Chunks {
			if !validHash(h) {
				return fmt.Errorf("artifact manifest: %q: bad chunk hash %q", e.Path, h)
			}
		}
		total += e.Size
	}
	// A file may not stand where another entry needs a directory.
	for _, e := range m.Entries {
		for d := path.Dir(e.Path); d != "."; d = path.Dir(d) {
			if files[d] {
				return fmt.Errorf("artifact manifest: %q is a file and the directory of %q", d, e.Path)
			}
		}
	}
	if total != m.Size {
		return fmt.Errorf("artifact manifest: size %d, entries sum to %d", m.Size, total)
	}
	return nil
}

// safePath checks an entry's path: relative, clean, every component a
// printable name other than "." and "..".
func safePath(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case path.IsAbs(p):
		return errors.New("absolute")
	case path.Clean(p) != p:
		return errors.New("not clean")
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return fmt.Errorf("component %q", c)
		}
		if err := printable(c); err != nil {
			return err
		}
	}
	return nil
}

// printable checks a name: valid UTF-8, at most MaxNameLen bytes, no
// control characters.
func printable(s string) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("longer than %d bytes", MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("not UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U", r)
		}
	}
	return nil
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DecodeManifest decodes the manifest bytes a peer served for artifact id:
// they must hash to id and pass Validate.
func DecodeManifest(b []byte, id string) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("bad artifact manifest: %v", err)
	}
	if m.ID() != id {
		return Manifest{}, errors.New("served a manifest that does not match the id")
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// ValidID reports whether s is shaped like an artifact id.
func ValidID(s string) bool { return terms.ValidArtifactID(s) }

// Info is what the store knows of one artifact.
type Info struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Files    int       `json:"files"`
	Complete bool      `json:"complete"`
	Private  bool      `json:"private"`
	Sealed   bool      `json:"sealed,omitempty"`
	Owner    string    `json:"owner,omitempty"` // peer that published it; "" for our own
	Shares   []string  `json:"shares,omitempty"`
	Added    time.Time `json:"added"`
	LastUsed time.Time `json:"last_used"`
	Pins     int       `json:"pins,omitempty"`
}

// FetchResult says how a fetch into the store went (the transfer
// service's Fetch).
type FetchResult struct {
	ID   string `json:"id"`
	Size int64  `json:"size"`
	// Fetched is the bytes transferred by this fetch (chunks already held
	// were skipped).
	Fetched int64 `json:"fetched"`
	// FromPeer is the bytes each peer served.
	FromPeer map[string]int64 `json:"from_peer,omitempty"`
	// BadPeers are the peers dropped for serving a bad chunk.
	BadPeers []string `json:"bad_peers,omitempty"`
}

type record struct {
	Manifest Manifest `json:"manifest"`
	Complete bool     `json:"complete"`
	Private  bool     `json:"private"`
	Owner    string   `json:"owner,omitempty"`
	// Owners are further owners of a private artifact held for a peer:
	// peers that published the same bytes and served us every one.
	Owners   []string  `json:"owners,omitempty"`
	Shares   []string  `json:"shares,omitempty"`
	Added    time.Time `json:"added"`
	LastUsed time.Time `json:"last_used"`
	// Key is a sealed artifact's content key, where this node holds it:
	// for its own, or one it was given (SetKey). Never served.
	Key *Key `json:"key,omitempty"`
	// Label is the name our own sealed artifact was added under (its
	// manifest's is only "sealed"), shown as its Info.Name. Never served.
	Label string `json:"label,omitempty"`
}

// Store holds artifacts under a directory within a byte budget.
type Store struct {
	dir    string
	budget int64
	now    func() time.Time

	mu   sync.Mutex
	recs map[string]*record
	pins map[string]int
	// changed is notified at each pin, unpin or completion (Changed).
	changed broadcast.Signal
	chunks  map[string]int64 // chunk hash → size on disk
	used    int64
	// pending counts bytes reserved by chunk writes under way.
	pending int64
	// brought is, per reader (Reader.key), the chunks a fetch for it
	// received and verified: held for that reader even before the
	// artifact is complete (a resumed fetch skips them).
	brought map[string]map[string]bool
	// self and lease feed the access rule (access.go).
	self  sign.ID
	lease func(id string, from sign.ID) bool
}

// Open opens (creating) a store in dir holding at most budget bytes of
// chunks (0 means unlimited).
func Open(dir string, budget int64) (*Store, error) {
	s := &Store{dir: dir, budget: budget, now: time.Now, recs: map[string]*record{}, pins: map[string]int{}, chunks: map[string]int64{},
		brought: map[string]map[string]bool{}}
	for _, d := range []string{s.chunkRoot(), s.metaDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("artifact store: %w", err)
		}
	}
	metas, err := os.ReadDir(s.metaDir())
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	for _, m := range metas {
		id, ok := strings.CutSuffix(m.Name(), ".json")
		if !ok || !ValidID(id) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.metaDir(), m.Name()))
		if err != nil {
			return nil, fmt.Errorf("artifact store: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Manifest.ID() != id {
			// A torn or foreign record: forget it (its chunks are
			// reclaimed below when nothing else uses them).
			_ = os.Remove(filepath.Join(s.metaDir(), m.Name()))
			continue
		}
		s.recs[id] = &r
	}
	err = filepath.WalkDir(s.chunkRoot(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if strings.HasSuffix(name, ".tmp") || !validHash(name) {
			_ = os.Remove(p)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		s.chunks[name] = fi.Size()
		s.used += fi.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("artifact store: %w", err)
	}
	s.mu.Lock()
	s.gcLocked()
	s.mu.Unlock()
	return s, nil
}

func (s *Store) chunkRoot() string { return filepath.Join(s.dir, "chunks") }
func (s *Store) metaDir() string   { return filepath.Join(s.dir, "meta") }
func (s *Store) chunkPath(h string) string {
	return filepath.Join(s.chunkRoot(), h[:2], h)
}

// Budget returns the store's budget and the bytes it uses.
func (s *Store) Budget() (budget, used int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budget, s.used
}

func (s *Store) saveLocked(id string) error {
	r := s.recs[id]
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := filepath.Join(s.metaDir(), id+".json")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("artifact store: %w", err)
	}
	return os.Rename(tmp, p)
}

// reserveLocked makes room for n more bytes, evicting least recently used
// unpinned artifacts (never keep).
func (s *Store) reserveLocked(n int64, keep string) error {
	if s.budget <= 0 {
		s.pending += n
		return nil
	}
	for s.used+s.pending+n > s.budget {
		victim := ""
		var oldest time.Time
		for id, r := range s.recs {
			if id == keep || s.pins[id] > 0 {
				continue
			}
			if victim == "" || r.LastUsed.Before(oldest) {
				victim, oldest = id, r.LastUsed
			}
		}
		if victim == "" {
			return fmt.Errorf("%w: %d of %d bytes used and %d more needed, and every artifact held is in use (pinned); raise the budget or remove artifacts", ErrFull, s.used+s.pending, s.budget, n)
		}
		s.removeLocked(victim)
	}
	s.pending += n
	return nil
}

// removeLocked forgets an artifact and deletes the chunks no other
// artifact uses.
func (s *Store) removeLocked(id string) {
	delete(s.recs, id)
	_ = os.Remove(filepath.Join(s.metaDir(), id+".json"))
	s.gcLocked()
}

// gcLocked deletes chunks no artifact references.
func (s *Store) gcLocked() {
	live := map[string]bool{}
	for _, r := range s.recs {
		for _, e := range r.Manifest.Entries {
			for _, h := range e.Chunks {
				live[h] = true
			}
		}
	}
	for h, n := range s.chunks {
		if !live[h] {
			if err := os.Remove(s.chunkPath(h)); err == nil || errors.Is(err, os.ErrNotExist) {
				delete(s.chunks, h)
				s.used -= n
				for _, b := range s.brought {
					delete(b, h)
				}
			}
		}
	}
}

// HasChunk reports whether the store holds a chunk.
func (s *Store) HasChunk(h string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.chunks[h]
	return ok
}

// PutChunk verifies data against its hash and stores it for artifact id
// (whose manifest must already be recorded, see Begin), fetched for rd:
// from now on the chunk counts as held for rd (Missing).
func (s *Store) PutChunk(id, h string, data []byte, rd Reader) error {
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != h {
		return fmt.Errorf("chunk %s: content does not match its hash", ShortID(h))
	}
	if err := s.writeChunk(id, h, data); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.chunks[h]; ok {
		b := s.brought[rd.key()]
		if b == nil {
			b = map[string]bool{}
			s.brought[rd.key()] = b
		}
		b[h] = true
	}
	return nil
}

func (s *Store) writeChunk(id, h string, data []byte) error {
	n := int64(len(data))
	s.mu.Lock()
	if _, ok := s.chunks[h]; ok {
		s.mu.Unlock()
		return nil
	}
	if err := s.reserveLocked(n, id); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	err := writeFileAtomic(s.chunkPath(h), data)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending -= n
	if err != nil {
		return fmt.Errorf("artifact store: write chunk: %w", err)
	}
	if _, ok := s.chunks[h]; !ok {
		s.chunks[h] = n
		s.used += n
	}
	return nil
}

func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".*.tmp")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), p)
}

// ReadChunk returns a stored chunk.
func (s *Store) ReadChunk(h string) ([]byte, error) {
	if !validHash(h) {
		return nil, fmt.Errorf("bad chunk hash %q", h)
	}
	b, err := os.ReadFile(s.chunkPath(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chunk %s: %w", ShortID(h), ErrNotFound)
	}
	return b, err
}

// Meta is how an artifact is held: who may fetch it from us.
type Meta struct {
	// Private artifacts are served only to peers the access check admits.
	Private bool
	// Owner is the peer that published the artifact ("" for our own).
	Owner string
}

// Begin records a manifest about to be filled by PutChunk (a fetch), or
// returns the existing record's completeness. The artifact stays
// incomplete until Complete.
func (s *Store) Begin(m Manifest, meta Meta) (id string, complete bool, err error) {
	if err := m.Validate(); err != nil {
		return "", false, err
	}
	id = m.ID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[id]; ok {
		return id, r.Complete, nil
	}
	now := s.now()
	s.recs[id] = &record{Manifest: m, Private: meta.Private, Owner: meta.Owner, Added: now, LastUsed: now}
	return id, false, s.saveLocked(id)
}

// Complete marks an artifact complete once every chunk is stored, after a
// fetch for rd brought what Missing(m, rd) listed. An artifact completed
// now is held as meta says (the source that served the fetch), whoever
// began it: a peer that named the manifest but served no bytes sets no
// terms. One that was complete already (rd proved it holds the bytes too)
// admits rd from now on.
func (s *Store) Complete(id string, rd Reader, meta Meta) error {
	admitted := s.MayRead(id, rd) == nil
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	for _, c := range r.Manifest.Chunks() {
		if _, ok := s.chunks[c.Hash]; !ok {
			return fmt.Errorf("artifact %s: chunk %s missing", ShortID(id), ShortID(c.Hash))
		}
	}
	switch {
	case !r.Complete:
		r.Complete = true
		r.Private, r.Owner, r.Owners, r.Shares = meta.Private, meta.Owner, nil, nil
		s.changed.Notify()
	case !admitted && rd.Peer != "":
		r.Owners = append(r.Owners, rd.Peer.String())
	}
	if b := s.brought[rd.key()]; b != nil {
		for _, c := range r.Manifest.Chunks() {
			delete(b, c.Hash)
		}
		if len(b) == 0 {
			delete(s.brought, rd.key())
		}
	}
	return s.saveLocked(id)
}

// Missing returns the chunks of an artifact not held for rd: every chunk
// but those of complete artifacts rd may read (MayRead) and those a fetch
// for rd brought. A chunk held only for someone else is missing: fetching
// it proves rd has its bytes; it is never taken from another owner's
// artifact, nor is its presence told.
func (s *Store) Missing(m *Manifest, rd Reader) []Chunk {
	want := map[string]bool{}
	for _, c := range m.Chunks() {
		want[c.Hash] = true
	}
	s.mu.Lock()
	held := map[string]bool{}
	for h := range want {
		if _, ok := s.chunks[h]; ok && (rd.local || s.brought[rd.key()][h]) {
			held[h] = true
		}
	}
	// The complete artifacts sharing a chunk still to be accounted for.
	var guards []guard
	var lists [][]string
	for id, r := range s.recs {
		if !r.Complete || !ValidID(id) {
			continue
		}
		var hs []string
		for _, e := range r.Manifest.Entries {
			for _, h := range e.Chunks {
				if _, ok := s.chunks[h]; ok && want[h] && !held[h] {
					hs = append(hs, h)
				}
			}
		}
		if len(hs) > 0 {
			guards, lists = append(guards, guardOf(id, r)), append(lists, hs)
		}
	}
	self, lease := s.self, s.lease
	s.mu.Unlock()
	for i, g := range guards {
		if g.admits(rd, self, lease) {
			for _, h := range lists[i] {
				held[h] = true
			}
		}
	}
	var out []Chunk
	for _, c := range m.Chunks() {
		if !held[c.Hash] {
			out = append(out, c)
		}
	}
	return out
}

// Add imports a file or directory tree as an artifact and returns its id.
func (s *Store) Add(src string, meta Meta) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("artifact add: %w", err)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	m := Manifest{Name: filepath.Base(abs), Dir: fi.IsDir()}
	// Pin a placeholder so chunks written during the import are never
	// evicted by it, and reclaimed if the import fails.
	tmpID := "import:" + abs + ":" + s.now().String()
	defer s.pinImport(tmpID)()
	addFile := func(p, rel string, mode fs.FileMode) error {
		e, err := s.importFile(tmpID, p)
		if err != nil {
			return err
		}
		e.Path, e.Exec = rel, mode&0o111 != 0
		m.Entries = append(m.Entries, e)
		m.Size += e.Size
		return nil
	}
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("artifact add: %s is not a regular file or directory", src)
		}
		err = addFile(abs, m.Name, fi.Mode())
	} else {
		err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				return nil // symlinks and devices are not part of an artifact
			}
			rel, err := filepath.Rel(abs, p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if len(m.Entries) >= MaxManifestEntries {
				return fmt.Errorf("more than %d files", MaxManifestEntries)
			}
			return addFile(p, filepath.ToSlash(rel), info.Mode())
		})
		if err == nil && len(m.Entries) == 0 {
			err = errors.New("directory holds no files")
		}
	}
	if err != nil {
		s.abandonImport(tmpID)
		return "", fmt.Errorf("artifact add %s: %w", src, err)
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	if err := m.Validate(); err != nil {
		// What peers would refuse (a file name with a control character).
		s.abandonImport(tmpID)
		return "", fmt.Errorf("artifact add %s: %w", src, err)
	}
	return s.recordImported(m, meta)
}

// addReader imports what r reads as the one file (named name) of
// manifest m, a file artifact, and returns its id (see Add).
func (s *Store) addReader(m *Manifest, name string, r io.Reader, meta Meta) (string, error) {
	k, err := NewKey()
	if err != nil {
		return "", err
	}
	tmpID := "import:" + hex.EncodeToString(k[:8])
	defer s.pinImport(tmpID)()
	e, err := s.importReader(tmpID, r)
	if err == nil {
		e.Path = name
		m.Entries, m.Size = []Entry{e}, e.Size
		err = m.Validate()
	}
	if err != nil {
		s.abandonImport(tmpID)
		return "", err
	}
	return s.recordImported(*m, meta)
}

func (s *Store) importFile(pinID, p string) (Entry, error) {
	f, err := os.Open(p)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	return s.importReader(pinID, f)
}

// importReader cuts what f reads into chunks of the placeholder record
// pinID (see Add).
func (s *Store) importReader(pinID string, f io.Reader) (Entry, error) {
	var e Entry
	buf := make([]byte, ChunkSize)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			sum := sha256.Sum256(buf[:n])
			h := hex.EncodeToString(sum[:])
			if err := s.writeChunk(pinID, h, buf[:n]); err != nil {
				return Entry{}, err
			}
			e.Chunks = append(e.Chunks, h)
			e.Size += int64(n)
			s.mu.Lock()
			// keep the chunk referenced by the placeholder record
			r := s.recs[pinID]
			r.Manifest.Entries = append(r.Manifest.Entries, Entry{Chunks: []string{h}})
			s.mu.Unlock()
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return e, nil
		}
		if err != nil {
			return Entry{}, err
		}
	}
}

// Manifest returns an artifact's manifest.
func (s *Store) Manifest(id string) (Manifest, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return Manifest{}, false, fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	return r.Manifest, r.Complete, nil
}

// Meta returns how an artifact is held.
func (s *Store) Meta(id string) (Meta, []string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return Meta{}, nil, false
	}
	return Meta{Private: r.Private, Owner: r.Owner}, append([]string(nil), r.Shares...), true
}

// Share lets peer fetch a private artifact of ours (one held for another
// peer is that peer's to grant). A sealed one is not shared: its key
// stays with us.
func (s *Store) Share(id, peerID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	if r.Owner != "" {
		return fmt.Errorf("artifact %s is held for %s: only its owner can share it", ShortID(id), r.Owner)
	}
	if r.Manifest.Sealed {
		return fmt.Errorf("artifact %s is sealed, as every private file or tree is: a peer it is shared with could fetch only ciphertext (its key is not handed over); add the data with --public to share it", ShortID(id))
	}
	for _, p := range r.Shares {
		if p == peerID {
			return nil
		}
	}
	r.Shares = append(r.Shares, peerID)
	return s.saveLocked(id)
}

// List returns every artifact, most recently used first.
func (s *Store) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.recs))
	for id, r := range s.recs {
		if !ValidID(id) {
			continue
		}
		out = append(out, s.infoLocked(id, r))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.After(out[j].LastUsed)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Info returns one artifact's info.
func (s *Store) Info(id string) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok || !ValidID(id) {
		return Info{}, fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	return s.infoLocked(id, r), nil
}

func (s *Store) infoLocked(id string, r *record) Info {
	name := r.Manifest.Name
	if r.Label != "" {
		name = r.Label
	}
	return Info{ID: id, Name: name, Size: r.Manifest.Size, Files: len(r.Manifest.Entries), Complete: r.Complete,
		Private: r.Private, Sealed: r.Manifest.Sealed, Owner: r.Owner, Shares: append([]string(nil), r.Shares...), Added: r.Added, LastUsed: r.LastUsed, Pins: s.pins[id]}
}

// Held returns up to max complete artifacts, most recently used first:
// what a provider advertises it holds (terms.Capability.Artifacts). A
// public one (one an anonymous reader may read) is listed by its id, a
// private one held for a peer by its HeldToken for that peer; our own
// private ones are not listed.
func (s *Store) Held(max int) []string {
	var out []string
	for _, in := range s.List() {
		if len(out) >= max {
			break
		}
		switch {
		case !in.Complete:
		case s.MayRead(in.ID, Reader{}) == nil:
			out = append(out, in.ID)
		case in.Owner != "":
			out = append(out, HeldToken(in.Owner, in.ID))
		}
	}
	return out
}

// CompleteIDs returns up to max ids of complete artifacts, most recently
// used first (what the daemon announces in the DHT, where a record is
// found only by a peer that knows the id).
func (s *Store) CompleteIDs(max int) []string {
	var out []string
	for _, in := range s.List() {
		if len(out) >= max {
			break
		}
		if in.Complete {
			out = append(out, in.ID)
		}
	}
	return out
}

// Fits says whether artifact id of manifest m may come into the store:
// the size of its files (Manifest.Size, every repeat of a chunk counted,
// as a job's copy of it holds them), not only the distinct chunks stored,
// must fit the budget beside the other artifacts in use. A manifest
// repeating one chunk cannot make a few stored bytes many on disk.
func (s *Store) Fits(m *Manifest, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.budget <= 0 {
		return nil
	}
	var pinned int64
	for pid := range s.pins {
		if r, ok := s.recs[pid]; ok && pid != id {
			pinned += r.Manifest.Size
		}
	}
	if room := s.budget - pinned; m.Size > room {
		var distinct int64
		for _, c := range m.Chunks() {
			distinct += c.Size
		}
		return fmt.Errorf("%w: artifact %s has %d bytes of files (%d distinct), more than the %d the budget leaves beside the artifacts in use", ErrFull, ShortID(id), m.Size, distinct, max(room, 0))
	}
	return nil
}

// PinnedBytes is the size of the artifacts pinned now: what eviction
// cannot free.
func (s *Store) PinnedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id := range s.pins {
		if r, ok := s.recs[id]; ok {
			n += r.Manifest.Size
		}
	}
	return n
}

// Remove deletes an artifact; a pinned one is refused.
func (s *Store) Remove(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.recs[id]; !ok || !ValidID(id) {
		return fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	if s.pins[id] > 0 {
		return fmt.Errorf("artifact %s is in use by %d job(s); remove it after they end", ShortID(id), s.pins[id])
	}
	s.removeLocked(id)
	return nil
}

// Pin keeps an artifact from eviction until the returned func is called;
// it also marks the artifact used. Pinning an unknown id is allowed (a
// fetch pins before the manifest arrives).
func (s *Store) Pin(id string) (unpin func()) {
	s.mu.Lock()
	s.pins[id]++
	s.changed.Notify()
	if r, ok := s.recs[id]; ok {
		r.LastUsed = s.now()
		_ = s.saveLocked(id)
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.pins[id]--; s.pins[id] <= 0 {
				delete(s.pins, id)
			}
			s.changed.Notify()
			s.mu.Unlock()
		})
	}
}

// Changed returns a channel closed at the next pin, unpin or artifact
// completed: take it before reading what it waits on, so that no change
// is missed.
func (s *Store) Changed() <-chan struct{} { return s.changed.Wait() }

// Export writes a complete artifact's files under dst for rd (MayRead): a
// file artifact becomes dst itself, a directory artifact's tree is created
// in dst.
func (s *Store) Export(id, dst string, rd Reader) error {
	if err := s.MayRead(id, rd); err != nil {
		return err
	}
	m, complete, err := s.Manifest(id)
	if err != nil {
		return err
	}
	if !complete {
		return fmt.Errorf("artifact %s is incomplete; fetch it first", ShortID(id))
	}
	for _, e := range m.Entries {
		target := dst
		if m.Dir {
			target = filepath.Join(dst, filepath.FromSlash(e.Path))
		}
		if err := s.exportFile(e, target); err != nil {
			return fmt.Errorf("artifact export %s: %w", e.Path, err)
		}
	}
	return nil
}

// Open reads the content of a complete single-file artifact for rd
// (MayRead).
func (s *Store) Open(id string, rd Reader) (io.ReadCloser, error) {
	if err := s.MayRead(id, rd); err != nil {
		return nil, err
	}
	m, complete, err := s.Manifest(id)
	if err != nil {
		return nil, err
	}
	if !complete || m.Dir {
		return nil, fmt.Errorf("artifact %s is not a complete single file", ShortID(id))
	}
	return &chunkReader{s: s, chunks: m.Entries[0].Chunks}, nil
}

// chunkReader reads a file's chunks in order.
type chunkReader struct {
	s      *Store
	chunks []string
	cur    *os.File
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			if len(r.chunks) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(r.s.chunkPath(r.chunks[0]))
			if err != nil {
				return 0, err
			}
			r.cur, r.chunks = f, r.chunks[1:]
		}
		n, err := r.cur.Read(p)
		if err == io.EOF {
			r.cur.Close()
			r.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (r *chunkReader) Close() error {
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}

func (s *Store) exportFile(e Entry, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if e.Exec {
		mode = 0o755
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	for _, h := range e.Chunks {
		c, err := os.Open(s.chunkPath(h))
		if err != nil {
			f.Close()
			return err
		}
		_, err = io.Copy(f, c)
		c.Close()
		if err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// ShortID is an artifact id cut to its first 12 characters, for logs and
// messages.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// pinImport pins a placeholder record for an import under way, so that
// chunks written during it are never evicted by it; the returned func
// drops it (and with it the chunks of an import that failed).
func (s *Store) pinImport(tmpID string) (release func()) {
	s.mu.Lock()
	s.pins[tmpID]++
	s.recs[tmpID] = &record{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.pins, tmpID)
		delete(s.recs, tmpID)
		s.mu.Unlock()
	}
}

// abandonImport drops a failed import's placeholder record and reclaims
// the chunks only it held.
func (s *Store) abandonImport(tmpID string) {
	s.mu.Lock()
	delete(s.recs, tmpID)
	s.gcLocked()
	s.mu.Unlock()
}

// recordImported records the complete artifact m has become (or marks the
// one already held as used and complete) and returns its id.
func (s *Store) recordImported(m Manifest, meta Meta) (string, error) {
	id := m.ID()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if r, ok := s.recs[id]; ok {
		r.LastUsed, r.Complete = now, true
		return id, s.saveLocked(id)
	}
	s.recs[id] = &record{Manifest: m, Complete: true, Private: meta.Private, Owner: meta.Owner, Added: now, LastUsed: now}
	return id, s.saveLocked(id)
}

// ExportFor writes artifact id under dst for rd as Export does, or, a
// sealed one, as Unseal does with its content key in keys: the one way a
// job's inputs and restored checkpoints are laid out.
func (s *Store) ExportFor(id, dst string, rd Reader, keys map[string]Key) error {
	m, _, err := s.Manifest(id)
	if err != nil {
		return err
	}
	if !m.Sealed {
		return s.Export(id, dst, rd)
	}
	k, ok := keys[id]
	if !ok {
		return fmt.Errorf("artifact %s is sealed and its owner gave no key for it", ShortID(id))
	}
	return s.Unseal(id, dst, rd, k)
}
