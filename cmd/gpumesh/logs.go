package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// termSafeWriter writes a job's log with its control characters made
// visible, so a job cannot drive the reader's terminal (move the cursor,
// set the title, rewrite earlier lines, answer-back sequences): newlines
// and tabs pass; other C0 controls and DEL are shown in caret notation
// (ESC as ^[), C1 controls as \u0080..\u009f, and bytes that are not UTF-8
// as \xNN. A character split across writes is held until it completes.
type termSafeWriter struct {
	w       io.Writer
	pending []byte
}

func (t *termSafeWriter) Write(p []byte) (int, error) {
	buf := append(t.pending, p...)
	t.pending = nil
	var out strings.Builder
	for len(buf) > 0 {
		if !utf8.FullRune(buf) {
			// An incomplete character at the end: wait for the rest.
			t.pending = append([]byte(nil), buf...)
			break
		}
		r, size := utf8.DecodeRune(buf)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&out, `\x%02x`, buf[0])
		case r == '\n' || r == '\t':
			out.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			out.WriteByte('^')
			out.WriteByte(byte(r) ^ 0x40)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			out.Write(buf[:size])
		}
		buf = buf[size:]
	}
	if _, err := io.WriteString(t.w, out.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a character left incomplete at the end of the log.
func (t *termSafeWriter) Flush() error {
	var out strings.Builder
	for _, b := range t.pending {
		fmt.Fprintf(&out, `\x%02x`, b)
	}
	t.pending = nil
	_, err := io.WriteString(t.w, out.String())
	return err
}
