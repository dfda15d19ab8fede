package service

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/wire"
)

// FuzzReadMsg reads the handshake of a service, port-forward or gang stream as
// the provider does (readMsg: a 2-byte length, then JSON), and the
// provider's answer as the renter does. An accepted message consumed
// exactly its frame (the bytes after it belong to the replica), is at
// most maxMsg, and reads back the same once written; a length over maxMsg
// is refused without allocating it.
func FuzzReadMsg(f *testing.F) {
	for _, v := range []any{wire.ServiceRequest{LeaseID: "lease-1"}, wire.PortForwardRequest{LeaseID: "lease-1", Port: 8080},
		wire.ServiceAck{Error: "no such lease"}, wire.GangRequest{Gang: "g", Roster: "ab12", From: 1, To: 0, Port: 29500}} {
		var b bytes.Buffer
		if err := writeMsg(&b, v); err != nil {
			f.Fatal(err)
		}
		f.Add(append(b.Bytes(), "GET / HTTP/1.1\r\n"...))
	}
	f.Add([]byte{0xff, 0xff, '{'})
	f.Add([]byte{0x10, 0x01})
	f.Add([]byte{0, 2, '{', '}'})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{&wire.PortForwardRequest{}, &wire.ServiceAck{}, &wire.GangRequest{}} {
			r := bytes.NewReader(data)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := readMsg(r, v)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 2*maxMsg+16<<10 {
				t.Fatalf("reading a handshake allocated %d bytes", got)
			}
			if err != nil {
				if strings.ContainsAny(err.Error(), "\n\r") {
					t.Fatalf("error is not one line: %q", err)
				}
				if len(data) >= 2 && int(binary.BigEndian.Uint16(data)) > maxMsg && r.Len() != len(data)-2 {
					t.Fatal("an oversized handshake's body was read")
				}
				continue
			}
			l := int(binary.BigEndian.Uint16(data))
			if l > maxMsg || r.Len() != len(data)-2-l {
				t.Fatalf("a message of %d bytes consumed %d", l, len(data)-r.Len())
			}
			var again bytes.Buffer
			if err := writeMsg(&again, v); err != nil {
				continue // escaping may make the JSON longer than maxMsg
			}
			v2 := newOf(v)
			if err := readMsg(io.MultiReader(&again, strings.NewReader("rest")), v2); err != nil {
				t.Fatalf("a written-again handshake does not read: %v", err)
			}
			a, _ := json.Marshal(v)
			b, _ := json.Marshal(v2)
			if !bytes.Equal(a, b) {
				t.Fatalf("handshake changed in a round trip:\n%s\n%s", a, b)
			}
		}
	})
}

func newOf(v any) any {
	switch v.(type) {
	case *wire.PortForwardRequest:
		return &wire.PortForwardRequest{}
	case *wire.GangRequest:
		return &wire.GangRequest{}
	default:
		return &wire.ServiceAck{}
	}
}
