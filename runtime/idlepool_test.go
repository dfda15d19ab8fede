package runtime

import (
	"slices"
	"testing"
)

// TestIdlePool: a pool keeps up to its max, hands back the last kept
// first, discards what it has no room for, and after close discards
// everything, kept or put.
func TestIdlePool(t *testing.T) {
	var discarded []int
	p := newIdlePool(2, func(v int) { discarded = append(discarded, v) })
	if _, ok := p.take(); ok {
		t.Fatal("an empty pool handed one out")
	}
	for v := 1; v <= 3; v++ {
		p.put(v)
	}
	if !slices.Equal(discarded, []int{3}) || p.room() {
		t.Fatalf("discarded %v, room %v: want 3 discarded, no room", discarded, p.room())
	}
	if v, ok := p.take(); !ok || v != 2 {
		t.Fatalf("took %d %v, want 2 (last kept)", v, ok)
	}
	p.close()
	p.put(4)
	if !slices.Equal(discarded, []int{3, 1, 4}) || p.room() {
		t.Fatalf("after close: discarded %v, room %v", discarded, p.room())
	}
	if _, ok := p.take(); ok {
		t.Fatal("a closed pool handed one out")
	}
	var none *idlePool[int]
	none.put(5)
	none.close()
	if _, ok := none.take(); ok || none.room() {
		t.Fatal("a nil pool kept one")
	}
}
