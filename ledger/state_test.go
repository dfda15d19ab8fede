package ledger

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/ledger/record"
)

type leaseRec struct {
	ID    string `json:"id"`
	State string `json:"state"`
	GPUs  int    `json:"gpus"`
}

func TestStatePutGetDelete(t *testing.T) {
	db := openTest(t, "", noSync())
	s := db.State("leases")
	in := leaseRec{ID: "l1", State: "running", GPUs: 2}
	if err := s.Put("l1", in); err != nil {
		t.Fatal(err)
	}
	var out leaseRec
	ok, err := s.Get("l1", &out)
	if err != nil || !ok || out != in {
		t.Fatalf("Get = %+v, %v, %v; want %+v", out, ok, err, in)
	}
	in.State = "succeeded"
	if err := s.Put("l1", in); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("l1", &out); err != nil || out.State != "succeeded" {
		t.Fatalf("overwrite not visible: %+v %v", out, err)
	}

	sentinel := leaseRec{ID: "untouched"}
	ok, err = s.Get("missing", &sentinel)
	if err != nil || ok || sentinel.ID != "untouched" {
		t.Fatalf("Get(missing) = %v, %v, value %+v", ok, err, sentinel)
	}
	if err := s.Delete("l1"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Get("l1", &out); ok {
		t.Fatal("deleted key still present")
	}
	if err := s.Delete("l1"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}

	if err := s.Put("bad", make(chan int)); err == nil {
		t.Error("Put of an unencodable value succeeded")
	}
	if err := s.Put("str", "text"); err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := s.Get("str", &n); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Errorf("Get into the wrong type = %v, want a decode error", err)
	}
}

func TestStateNamespacesAreIsolated(t *testing.T) {
	db := openTest(t, "", noSync())
	entries := appendN(t, db, 3)
	a, ab := db.State("a"), db.State("ab")
	for _, k := range []string{"z", "b\x00x", "m"} {
		if err := a.Put(k, "a:"+k); err != nil {
			t.Fatal(err)
		}
	}
	if err := ab.Put("x", "ab:x"); err != nil {
		t.Fatal(err)
	}
	// A state key that spells a ledger key must stay in its namespace.
	if err := db.State("ledger").Put("head", "not a head"); err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	var order []string
	err := a.List(func(k string, raw []byte) error {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		got[k] = v
		order = append(order, k)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"z": "a:z", "b\x00x": "a:b\x00x", "m": "a:m"}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(order, []string{"b\x00x", "m", "z"}) {
		t.Fatalf("List(a) = %q in order %q", got, order)
	}
	var v string
	if ok, _ := ab.Get("z", &v); ok {
		t.Error("namespace ab sees a's key")
	}

	// The ledger is untouched by state keys.
	wantValid(t, db, 3)
	if seq, hash, _ := db.Head(); seq != 3 || hash != entries[2].Hash {
		t.Fatalf("Head = %d %s", seq, hash)
	}
	if l, _ := db.List(record.Filter{}); len(l) != 3 {
		t.Fatalf("List sees %d entries, want 3", len(l))
	}
}

func TestStateListStopsOnError(t *testing.T) {
	db := openTest(t, "", noSync())
	s := db.State("jobs")
	for _, k := range []string{"1", "2", "3"} {
		if err := s.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("stop")
	calls := 0
	err := s.List(func(string, []byte) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Fatalf("List = %v after %d calls, want stop after 2", err, calls)
	}
}

func TestStateRejectsBadNames(t *testing.T) {
	db := openTest(t, "", noSync())
	for name, ns := range map[string]string{"empty namespace": "", "nul in namespace": "a\x00b", "long namespace": strings.Repeat("n", MaxNamespaceLen+1)} {
		t.Run(name, func(t *testing.T) {
			s := db.State(ns)
			if err := s.Put("k", 1); err == nil {
				t.Errorf("namespace %q accepted by Put", ns)
			}
			if err := s.List(func(string, []byte) error { return nil }); err == nil {
				t.Errorf("namespace %q accepted by List", ns)
			}
		})
	}
	s := db.State("ok")
	for name, k := range map[string]string{"empty key": "", "long key": strings.Repeat("k", MaxKeyLen+1)} {
		t.Run(name, func(t *testing.T) {
			if err := s.Put(k, 1); err == nil {
				t.Errorf("key of length %d accepted by Put", len(k))
			}
			if _, err := s.Get(k, new(int)); err == nil {
				t.Errorf("key of length %d accepted by Get", len(k))
			}
			if err := s.Delete(k); err == nil {
				t.Errorf("key of length %d accepted by Delete", len(k))
			}
		})
	}
}
