package runtime

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestCapWriter(t *testing.T) {
	note := "\n[gpumesh: log truncated at 10 bytes; further output dropped]\n"
	cases := []struct {
		name   string
		writes []string
		want   string
		drop   int64
	}{
		{"under", []string{"abc", "def"}, "abcdef", 0},
		{"exact", []string{"01234", "56789"}, "0123456789", 0},
		{"split write", []string{"0123456", "789abc"}, "0123456789" + note, 3},
		{"after the cap", []string{"0123456789", "x", "yz"}, "0123456789" + note, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewCapWriter(&buf, 10)
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("write %q: %d %v", w, n, err)
				}
			}
			if buf.String() != tc.want || c.Dropped() != tc.drop || c.Truncated() != (tc.drop > 0) {
				t.Fatalf("got %q dropped %d, want %q dropped %d", buf.String(), c.Dropped(), tc.want, tc.drop)
			}
		})
	}
	// Two streams share one budget, concurrently.
	var out, errb syncBuffer
	c := NewCapWriter(&out, 1000)
	s := c.Share(&errb)
	var wg sync.WaitGroup
	for _, w := range []*CapWriter{c, s} {
		wg.Add(1)
		go func(w *CapWriter) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				_, _ = w.Write([]byte("0123456789"))
			}
		}(w)
	}
	wg.Wait()
	total := strings.ReplaceAll(out.String()+errb.String(), "\n[gpumesh: log truncated at 1000 bytes; further output dropped]\n", "")
	if len(total) != 1000 || c.Dropped() != 1000 || strings.Count(out.String()+errb.String(), "truncated") != 1 {
		t.Fatalf("shared budget: %d bytes kept, %d dropped", len(total), c.Dropped())
	}
}

// A job flooding stdout and stderr is cut at the executor's log cap and
// still ends on its own.
func TestProcessLogCap(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{MaxLogBytes: 1 << 20})
	res, out, errOut, _ := run(t, e, Spec{ID: "flood", Command: []string{"sh", "-c", "head -c 8000000 /dev/zero | tr '\\0' o; head -c 8000000 /dev/zero | tr '\\0' e >&2; echo done"}})
	if res.ExitCode != 0 || res.Reason != ReasonExited {
		t.Fatalf("%+v", res)
	}
	note := "\n[gpumesh: log truncated at 1048576 bytes; further output dropped]\n"
	if strings.Count(out+errOut, note) != 1 {
		t.Fatalf("want one truncation note, output ends %q", (out + errOut)[len(out+errOut)-200:])
	}
	out, errOut = strings.ReplaceAll(out, note, ""), strings.ReplaceAll(errOut, note, "")
	kept := strings.Count(out, "o") + strings.Count(errOut, "e")
	if kept != 1<<20 {
		t.Fatalf("kept %d bytes of output, want the 1 MiB cap", kept)
	}
	if strings.Contains(out, "done") || len(errOut) != 0 {
		t.Fatalf("output past the cap was kept")
	}
}
