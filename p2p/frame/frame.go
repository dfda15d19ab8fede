// Package frame is the framing of every request, answer and stream message
// between daemons: a uvarint length, then that many bytes, at most Max. It
// needs nothing but the standard library, so that the protocols written
// over it (the GPU challenge, the artifact transfer, the post-award
// streams) and their nouns link no network stack.
package frame

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
)

// Max bounds one frame.
const Max = 1 << 20

// ErrTooLarge is returned for frames above Max.
var ErrTooLarge = errors.New("p2p: frame too large")

// Write writes a uvarint length-prefixed frame: a frame of up to
// oneWrite bytes in one Write, header and body together, so that it
// crosses a stream as one muxer frame, one encrypted record and one
// syscall (two Writes made two of each, and a read woken twice, for
// every request and answer between daemons); a longer one in two.
func Write(w io.Writer, b []byte) error {
	if len(b) > Max {
		return ErrTooLarge
	}
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(b)))
	if len(b) <= oneWrite {
		buf := make([]byte, n+len(b))
		copy(buf, hdr[:n])
		copy(buf[n:], b)
		_, err := w.Write(buf)
		return err
	}
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// oneWrite is the longest frame Write sends in one Write (a copy).
const oneWrite = 64 << 10

// Read reads one frame written by Write. Its buffer grows with the bytes
// that arrive, never ahead of them: a length header is a claim, and a peer
// that claims Max and sends little costs little.
func Read(r *bufio.Reader) ([]byte, error) {
	n, err := ReadLen(r)
	if err != nil {
		return nil, err
	}
	return ReadBody(r, n)
}

// ReadLen reads a frame's length header, refusing one over Max.
func ReadLen(r *bufio.Reader) (uint64, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, err
	}
	if n > Max {
		return 0, ErrTooLarge
	}
	return n, nil
}

// Chunk is the most a frame's buffer is grown by ahead of the bytes that
// have arrived.
const Chunk = 32 << 10

// ReadBody reads a frame's n bytes after its header (ReadLen), growing its
// buffer with what arrives; a frame cut short is io.ErrUnexpectedEOF.
func ReadBody(r io.Reader, n uint64) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, min(n, Chunk)))
	if _, err := io.CopyN(buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf.Bytes(), nil
}
