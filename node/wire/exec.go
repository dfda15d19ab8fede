package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// ExecRequest opens a ProtoExec stream: run Command in lease LeaseID's
// running job. Stdin says the caller sends input; TTY asks for a terminal
// of Rows×Cols.
type ExecRequest struct {
	LeaseID string   `json:"lease_id"`
	Command []string `json:"command"`
	Stdin   bool     `json:"stdin,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
}

// DecodeExecRequest reads an exec stream's request frame; its lease id
// must satisfy terms.ValidID.
func DecodeExecRequest(b []byte) (ExecRequest, error) {
	var r ExecRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return ExecRequest{}, fmt.Errorf("wire: exec request: %v", err)
	}
	if err := terms.ValidID(r.LeaseID); err != nil {
		return ExecRequest{}, fmt.Errorf("wire: exec request: lease id: %w", err)
	}
	return r, nil
}

// ExecAck is the provider's answer to an ExecRequest: empty Error means
// the command is about to start and exec frames follow.
type ExecAck struct {
	Error string `json:"error,omitempty"`
}

// ExecExit is the payload of the last exec frame (ExecFrameExit): the
// command's exit status (128+signal when a signal killed it), and why it
// did not run or its status is unknown (Error; Code is then 127 for a
// command that is not there, 126 for one that cannot run, else -1).
type ExecExit struct {
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"`
}

// Exec frame kinds. The caller sends stdin and resize frames and ends its
// input by closing its side of the stream for writing; the provider sends
// stdout, stderr (none with a terminal) and, last, one exit frame.
const (
	ExecFrameStdin  byte = 0
	ExecFrameStdout byte = 1
	ExecFrameStderr byte = 2
	ExecFrameExit   byte = 3 // JSON ExecExit
	ExecFrameResize byte = 4 // rows, cols: two big-endian uint16
)

// MaxExecFrame bounds an exec frame's payload.
const MaxExecFrame = 32 << 10

// WriteExecFrame writes one exec frame: its kind, a 4-byte big-endian
// length, the payload (at most MaxExecFrame bytes).
func WriteExecFrame(w io.Writer, kind byte, p []byte) error {
	if len(p) > MaxExecFrame {
		return fmt.Errorf("wire: exec frame of %d bytes (max %d)", len(p), MaxExecFrame)
	}
	buf := make([]byte, 5+len(p))
	buf[0] = kind
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(p)))
	copy(buf[5:], p)
	_, err := w.Write(buf)
	return err
}

// ReadExecFrame reads one exec frame into buf (MaxExecFrame bytes or more)
// and returns its kind and payload (a slice of buf); io.EOF at a frame
// boundary means the other side ended its writing.
func ReadExecFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("wire: truncated exec frame header")
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxExecFrame || int(n) > len(buf) {
		return 0, nil, fmt.Errorf("wire: exec frame of %d bytes (max %d)", n, MaxExecFrame)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if errors.Is(err, io.EOF) {
			// Past a header: the frame was cut, not the stream ended.
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("wire: truncated exec frame: %w", err)
	}
	return hdr[0], buf[:n], nil
}

// ResizePayload encodes a terminal size for an ExecFrameResize frame.
func ResizePayload(rows, cols uint16) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:2], rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return b[:]
}

// ParseResize decodes an ExecFrameResize payload.
func ParseResize(p []byte) (rows, cols uint16, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("wire: resize frame of %d bytes, want 4", len(p))
	}
	return binary.BigEndian.Uint16(p[:2]), binary.BigEndian.Uint16(p[2:]), nil
}

// PortForwardRequest opens a ProtoPortForward stream to port Port of
// lease LeaseID's running job (127.0.0.1:Port in its own network
// namespace).
type PortForwardRequest struct {
	LeaseID string `json:"lease_id"`
	Port    int    `json:"port"`
}

// GangRequest opens a ProtoGang stream: member From of gang Gang (whose
// roster, as its renter signed it, has digest Roster) connects to port
// Port of member To's job, at To's gang address.
type GangRequest struct {
	Gang   string `json:"gang"`
	Roster string `json:"roster"`
	From   int    `json:"from"`
	To     int    `json:"to"`
	Port   int    `json:"port"`
}
