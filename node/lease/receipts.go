package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ReceiptsConfig configures Receipts.
type ReceiptsConfig struct {
	Ledger    Ledger
	Book      *attest.Book
	Transport Transport
	Counters  *Counters
	Log       *slog.Logger
	// Deferred makes gossiped receipts wait, unverified, until Activate:
	// a provider that has never rented ranks no one, and checking both
	// signatures of every receipt the market settles was the largest part
	// of what a job cost the providers it did not run on. At most
	// maxDeferred wait (the oldest are dropped, counted).
	Deferred bool
	// GossipEvery is how long a receipt this node settled waits to be
	// gossiped in one message with the ones settled after it (at most
	// wire.MaxBatchReceipts); default DefaultGossipEvery.
	GossipEvery time.Duration
	// HeardWait is how long a receipt this node settled as a provider
	// waits to be heard in its renter's gossip before this node gossips
	// it itself (gossipUnlessHeard); default 3 GossipEvery.
	HeardWait time.Duration
}

// maxDeferred bounds the gossiped receipts a deferred Receipts keeps.
const maxDeferred = 1024

// Receipts records verified two-party receipts (ledger and reputation
// book) and gossips them so every node's reputation book learns of them.
type Receipts struct {
	cfg ReceiptsConfig
	log *slog.Logger
	ctx context.Context
	// mu orders gossip's wg.Add before Wait: once ctx is cancelled and
	// Wait began, no gossip starts (a handler may still run on a stopping
	// node).
	mu sync.Mutex
	wg sync.WaitGroup
	// pmu guards the deferred receipts (pending) and whether gossip is
	// taken in at once (active).
	pmu     sync.Mutex
	pending [][]byte
	active  bool
	// changed is notified once a receipt was recorded or a gossiped one
	// was taken in (or refused), so that a waiter for one needs no polling.
	changed broadcast.Signal
	// bmu guards the receipts waiting to be gossiped (batch, their size
	// batchBytes) and the timer that gossips them (flush).
	bmu        sync.Mutex
	batch      [][]byte
	batchBytes int
	flush      *time.Timer
	// umu guards the receipts this node settled as a provider that its
	// renter's gossip has not brought back yet (unheard, by their wire
	// bytes), each with the timer that gossips it if none does.
	umu     sync.Mutex
	unheard map[string]*time.Timer
}

// DefaultGossipEvery is how long a settled receipt waits for others to
// be gossiped with (ReceiptsConfig.GossipEvery). Every node's batch costs
// every node of the market a delivery, a decode and its forwards, so the
// network carries about nodes/GossipEvery reputation messages a second
// whatever the job rate: at 1 s, 50 daemons on two cores finished 13.7
// jobs/s at 134 ms of CPU a job; at 5 s, 24.6 jobs/s at 73 ms (10 s: no
// better). A receipt's reputation reaching the market 5 s later changes
// no ranking that matters.
const DefaultGossipEvery = 5 * time.Second

// Changed returns a channel closed at the next receipt recorded in the
// ledger and book, or gossiped receipt handled: take it before checking
// what it waits for.
func (r *Receipts) Changed() <-chan struct{} { return r.changed.Wait() }

// NewReceipts returns Receipts and replays the receipts already in the
// ledger into the book (reputation survives restarts; the ledger is its
// durable source). ctx bounds its gossip.
func NewReceipts(ctx context.Context, cfg ReceiptsConfig) (*Receipts, error) {
	if cfg.Ledger == nil || cfg.Book == nil || cfg.Transport == nil {
		return nil, errors.New("lease: receipts need a ledger, a book and a transport")
	}
	if cfg.Counters == nil {
		cfg.Counters = NewCounters()
	}
	if cfg.GossipEvery <= 0 {
		cfg.GossipEvery = DefaultGossipEvery
	}
	if cfg.HeardWait <= 0 {
		cfg.HeardWait = 3 * cfg.GossipEvery
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Receipts{cfg: cfg, log: log, ctx: ctx}
	entries, err := cfg.Ledger.List(record.Filter{Kind: record.KindReceipt})
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		sr, err := attest.UnmarshalReceipt(e.Data)
		if err != nil {
			continue
		}
		_ = cfg.Book.AddReceipt(sr)
	}
	return r, nil
}

// ReceiptEntries are the ledger entries a two-party receipt rc (raw: its
// signed bytes) is recorded as, on the renter's side (asRenter) or the
// provider's: the receipt, and the payment it implies when it bills
// anything (owed by a renter, earned by a provider).
func ReceiptEntries(rc attest.Receipt, raw []byte, asRenter bool) []record.Entry {
	pay := record.Entry{Kind: record.KindPaymentEarned, Direction: record.DirEarned, Counterparty: rc.Renter,
		LeaseID: rc.LeaseID, JobID: rc.JobID, Amount: rc.Amount}
	counter := rc.Renter
	if asRenter {
		pay = record.Entry{Kind: record.KindPaymentOwed, Direction: record.DirOwed, Counterparty: rc.Provider,
			LeaseID: rc.LeaseID, JobID: rc.JobID, Amount: rc.Amount}
		counter = rc.Provider
	}
	entries := []record.Entry{{Kind: record.KindReceipt, Counterparty: counter, LeaseID: rc.LeaseID, JobID: rc.JobID, Data: raw}}
	if rc.Amount > 0 {
		entries = append(entries, pay)
	}
	return entries
}

// record appends a verified two-party receipt and the payment it implies
// to the ledger (atomically), and feeds the reputation book.
func (r *Receipts) record(sr *attest.SignedReceipt, asRenter bool) error {
	defer r.changed.Notify()
	if err := sr.Verify(); err != nil {
		return err
	}
	raw, err := sr.Marshal()
	if err != nil {
		return err
	}
	entries := ReceiptEntries(sr.Receipt, raw, asRenter)
	if _, err := r.cfg.Ledger.AppendAll(entries); err != nil {
		return err
	}
	if err := r.cfg.Book.AddReceipt(sr); err != nil {
		r.log.Warn("reputation book refused own receipt", "err", err)
	}
	return nil
}

// maxReceiptRefusals is how many times a lease's receipt is refused (by
// a renter that was reached and answered) before the lease's settlement
// is given up as a dispute, on both sides: a receipt that disagrees with
// the renter's view of the lease is refused again at every retry.
const maxReceiptRefusals = 5

// maxDisputeReason bounds the reason a dispute entry keeps (the other
// party's refusal, which it words as it likes).
const maxDisputeReason = 1 << 10

// dispute records in the ledger that the settlement of lease leaseID (of
// job jobID, with counterparty) was given up, and why; once per lease.
func (r *Receipts) dispute(leaseID, jobID, counterparty, reason string) error {
	if len(reason) > maxDisputeReason {
		reason = strings.ToValidUTF8(reason[:maxDisputeReason], "")
	}
	prev, err := r.cfg.Ledger.List(record.Filter{Kind: record.KindDispute, LeaseID: leaseID, Limit: 1})
	if err != nil || len(prev) > 0 {
		return err
	}
	data, err := json.Marshal(struct {
		Reason string `json:"reason"`
	}{reason})
	if err != nil {
		return err
	}
	_, err = r.cfg.Ledger.AppendAll([]record.Entry{{Kind: record.KindDispute, LeaseID: leaseID, JobID: jobID,
		Counterparty: counterparty, Data: data}})
	return err
}

// gossip publishes a two-party receipt for everyone's reputation: with
// the others this node settles within GossipEvery, in one message
// (wire.ReceiptBatch), at once when the batch is full. A lease's renter
// gossips its receipt as it countersigns it; its provider only gossips
// what it does not hear from the renter (gossipUnlessHeard).
func (r *Receipts) gossip(sr *attest.SignedReceipt) {
	b, err := sr.Marshal()
	if err != nil {
		return
	}
	r.enqueue(b)
}

// gossipUnlessHeard is the provider's gossip of a receipt its renter
// countersigned: the renter gossips it, so the provider waits HeardWait
// to hear it (heard) and gossips it only if it does not, so that a
// renter withholding a receipt that does its provider credit keeps it
// from no one. Each receipt going out once, not twice, halves what the
// market's reputation gossip costs: every batch a node sends costs every
// node a delivery, a decode and its forwards, and most nodes are
// providers (50 daemons, 5 renters: 52 ms of CPU a job when both parties
// gossiped, 41 ms when renters alone did).
func (r *Receipts) gossipUnlessHeard(sr *attest.SignedReceipt) {
	b, err := sr.Marshal()
	if err != nil {
		return
	}
	key := string(b)
	r.umu.Lock()
	defer r.umu.Unlock()
	if r.unheard == nil {
		r.unheard = map[string]*time.Timer{}
	}
	if _, waiting := r.unheard[key]; waiting {
		return
	}
	r.unheard[key] = time.AfterFunc(r.cfg.HeardWait, func() {
		r.umu.Lock()
		_, still := r.unheard[key]
		delete(r.unheard, key)
		r.umu.Unlock()
		if still {
			r.cfg.Counters.Add("reputation.receipt_unheard")
			r.enqueue(b)
		}
	})
}

// heard takes a gossiped receipt's wire bytes: one this node waits to
// hear (gossipUnlessHeard) need not be gossiped by it.
func (r *Receipts) heard(b []byte) {
	r.umu.Lock()
	defer r.umu.Unlock()
	if len(r.unheard) == 0 {
		return
	}
	if t, ok := r.unheard[string(b)]; ok {
		t.Stop()
		delete(r.unheard, string(b))
	}
}

// takeUnheard takes every receipt still waiting to be heard, their
// timers stopped, in no particular order.
func (r *Receipts) takeUnheard() [][]byte {
	r.umu.Lock()
	defer r.umu.Unlock()
	var out [][]byte
	for key, t := range r.unheard {
		t.Stop()
		out = append(out, []byte(key))
	}
	r.unheard = nil
	return out
}

// enqueue adds a receipt's wire bytes to the batch gossip sends next.
func (r *Receipts) enqueue(b []byte) {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	if len(r.batch) > 0 && r.batchBytes+len(b) > wire.MaxBatchBytes {
		r.publishLocked()
	}
	r.batch = append(r.batch, b)
	r.batchBytes += len(b)
	switch {
	case len(r.batch) >= wire.MaxBatchReceipts:
		r.publishLocked()
	case len(r.batch) == 1:
		r.flush = time.AfterFunc(r.cfg.GossipEvery, func() {
			r.bmu.Lock()
			defer r.bmu.Unlock()
			r.publishLocked()
		})
	}
}

// publishLocked gossips the batch waiting (bmu held), in the background.
func (r *Receipts) publishLocked() {
	msg, n := r.takeBatchLocked()
	if msg == nil {
		return
	}
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		if err := r.cfg.Transport.Publish(ctx, wire.ReputationTopic, msg); err != nil && r.ctx.Err() == nil {
			r.log.Debug("gossip receipts", "receipts", n, "err", err)
		}
	}()
}

// takeBatchLocked takes the batch waiting (bmu held), its timer stopped,
// as one message of n receipts (nil when none waits).
func (r *Receipts) takeBatchLocked() (msg []byte, n int) {
	if r.flush != nil {
		r.flush.Stop()
		r.flush = nil
	}
	batch := r.batch
	r.batch, r.batchBytes = nil, 0
	if len(batch) == 0 {
		return nil, 0
	}
	msg, err := wire.EncodeReceiptBatch(batch)
	if err != nil {
		r.log.Warn("gossip receipts", "err", err)
		return nil, 0
	}
	return msg, len(batch)
}

// Flush gossips the receipts waiting for their batch now, and waits for
// the publish (at most flushTimeout, even once ctx was cancelled): a node
// that stops sends what it settled in its last GossipEvery instead of
// dropping it with its timer, and the receipts it settled as a provider
// and has not heard from their renters yet. The daemon calls it as it
// shuts down.
func (r *Receipts) Flush() {
	for _, b := range r.takeUnheard() {
		r.enqueue(b)
	}
	r.bmu.Lock()
	msg, n := r.takeBatchLocked()
	r.bmu.Unlock()
	if msg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), flushTimeout)
	defer cancel()
	if err := r.cfg.Transport.Publish(ctx, wire.ReputationTopic, msg); err != nil {
		r.log.Debug("gossip receipts at shutdown", "receipts", n, "err", err)
	}
}

// flushTimeout bounds Flush's publish: it is at once when a subscriber is
// reachable; a node with none left at its shutdown has no one to tell, and
// waits only this long for one (at 2 s, every test daemon that stopped
// after its peers took 2 s longer to close).
const flushTimeout = 100 * time.Millisecond

// HandleGossip feeds gossiped receipts (a wire.ReputationTopic message)
// to the reputation book, which verifies both signatures of each and
// rejects (and counts) forgeries. A message that is no batch counts as
// one malformed receipt.
func (r *Receipts) HandleGossip(_ peer.ID, data []byte) {
	receipts, err := wire.DecodeReceiptBatch(data)
	if err != nil {
		r.cfg.Counters.Add("reputation.gossip_malformed")
		r.changed.Notify()
		return
	}
	for _, b := range receipts {
		r.heard(b)
		if !r.deferred(b) {
			r.take(b)
		}
	}
}

// deferred keeps a gossiped receipt for Activate when gossip waits
// (ReceiptsConfig.Deferred, not yet active).
func (r *Receipts) deferred(data []byte) bool {
	if !r.cfg.Deferred {
		return false
	}
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if r.active {
		return false
	}
	if len(r.pending) >= maxDeferred {
		r.pending = r.pending[1:]
		r.cfg.Counters.Add("reputation.deferred_dropped")
	}
	r.pending = append(r.pending, bytes.Clone(data))
	r.cfg.Counters.Add("reputation.deferred")
	return true
}

// Activate takes in the receipts gossip brought while they waited
// (ReceiptsConfig.Deferred), in the order they came, and every later one
// as it comes: the daemon calls it before its reputation book is read for
// other peers (its first job posted, a reputation or providers query).
func (r *Receipts) Activate() {
	r.pmu.Lock()
	if r.active || !r.cfg.Deferred {
		r.pmu.Unlock()
		return
	}
	r.active = true
	pending := r.pending
	r.pending = nil
	r.pmu.Unlock()
	for _, data := range pending {
		r.take(data)
	}
}

// take feeds one gossiped receipt to the book.
func (r *Receipts) take(data []byte) {
	defer r.changed.Notify()
	sr, err := attest.UnmarshalReceipt(data)
	if err != nil {
		r.cfg.Counters.Add("reputation.gossip_malformed")
		return
	}
	if err := r.cfg.Book.AddReceipt(sr); err != nil {
		r.log.Debug("gossiped receipt rejected", "err", err)
	}
}

// settled returns the two-party receipt this node recorded for a lease, or
// nil when it recorded none.
func (r *Receipts) settled(leaseID string) (*attest.SignedReceipt, error) {
	entries, err := r.cfg.Ledger.List(record.Filter{Kind: record.KindReceipt, LeaseID: leaseID, Limit: 1})
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	return attest.UnmarshalReceipt(entries[0].Data)
}

// Wait waits for gossip in flight (call after cancelling the context).
func (r *Receipts) Wait() {
	r.mu.Lock()
	r.mu.Unlock() //nolint:staticcheck // orders gossip's Add before Wait
	r.wg.Wait()
}
