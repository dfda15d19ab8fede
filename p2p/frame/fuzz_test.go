package frame

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// FuzzRead feeds the frame reader (every request and answer between
// daemons goes through it) what a hostile peer may send: whatever it
// accepts is at most Max, is exactly the bytes its header announced,
// and reads back the same once written again; a header claiming more than
// arrived costs about what arrived, not the claim.
func FuzzRead(f *testing.F) {
	for _, body := range [][]byte{nil, []byte("a"), []byte(`{"lease_id":"l1"}`), bytes.Repeat([]byte("x"), 300)} {
		var b bytes.Buffer
		if err := Write(&b, body); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	var hdr [binary.MaxVarintLen64]byte
	f.Add(append(hdr[:binary.PutUvarint(hdr[:], Max)], "short"...))
	f.Add(hdr[:binary.PutUvarint(hdr[:], Max+1)])
	f.Add(hdr[:binary.PutUvarint(hdr[:], 1<<62)])
	f.Add([]byte{0x80, 0x00})                                                       // zero, not minimally encoded
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // overflows 64 bits
	f.Fuzz(func(t *testing.T, data []byte) {
		claim, hn := binary.Uvarint(data)
		r := bufio.NewReader(bytes.NewReader(data))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b, err := Read(r)
		runtime.ReadMemStats(&after)
		if err != nil {
			if hn > 0 && claim <= Max && uint64(len(data)-hn) < claim {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("a frame cut short gave %v", err)
				}
				if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(2*Chunk+4*len(data)); got > limit {
					t.Fatalf("%d bytes claiming %d allocated %d (limit %d)", len(data), claim, got, limit)
				}
			}
			if hn > 0 && claim > Max && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("a header claiming %d bytes gave %v", claim, err)
			}
			return
		}
		if hn <= 0 || uint64(len(b)) != claim || len(b) > Max {
			t.Fatalf("accepted %d bytes; the header (%d bytes) claimed %d", len(b), hn, claim)
		}
		if !bytes.Equal(b, data[hn:hn+len(b)]) {
			t.Fatal("the frame is not the bytes after its header")
		}
		rest, _ := io.ReadAll(r)
		if !bytes.Equal(rest, data[hn+len(b):]) {
			t.Fatalf("the reader consumed %d bytes past the frame", len(data)-hn-len(b)-len(rest))
		}
		var again bytes.Buffer
		if err := Write(&again, b); err != nil {
			t.Fatalf("an accepted frame does not write: %v", err)
		}
		b2, err := Read(bufio.NewReader(&again))
		if err != nil || !bytes.Equal(b2, b) || again.Len() != 0 {
			t.Fatalf("written again, the frame reads back as %d bytes (%v), %d left", len(b2), err, again.Len())
		}
	})
}
