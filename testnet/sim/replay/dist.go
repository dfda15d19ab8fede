package replay

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Mix is a named discrete distribution, written on the command line as
// "name=weight,name=weight". Weights need not sum to one.
type Mix map[string]float64

// ParseMix parses "a=0.2,b=0.8" into a Mix. Every name must be one of allowed.
func ParseMix(s string, allowed ...string) (Mix, error) {
	m := make(Mix)
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("mix %q: %q is not name=weight", s, part)
		}
		k = strings.TrimSpace(k)
		if !contains(allowed, k) {
			return nil, fmt.Errorf("mix %q: unknown name %q (want one of %s)", s, k, strings.Join(allowed, ", "))
		}
		w, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || w < 0 || w != w || w > 1e9 {
			return nil, fmt.Errorf("mix %q: weight %q of %s must be a non-negative number", s, v, k)
		}
		m[k] = w
	}
	if m.total() <= 0 {
		return nil, fmt.Errorf("mix %q: weights must not all be zero", s)
	}
	return m, nil
}

// String renders the mix in the ParseMix syntax, names sorted.
func (m Mix) String() string {
	keys := m.keys()
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatFloat(m[k], 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (m Mix) keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (m Mix) total() float64 {
	t := 0.0
	for _, w := range m {
		t += w
	}
	return t
}

// draw picks a name with probability proportional to its weight, iterating
// names in sorted order so that a seed always gives the same draw.
func (m Mix) draw(r *rand.Rand) string {
	keys := m.keys()
	x := r.Float64() * m.total()
	for _, k := range keys {
		x -= m[k]
		if x < 0 {
			return k
		}
	}
	return keys[len(keys)-1]
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// weighted is a fixed distribution over values of any type.
type weighted[T any] []struct {
	V T
	W float64
}

func (d weighted[T]) draw(r *rand.Rand) T {
	t := 0.0
	for _, e := range d {
		t += e.W
	}
	x := r.Float64() * t
	for _, e := range d {
		x -= e.W
		if x < 0 {
			return e.V
		}
	}
	return d[len(d)-1].V
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }

// round2 rounds a price to cents so that reports and JSON stay readable.
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
