package artifact

import (
	"bufio"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/wire"
	"golang.org/x/crypto/chacha20poly1305"
)

// Sealed artifacts: end-to-end encryption of private data. A sealed
// artifact is an ordinary single-file artifact (Manifest.Sealed) whose
// bytes are ciphertext, so that every store, transfer and holder handles
// it as it handles any other: chunks are named by the hash of what is
// stored, and verified without a key. Only a holder of its key reads it.
//
// Its bytes are a random salt, then the plaintext cut into segments of
// sealSegment bytes, each sealed with XChaCha20-Poly1305 under the
// artifact's content key (HKDF of the key it was sealed with and the
// salt, so that one lease key seals many artifacts yet each has a key of
// its own), with the segment's index as nonce and a final flag as
// additional data: a segment changed, moved, dropped or cut off is
// refused. The plaintext is a length-prefixed JSON header (the files, and
// whether the artifact is a directory) followed by the files as an
// outputs bundle (wire.WriteBundle), unpacked with wire.ExtractBundle's
// checks: names and sizes are inside the ciphertext too.

// KeySize is the size of an artifact key.
const KeySize = 32

// Key is a symmetric key: an artifact's content key, a key that seals
// artifacts (a lease key, see Store.LeaseKey), or the random key an owner
// seals its own artifact with. It is written as hex.
type Key [KeySize]byte

// NewKey returns a random key.
func NewKey() (Key, error) {
	var k Key
	_, err := rand.Read(k[:])
	return k, err
}

// MarshalText writes the key as hex.
func (k Key) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(k[:])), nil }

// UnmarshalText reads a hex key.
func (k *Key) UnmarshalText(b []byte) error {
	if len(b) != 2*KeySize {
		return fmt.Errorf("artifact key: %d hex digits, want %d", len(b), 2*KeySize)
	}
	_, err := hex.Decode(k[:], b)
	return err
}

// ParseKey reads a hex key.
func ParseKey(s string) (Key, error) {
	var k Key
	return k, k.UnmarshalText([]byte(s))
}

const (
	saltSize    = 32
	sealSegment = 64 << 10
	// maxSealedHeader bounds the header of a sealed artifact.
	maxSealedHeader = 16 << 20
)

// ErrSealed is returned when a sealed artifact does not open: a wrong
// key, or bytes that are not what its owner sealed.
var ErrSealed = errors.New("sealed artifact does not open with this key")

// contentKey derives a sealed artifact's key from the key it was sealed
// with and its salt.
func contentKey(k Key, salt []byte) Key {
	b, err := hkdf.Key(sha256.New, k[:], salt, "gpumesh sealed artifact v1", KeySize)
	if err != nil {
		panic(err) // a 32-byte output never fails
	}
	var out Key
	copy(out[:], b)
	return out
}

func segmentNonce(i uint64) []byte {
	n := make([]byte, chacha20poly1305.NonceSizeX)
	binary.BigEndian.PutUint64(n[len(n)-8:], i)
	return n
}

// sealWriter seals what is written to it into w, segment by segment.
type sealWriter struct {
	w    io.Writer
	aead interface {
		Seal(dst, nonce, plain, ad []byte) []byte
	}
	buf []byte
	i   uint64
}

// newSealWriter writes salt (nil: a fresh random one) to w and returns
// the writer sealing under the content key derived from k, and that key.
func newSealWriter(w io.Writer, k Key, salt []byte) (*sealWriter, Key, error) {
	if salt == nil {
		salt = make([]byte, saltSize)
		if _, err := rand.Read(salt); err != nil {
			return nil, Key{}, err
		}
	}
	ck := contentKey(k, salt)
	aead, err := chacha20poly1305.NewX(ck[:])
	if err != nil {
		return nil, Key{}, err
	}
	if _, err := w.Write(salt); err != nil {
		return nil, Key{}, err
	}
	return &sealWriter{w: w, aead: aead, buf: make([]byte, 0, sealSegment)}, ck, nil
}

func (s *sealWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(sealSegment-len(s.buf), len(p))
		s.buf, p = append(s.buf, p[:take]...), p[take:]
		// A full segment is sealed only once more follows: the last one,
		// full or not, carries the final flag.
		if len(s.buf) == sealSegment && len(p) > 0 {
			if err := s.flush(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (s *sealWriter) flush(final bool) error {
	ad := []byte{0}
	if final {
		ad[0] = 1
	}
	_, err := s.w.Write(s.aead.Seal(nil, segmentNonce(s.i), s.buf, ad))
	s.i++
	s.buf = s.buf[:0]
	return err
}

// Close seals the last segment.
func (s *sealWriter) Close() error { return s.flush(true) }

// openReader reads the plaintext of a sealed artifact's bytes.
type openReader struct {
	r    *bufio.Reader
	aead interface {
		Open(dst, nonce, sealed, ad []byte) ([]byte, error)
	}
	seg   []byte // ciphertext buffer
	plain []byte // what is left of the current segment
	i     uint64
	done  bool
}

// newOpenReader reads the salt from r and opens what follows with the
// content key k (or, derive, the content key derived from k).
func newOpenReader(r io.Reader, k Key, derive bool) (*openReader, error) {
	salt := make([]byte, saltSize)
	if _, err := io.ReadFull(r, salt); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	if derive {
		k = contentKey(k, salt)
	}
	aead, err := chacha20poly1305.NewX(k[:])
	if err != nil {
		return nil, err
	}
	return &openReader{r: bufio.NewReader(r), aead: aead, seg: make([]byte, sealSegment+aead.Overhead())}, nil
}

func (o *openReader) Read(p []byte) (int, error) {
	for len(o.plain) == 0 {
		if o.done {
			return 0, io.EOF
		}
		n, err := io.ReadFull(o.r, o.seg)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// A segment followed by nothing must be the final one.
		if _, perr := o.r.Peek(1); perr != nil {
			o.done = true
		}
		ad := []byte{0}
		if o.done {
			ad[0] = 1
		}
		plain, oerr := o.aead.Open(nil, segmentNonce(o.i), o.seg[:n], ad)
		if oerr != nil {
			return 0, fmt.Errorf("%w (segment %d)", ErrSealed, o.i)
		}
		o.i++
		o.plain = plain
	}
	n := copy(p, o.plain)
	o.plain = o.plain[n:]
	return n, nil
}

// sealedHeader leads a sealed artifact's plaintext.
type sealedHeader struct {
	Dir   bool               `json:"dir,omitempty"`
	Files []terms.OutputFile `json:"files"`
}

// sealedName is every sealed artifact's manifest name: its own name is
// inside the ciphertext.
const sealedName = "sealed"

// AddSealed imports a file or directory tree as a sealed artifact: its
// content is encrypted under a content key derived from k before a byte
// reaches the store (see above), and that content key is returned. Our
// own artifact (meta.Owner "") keeps it in its record, the only place it
// is written; one sealed for a peer (a lease's outputs, sealed with its
// lease key) keeps no key here. Symlinks and special files are left out.
func (s *Store) AddSealed(src string, k Key, meta Meta) (id string, ck Key, err error) {
	return s.addSealed(src, func([]byte) (Key, []byte, error) { return k, nil, nil }, meta)
}

// AddPrivate imports a file or directory tree of ours as a private
// artifact, sealed (every private file or tree is): under a key derived
// from this store's secret and its content (the sealed header: each
// file's name, size and SHA-256), with a salt derived from that key, so
// that the same data added twice is the same artifact (an owner's
// re-add, a provider that holds it warm) while no one without the secret
// can derive its key or tell it from any other data.
func (s *Store) AddPrivate(src string) (string, error) {
	id, _, err := s.addSealed(src, func(hdr []byte) (Key, []byte, error) {
		secret, err := s.secret()
		if err != nil {
			return Key{}, nil, err
		}
		sum := sha256.Sum256(hdr)
		b, err := hkdf.Key(sha256.New, secret, sum[:], "gpumesh private artifact v1", KeySize+saltSize)
		if err != nil {
			return Key{}, nil, err
		}
		var k Key
		copy(k[:], b)
		return k, b[KeySize:], nil
	}, Meta{Private: true})
	if err != nil {
		return "", err
	}
	return id, s.setLabel(id, filepath.Base(src))
}

// setLabel records the name our own sealed artifact id was added under.
func (s *Store) setLabel(id, label string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	if r.Label == label {
		return nil
	}
	r.Label = label
	return s.saveLocked(id)
}

// addSealed is AddSealed with the key and salt (nil: random) that seal
// the artifact chosen from its plaintext header.
func (s *Store) addSealed(src string, keyFor func(hdr []byte) (Key, []byte, error), meta Meta) (id string, ck Key, err error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", Key{}, fmt.Errorf("artifact add: %w", err)
	}
	hdr := sealedHeader{Dir: fi.IsDir()}
	dir := src
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return "", Key{}, fmt.Errorf("artifact add: %s is not a regular file or directory", src)
		}
		dir = filepath.Dir(src)
		f, err := fileEntry(src, filepath.Base(src))
		if err != nil {
			return "", Key{}, err
		}
		hdr.Files = []terms.OutputFile{f}
	} else {
		err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			if len(hdr.Files) >= MaxManifestEntries {
				return fmt.Errorf("more than %d files", MaxManifestEntries)
			}
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return err
			}
			f, err := fileEntry(p, filepath.ToSlash(rel))
			hdr.Files = append(hdr.Files, f)
			return err
		})
		if err != nil {
			return "", Key{}, fmt.Errorf("artifact add %s: %w", src, err)
		}
		sort.Slice(hdr.Files, func(i, j int) bool { return hdr.Files[i].Path < hdr.Files[j].Path })
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return "", Key{}, err
	}
	k, salt, err := keyFor(hb)
	if err != nil {
		return "", Key{}, fmt.Errorf("artifact add %s: %w", src, err)
	}
	pr, pw := io.Pipe()
	keyc := make(chan Key, 1)
	go func() {
		sw, ck, err := newSealWriter(pw, k, salt)
		keyc <- ck
		if err == nil {
			var n [4]byte
			binary.BigEndian.PutUint32(n[:], uint32(len(hb)))
			bw := bufio.NewWriterSize(sw, sealSegment)
			if _, err = bw.Write(append(n[:], hb...)); err == nil {
				err = wire.WriteBundle(bw, dir, hdr.Files)
			}
			if err == nil {
				err = bw.Flush()
			}
			if err == nil {
				err = sw.Close()
			}
		}
		pw.CloseWithError(err)
	}()
	m := Manifest{Name: sealedName, Sealed: true}
	id, err = s.addReader(&m, sealedName, pr, meta)
	pr.CloseWithError(errors.New("import ended"))
	ck = <-keyc
	if err != nil {
		return "", Key{}, fmt.Errorf("artifact add %s: %w", src, err)
	}
	if meta.Owner == "" {
		if err := s.setKey(id, ck); err != nil {
			return "", Key{}, err
		}
	}
	return id, ck, nil
}

func fileEntry(p, rel string) (terms.OutputFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return terms.OutputFile{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return terms.OutputFile{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, err
}

// OpenSealed opens sealed artifact id for rd (MayRead) with its content
// key ck: its files and their bundle (wire.WriteBundle's format), which
// the caller reads to the end (every segment is authenticated as it is
// read: a tampered one fails the read with ErrSealed) and closes.
func (s *Store) OpenSealed(id string, rd Reader, ck Key) (files []terms.OutputFile, dir bool, bundle io.ReadCloser, err error) {
	return s.openSealed(id, rd, ck, false)
}

func (s *Store) openSealed(id string, rd Reader, k Key, derive bool) ([]terms.OutputFile, bool, io.ReadCloser, error) {
	m, _, err := s.Manifest(id)
	if err != nil {
		return nil, false, nil, err
	}
	if !m.Sealed {
		return nil, false, nil, fmt.Errorf("artifact %s is not sealed", ShortID(id))
	}
	rc, err := s.Open(id, rd)
	if err != nil {
		return nil, false, nil, err
	}
	or, err := newOpenReader(rc, k, derive)
	if err != nil {
		rc.Close()
		return nil, false, nil, err
	}
	br := bufio.NewReaderSize(or, sealSegment)
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		rc.Close()
		return nil, false, nil, fmt.Errorf("artifact %s: %w", ShortID(id), err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxSealedHeader {
		rc.Close()
		return nil, false, nil, fmt.Errorf("artifact %s: sealed header of %d bytes", ShortID(id), size)
	}
	hb := make([]byte, size)
	var hdr sealedHeader
	if _, err = io.ReadFull(br, hb); err == nil {
		err = json.Unmarshal(hb, &hdr)
	}
	if err == nil && !hdr.Dir && len(hdr.Files) != 1 {
		err = fmt.Errorf("a file artifact holds %d files", len(hdr.Files))
	}
	if err != nil {
		rc.Close()
		return nil, false, nil, fmt.Errorf("artifact %s: sealed header: %w", ShortID(id), err)
	}
	return hdr.Files, hdr.Dir, struct {
		io.Reader
		io.Closer
	}{br, rc}, nil
}

// Unseal writes sealed artifact id's files under dst for rd (MayRead),
// as Export does (a file artifact becomes dst, a directory artifact's
// tree is created in dst), opening it with its content key ck. Each file
// is checked against the sealed header (wire.ExtractBundle) and nothing
// is left in dst when the artifact does not open.
func (s *Store) Unseal(id, dst string, rd Reader, ck Key) error {
	files, dir, body, err := s.OpenSealed(id, rd, ck)
	if err != nil {
		return err
	}
	defer body.Close()
	target := dst
	if !dir {
		target = dst + ".unseal"
		defer os.RemoveAll(target)
	}
	if _, err := wire.ExtractBundle(body, files, target, false); err != nil {
		return fmt.Errorf("artifact %s: %w", ShortID(id), err)
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return fmt.Errorf("artifact %s: %w", ShortID(id), err)
	}
	if !dir {
		return os.Rename(filepath.Join(target, filepath.FromSlash(files[0].Path)), dst)
	}
	return nil
}

// ContentKey derives the content key of sealed artifact id from the key
// k it was sealed with (a lease key): what a renter records (SetKey,
// which checks it opens every segment) for a checkpoint or outputs its
// provider sealed.
func (s *Store) ContentKey(id string, k Key) (Key, error) {
	m, _, err := s.Manifest(id)
	if err != nil {
		return Key{}, err
	}
	if !m.Sealed {
		return Key{}, fmt.Errorf("artifact %s is not sealed", ShortID(id))
	}
	rc, err := s.Open(id, Local)
	if err != nil {
		return Key{}, err
	}
	defer rc.Close()
	salt := make([]byte, saltSize)
	if _, err := io.ReadFull(rc, salt); err != nil {
		return Key{}, fmt.Errorf("artifact %s: %w", ShortID(id), ErrSealed)
	}
	return contentKey(k, salt), nil
}

// verify reads sealed artifact id to its end with content key ck.
func (s *Store) verify(id string, ck Key) error {
	_, _, body, err := s.OpenSealed(id, Local, ck)
	if err != nil {
		return err
	}
	defer body.Close()
	if _, err := io.Copy(io.Discard, body); err != nil {
		return fmt.Errorf("artifact %s: %w", ShortID(id), err)
	}
	return nil
}

// Key returns the content key recorded for sealed artifact id: one of
// ours, or one whose key we were given (SetKey).
func (s *Store) Key(id string) (Key, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok || r.Key == nil {
		return Key{}, false
	}
	return *r.Key, true
}

// SetKey records content key ck for sealed artifact id, once it opened
// every segment with it.
func (s *Store) SetKey(id string, ck Key) error {
	if err := s.verify(id, ck); err != nil {
		return err
	}
	return s.setKey(id, ck)
}

func (s *Store) setKey(id string, ck Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return fmt.Errorf("%s: %w", ShortID(id), ErrNotFound)
	}
	if r.Key != nil && subtle.ConstantTimeCompare(r.Key[:], ck[:]) == 1 {
		return nil
	}
	r.Key = &ck
	return s.saveLocked(id)
}

// LeaseKey is the key a lease's provider seals its checkpoints and
// outputs with: derived from this store's secret (a random file only this
// node reads) and the lease id, so the renter never needs to keep it and
// each lease has its own. The renter hands it to the lease's provider
// alone (node: the lease keys request).
func (s *Store) LeaseKey(leaseID string) (Key, error) {
	secret, err := s.secret()
	if err != nil {
		return Key{}, err
	}
	b, err := hkdf.Key(sha256.New, secret, nil, "gpumesh lease key v1 "+leaseID, KeySize)
	if err != nil {
		return Key{}, err
	}
	var k Key
	copy(k[:], b)
	return k, nil
}

// secret reads (creating) the store's secret.
func (s *Store) secret() ([]byte, error) {
	p := filepath.Join(s.dir, "secret")
	b, err := os.ReadFile(p)
	if err == nil && len(b) == KeySize {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("artifact store secret: %w", err)
	}
	k, err := NewKey()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, err := os.ReadFile(p); err == nil && len(b) == KeySize {
		return b, nil
	}
	if err := writeFileAtomic(p, k[:]); err != nil {
		return nil, fmt.Errorf("artifact store secret: %w", err)
	}
	return k[:], nil
}
