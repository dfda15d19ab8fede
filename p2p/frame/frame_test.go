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

// writeCounter counts the Writes made to it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(b)
}

// TestSmallFrameIsOneWrite: a frame up to oneWrite goes in one Write
// (one muxer frame, one record, one syscall on a stream), its bytes the
// header then the body; a longer one in two, the same bytes.
func TestSmallFrameIsOneWrite(t *testing.T) {
	for _, tc := range []struct {
		n, writes int
	}{{0, 1}, {300, 1}, {oneWrite, 1}, {oneWrite + 1, 2}} {
		var w writeCounter
		body := bytes.Repeat([]byte("b"), tc.n)
		if err := Write(&w, body); err != nil {
			t.Fatal(err)
		}
		var hdr [binary.MaxVarintLen64]byte
		want := append(hdr[:binary.PutUvarint(hdr[:], uint64(tc.n))], body...)
		if w.writes != tc.writes || !bytes.Equal(w.Bytes(), want) {
			t.Fatalf("frame of %d: %d writes (want %d), bytes equal %v", tc.n, w.writes, tc.writes, bytes.Equal(w.Bytes(), want))
		}
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
