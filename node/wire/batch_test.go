package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestReceiptBatchRoundTrip: a batch carries its receipts in order, byte
// for byte.
func TestReceiptBatchRoundTrip(t *testing.T) {
	in := [][]byte{[]byte(`{"a":1}`), []byte(`"two"`), []byte(`[3]`)}
	msg, err := EncodeReceiptBatch(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeReceiptBatch(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d receipts back, want %d", len(out), len(in))
	}
	for i := range in {
		if !bytes.Equal(out[i], in[i]) {
			t.Fatalf("receipt %d: %s, want %s", i, out[i], in[i])
		}
	}
}

// TestReceiptBatchRefusesWhatNoNodeSends: a hostile peer's message that
// is no batch, an empty one or one over MaxBatchReceipts (more checks
// than an honest node ever asks for in one message) is refused whole.
func TestReceiptBatchRefusesWhatNoNodeSends(t *testing.T) {
	many := `{"receipts":[` + strings.TrimSuffix(strings.Repeat(`{},`, MaxBatchReceipts+1), ",") + `]}`
	for _, msg := range []string{``, `garbage`, `{}`, `{"receipts":[]}`, `{"receipts":null}`, `{"receipts":{}}`, `[{}]`, many} {
		if got, err := DecodeReceiptBatch([]byte(msg)); err == nil {
			t.Errorf("DecodeReceiptBatch(%.40q) = %d receipts, want an error", msg, len(got))
		}
	}
	for _, n := range []int{0, MaxBatchReceipts + 1} {
		in := make([][]byte, n)
		for i := range in {
			in[i] = []byte(fmt.Sprint(i))
		}
		if _, err := EncodeReceiptBatch(in); err == nil {
			t.Errorf("EncodeReceiptBatch of %d receipts: no error", n)
		}
	}
}
