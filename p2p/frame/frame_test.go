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

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	for _, msg := range [][]byte{nil, []byte("a"), bytes.Repeat([]byte("x"), 70000)} {
		if err := Write(&buf, msg); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for _, n := range []int{0, 1, 70000} {
		b, err := Read(r)
		if err != nil || len(b) != n {
			t.Fatalf("frame of %d: got %d, %v", n, len(b), err)
		}
	}
	if err := Write(&buf, make([]byte, Max+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	// A peer announcing a huge frame is refused before anything is allocated.
	if _, err := Read(bufio.NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized read: %v", err)
	}
	if _, err := Read(bufio.NewReader(bytes.NewReader([]byte{5, 'a'}))); err == nil {
		t.Fatal("truncated frame accepted")
	}
}

// TestReadGrowsWithWhatArrives: a header claiming Max followed by
// a few bytes allocates about what arrived, not the claim.
func TestReadGrowsWithWhatArrives(t *testing.T) {
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], Max)
	raw := append(hdr[:n:n], bytes.Repeat([]byte("x"), 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Read(bufio.NewReaderSize(bytes.NewReader(raw), 16))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Fatalf("a 100-byte frame claiming %d bytes allocated %d bytes", Max, got)
	}
}
