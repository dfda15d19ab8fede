package service

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
)

// usage is what an OpenAI-compatible answer says it used: its JSON
// "usage" field, in the body or, streamed as server-sent events, in the
// last "data:" chunk that carries one.
type usage struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
	Total      int64 `json:"total_tokens"`
}

// Bounds of what the usage scanner keeps of an answer: a JSON body up to
// maxUsageBody (a larger one is not looked into), one event-stream line
// up to maxUsageLine (a longer one is skipped).
const (
	maxUsageBody = 1 << 20
	maxUsageLine = 64 << 10
)

// usageScanner finds the usage of an answer as its body passes through
// the gateway (write is fed what the client is sent), keeping at most a
// bounded part of it.
type usageScanner struct {
	sse  bool
	buf  []byte
	skip bool // SSE: the rest of an over-long line; JSON: a body over the bound
	got  usage
	ok   bool
}

// newUsageScanner is a scanner for resp's body, or nil when the answer
// cannot carry a usage: not JSON or an event stream, or encoded.
func newUsageScanner(resp *http.Response) *usageScanner {
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		return &usageScanner{}
	case "text/event-stream":
		return &usageScanner{sse: true}
	}
	return nil
}

func (u *usageScanner) write(p []byte) {
	if !u.sse {
		if !u.skip && len(u.buf)+len(p) > maxUsageBody {
			u.skip, u.buf = true, nil
		}
		if !u.skip {
			u.buf = append(u.buf, p...)
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !u.skip {
			if len(u.buf)+len(chunk) > maxUsageLine {
				u.skip, u.buf = true, u.buf[:0]
			} else {
				u.buf = append(u.buf, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !u.skip {
			u.line(u.buf)
		}
		u.buf, u.skip, p = u.buf[:0], false, p[i+1:]
	}
}

// line takes one event-stream line: a data line carrying a usage.
func (u *usageScanner) line(l []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimSuffix(l, []byte{'\r'}), []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	u.parse(data)
}

func (u *usageScanner) parse(b []byte) {
	var msg struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(b, &msg) == nil && msg.Usage != nil && plausible(msg.Usage.Prompt) && plausible(msg.Usage.Completion) {
		u.got, u.ok = *msg.Usage, true
	}
}

// plausible reports whether n can be one answer's token count: what the
// replica (inside a provider's sandbox) says is not taken when no
// server could have meant it, so that it cannot turn the sums negative.
func plausible(n int64) bool { return n >= 0 && n <= 1<<32 }

// result is the usage found, once the whole body has passed.
func (u *usageScanner) result() (usage, bool) {
	if u == nil {
		return usage{}, false
	}
	if u.sse {
		if !u.skip && len(u.buf) > 0 {
			u.line(u.buf) // a last line without its newline
		}
	} else if !u.skip {
		u.parse(u.buf)
	}
	u.buf = nil
	return u.got, u.ok
}
