package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
)

// node is one daemon: its identity, its clock (the simulated clock plus
// its skew), its disk (which survives a crash) and its role's state
// (which does not).
type node struct {
	s      *sim
	name   string
	signer *sign.Signer
	id     string // peer id
	skew   time.Duration
	up     bool
	epoch  int // incarnation: a crash ends every timer of the one before
	disk   *disk
	led    *nodeLedger

	prov    *provider
	rent    *renter
	hostile *hostile
}

func (n *node) now() time.Time { return n.s.now.Add(n.skew) }

// after runs fn on n after d (on n's clock, which runs at the simulated
// clock's rate), unless n crashes first.
func (n *node) after(d time.Duration, what string, fn func()) {
	n.s.after(d, n, n.name+" "+what, fn)
}

// atLocal runs fn when n's clock reads t.
func (n *node) atLocal(t time.Time, what string, fn func()) {
	n.s.at(t.Add(-n.skew), n, n.name+" "+what, fn)
}

// signers are the nodes' keys, the same for every seed (a seed changes
// what happens, not who): made once, from fixed bytes.
var (
	signersMu sync.Mutex
	signers   = map[string]*sign.Signer{}
)

func signerFor(name string) *sign.Signer {
	signersMu.Lock()
	defer signersMu.Unlock()
	if s := signers[name]; s != nil {
		return s
	}
	seed := make([]byte, ed25519.SeedSize)
	copy(seed, "gpumesh-dst/"+name)
	s, err := sign.NewSigner(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		panic(err)
	}
	signers[name] = s
	return s
}

func (s *sim) newNode(name string) *node {
	sg := signerFor(name)
	n := &node{s: s, name: name, signer: sg, id: sg.ID().String(), up: true}
	if s.cfg.MaxSkew > 0 {
		n.skew = s.between(-s.cfg.MaxSkew, s.cfg.MaxSkew)
	}
	n.disk = &disk{s: s, owner: name, data: map[string][]byte{}}
	n.led = &nodeLedger{n: n}
	s.nodes = append(s.nodes, n)
	return n
}

// setup makes the seed's nodes and schedules its jobs, partitions and
// crashes, all drawn from the seed.
func (s *sim) setup() {
	c := s.cfg
	for i := 0; i < c.Providers; i++ {
		n := s.newNode("p" + strconv.Itoa(i))
		n.prov = newProvider(n, 1+s.rng.IntN(4), 1+float64(s.rng.IntN(8)))
	}
	if c.Hostile {
		n := s.newNode("h")
		n.hostile = &hostile{n: n}
	}
	for i := 0; i < c.Renters; i++ {
		n := s.newNode("r" + strconv.Itoa(i))
		n.rent = newRenter(n)
		for j := 0; j < c.JobsPerRenter; j++ {
			id := fmt.Sprintf("%s-j%d", n.name, j)
			at := s.between(0, 20*time.Minute)
			s.at(epoch.Add(at), n, n.name+" post "+id, func() { n.rent.post(id) })
			if s.chance(c.Cancels) {
				s.at(epoch.Add(at+s.between(0, 40*time.Minute)), nil, n.name+" cancel "+id, func() {
					if n.up {
						n.rent.cancel(id)
					}
				})
			}
		}
	}
	for _, n := range s.nodes {
		s.logf("node %s id %s skew %s", n.name, n.id, n.skew)
	}
	for i := 0; i < c.Partitions; i++ {
		a, b := s.nodes[s.rng.IntN(len(s.nodes))], s.nodes[s.rng.IntN(len(s.nodes))]
		if a == b {
			continue
		}
		at, heal := s.between(0, 30*time.Minute), s.between(time.Second, c.PartitionFor)
		s.at(epoch.Add(at), nil, "partition "+a.name+" | "+b.name+" for "+heal.String(), func() {
			s.stats.Partitions++
			s.net.cut(a, b, s.now.Add(heal))
		})
	}
	for i := 0; i < c.Crashes; i++ {
		n := s.nodes[s.rng.IntN(len(s.nodes))]
		at, down := s.between(0, 40*time.Minute), s.between(time.Second, 3*time.Minute)
		s.at(epoch.Add(at), nil, "crash "+n.name+" for "+down.String(), func() { s.crash(n, down) })
	}
}

// crash stops n: everything it held in memory is gone, its timers die,
// and after down it starts again from its disk.
func (s *sim) crash(n *node, down time.Duration) {
	if !n.up {
		return
	}
	s.stats.Crashes++
	n.up = false
	n.epoch++
	s.after(down, nil, "restart "+n.name, func() {
		n.up = true
		n.epoch++
		n.led.load()
		switch {
		case n.prov != nil:
			n.prov = restartProvider(n, n.prov.capacity, n.prov.price)
		case n.rent != nil:
			n.rent = restartRenter(n)
		case n.hostile != nil:
			n.hostile = &hostile{n: n}
		}
	})
}

// disk is a node's persistent store: what a crash keeps.
type disk struct {
	s     *sim
	owner string
	data  map[string][]byte
	// ledgerChanged are the ledger's keys written or deleted since the
	// checker last took them (takeLedgerChanges): it verifies what
	// changed, not the whole ledger again.
	ledgerChanged []string
}

func (d *disk) put(key string, v []byte) {
	if d.s.cfg.Disk.DropPersist(d.owner, key) {
		d.s.logf("disk %s: write of %s lost", d.owner, key)
		return
	}
	d.data[key] = append([]byte(nil), v...)
	d.changed(key)
}

func (d *disk) putJSON(key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	d.put(key, b)
}

func (d *disk) del(key string) {
	delete(d.data, key)
	d.changed(key)
}

func (d *disk) changed(key string) {
	if strings.HasPrefix(key, ledgerPrefix) {
		d.ledgerChanged = append(d.ledgerChanged, key)
	}
}

// takeLedgerChanges returns the ledger's keys changed since the last
// call, sorted and each once, and forgets them.
func (d *disk) takeLedgerChanges() []string {
	ks := d.ledgerChanged
	d.ledgerChanged = nil
	slices.Sort(ks)
	return slices.Compact(ks)
}

func (d *disk) get(key string) ([]byte, bool) {
	v, ok := d.data[key]
	return v, ok
}

// keys are the keys under prefix, sorted: never the map's own order.
func (d *disk) keys(prefix string) []string {
	var out []string
	for k := range d.data {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// nodeLedger is a node's ledger on its simulated disk: entries linked by
// ledger.Link, as the Badger ledger links them, and checked by
// ledger.ChainVerifier, as its Verify checks them.
type nodeLedger struct {
	n    *node
	seq  uint64
	hash string
}

const ledgerPrefix = "ledger/"

func ledgerKey(seq uint64) string { return fmt.Sprintf("%s%012d", ledgerPrefix, seq) }

// load finds the chain's head on disk after a restart.
func (l *nodeLedger) load() {
	l.seq, l.hash = 0, record.ZeroHash
	keys := l.n.disk.keys(ledgerPrefix)
	if len(keys) == 0 {
		return
	}
	raw, _ := l.n.disk.get(keys[len(keys)-1])
	var e record.Entry
	if json.Unmarshal(raw, &e) == nil {
		l.seq, l.hash = e.Seq, e.Hash
	}
}

// append links and stores entries, in order.
func (l *nodeLedger) append(entries ...record.Entry) {
	if l.hash == "" {
		l.hash = record.ZeroHash
	}
	for _, e := range entries {
		e.Seq = l.seq + 1
		e.Time = l.n.now().UTC().Round(0)
		raw, err := ledger.Link(&e, l.hash)
		if err != nil {
			panic(err)
		}
		raw = l.n.s.cfg.Disk.AlterStored(raw)
		l.n.disk.put(ledgerKey(e.Seq), raw)
		l.seq, l.hash = e.Seq, e.Hash
		l.n.s.logf("%s ledger %d %s lease %s amount %.6f", l.n.name, e.Seq, e.Kind, e.LeaseID, e.Amount)
	}
}
