package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/auctiontest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/gpumesh/gpumesh/p2p/frame"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// The harness runs whole nodes (renter Tracker, provider Supervisor and
// auction Provider, Receipts) on an auctiontest.MemNetwork, with real ledgers
// and reputation books and a fake executor whose jobs the test controls.

const (
	hbEvery   = 40 * time.Millisecond
	bidWindow = terms.MinBidWindow
)

// fakeExec runs fake jobs. A job's command says what it does:
//
//	["run", "<ms>", "<exit>"]     exits with <exit> after <ms> milliseconds
//	["gate", "<name>", "<exit>"]  exits with <exit> when the gate is opened
//	["panic", "-", "0"]           panics in Start (a bug in the lease's path)
//
// A job with an outputs dir writes r.txt ("result\n") there, and
// FAKE_OUTPUT_FILES (in its env) more empty files; FAKE_LOG_BYTES more
// bytes of log than its start line. Every job
// stops at its spec's deadline (runtime.ReasonDeadline) and on
// Handle.Stop (runtime.ReasonStopped, exit 0: it checkpoints).
type fakeExec struct {
	dir   string
	mu    sync.Mutex
	gates map[string]chan struct{}
	// starts lists each job's id as it starts (a list, not a channel: a
	// provider may start more jobs than any buffer while no test reads
	// them, and a start must never wait on a reader).
	starts []string
	// specs holds each started job's spec, by id.
	specs sync.Map
	// running holds the job running on each device, by index; overlaps
	// lists every start on a device another job was still running on (a
	// GPU booked twice).
	running  map[int]string
	overlaps []string
}

func newFakeExec(t *testing.T) *fakeExec {
	return &fakeExec{dir: t.TempDir(), gates: map[string]chan struct{}{}, running: map[int]string{}}
}

func (e *fakeExec) gate(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[name]
	if g == nil {
		g = make(chan struct{})
		e.gates[name] = g
	}
	return g
}

// open releases the jobs waiting on a gate.
func (e *fakeExec) open(name string) {
	g := e.gate(name)
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

func (e *fakeExec) Name() string { return "fake" }

func (e *fakeExec) Start(_ context.Context, spec runtime.Spec, stdout, _ io.Writer) (runtime.Handle, error) {
	if len(spec.Command) != 3 {
		return nil, fmt.Errorf("fake: bad command %q", spec.Command)
	}
	exit, err := strconv.Atoi(spec.Command[2])
	if err != nil {
		return nil, err
	}
	var done <-chan struct{}
	started := time.Now()
	var endsAt time.Time // when a "run" job exits of itself
	switch spec.Command[0] {
	case "run":
		ms, err := strconv.Atoi(spec.Command[1])
		if err != nil {
			return nil, err
		}
		endsAt = started.Add(time.Duration(ms) * time.Millisecond)
		c := make(chan struct{})
		time.AfterFunc(time.Until(endsAt), func() { close(c) })
		done = c
	case "gate":
		done = e.gate(spec.Command[1])
	case "panic":
		// A bug in the lease's path: the executor panics.
		panic("fake: executor bug in " + spec.ID)
	case "ended":
		// Over before Start returns: a job of milliseconds on a busy host.
		c := make(chan struct{})
		close(c)
		done = c
	default:
		return nil, fmt.Errorf("fake: unknown job %q", spec.Command[0])
	}
	wd := filepath.Join(e.dir, spec.ID)
	if err := os.MkdirAll(wd, 0o700); err != nil {
		return nil, err
	}
	if spec.Outputs != "" {
		// The job leaves a result file in its outputs dir.
		out := filepath.Join(wd, spec.Outputs)
		if err := os.MkdirAll(out, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(out, "r.txt"), []byte("result\n"), 0o600); err != nil {
			return nil, err
		}
		// FAKE_OUTPUT_FILES=<n> leaves n more, empty, files.
		n, _ := strconv.Atoi(spec.Env["FAKE_OUTPUT_FILES"])
		for i := 0; i < n; i++ {
			if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("f%05d", i)), nil, 0o600); err != nil {
				return nil, err
			}
		}
	}
	e.specs.Store(spec.ID, spec)
	h := &fakeHandle{wd: wd, stop: make(chan struct{}), done: make(chan struct{}), started: started, endsAt: endsAt}
	e.occupy(spec.ID, spec.GPUs)
	h.free = func() { e.vacate(spec.ID, spec.GPUs) }
	fmt.Fprintf(stdout, "fake job %s started\n", spec.ID)
	if n, _ := strconv.Atoi(spec.Env["FAKE_LOG_BYTES"]); n > 0 {
		_, _ = stdout.Write(bytes.Repeat([]byte("x"), n))
	}
	go h.run(done, exit, spec.Deadline)
	e.mu.Lock()
	e.starts = append(e.starts, spec.ID)
	e.mu.Unlock()
	if spec.Command[0] == "ended" {
		<-h.done
	}
	return h, nil
}

// startedJobs lists the ids of the jobs started so far, in order.
func (e *fakeExec) startedJobs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.starts...)
}

// occupy marks devices running job id, noting each that another job still
// runs on.
func (e *fakeExec) occupy(id string, devices []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range devices {
		if other, busy := e.running[d]; busy {
			e.overlaps = append(e.overlaps, fmt.Sprintf("device %d: %s started while %s ran", d, id, other))
		}
		e.running[d] = id
	}
}

// vacate frees the devices job id ran on.
func (e *fakeExec) vacate(id string, devices []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range devices {
		if e.running[d] == id {
			delete(e.running, d)
		}
	}
}

// doubleBooked lists the starts on a device another job was running on.
func (e *fakeExec) doubleBooked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.overlaps...)
}

type fakeHandle struct {
	free     func() // the job's devices are free again
	wd       string
	started  time.Time
	endsAt   time.Time // when it exits of itself (zero: on a gate)
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	res      runtime.Result
}

func (h *fakeHandle) run(exited <-chan struct{}, exit int, deadline time.Time) {
	var dl <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		dl = t.C
	}
	res := runtime.Result{Started: h.started, ExitCode: exit, Reason: runtime.ReasonExited}
	select {
	case <-exited:
	case <-dl:
		if !h.endsAt.IsZero() && h.endsAt.Before(deadline) {
			// It exits before its deadline: that the deadline's timer
			// came first to this goroutine is the host's scheduling (a
			// busy host runs both late), not the job overrunning.
			<-exited
			res.Ended = h.endsAt
			break
		}
		res.ExitCode, res.Reason = 143, runtime.ReasonDeadline
	case <-h.stop:
		res.ExitCode, res.Reason = 0, runtime.ReasonStopped
	}
	if res.Ended.IsZero() {
		res.Ended = time.Now()
	}
	h.res = res
	if h.free != nil {
		h.free()
	}
	close(h.done)
}

func (h *fakeHandle) Wait() runtime.Result { <-h.done; return h.res }
func (h *fakeHandle) Stop(time.Duration) error {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
	return nil
}
func (h *fakeHandle) WorkDir() string { return h.wd }
func (h *fakeHandle) Cleanup() error  { return nil }

// crashable makes a node's disk and network die with it: after crash,
// its store and transport refuse everything, as a killed process would.
type crashable struct {
	dead atomic.Bool
	// noReceipts refuses the node's outgoing receipt requests (the final
	// report still goes through).
	noReceipts atomic.Bool
	// maxEvent is the largest lease event the node sent, in bytes.
	maxEvent atomic.Int64
	// loseConfirms delivers the node's awards but loses their confirms:
	// the provider books the lease, the renter times out.
	loseConfirms atomic.Bool
	// dropCancels loses the node's lease cancels (and releases).
	dropCancels atomic.Bool
	// dropHeartbeats loses the node's heartbeats.
	dropHeartbeats atomic.Bool
	// dropMoves loses the node's lease events that tell of a move.
	dropMoves atomic.Bool
	// withholdGossip drops the receipts the node gossips (a renter that
	// keeps its providers' credit to itself).
	withholdGossip atomic.Bool
	// holdGossip, when set, runs before the node gossips receipts.
	holdGossip atomic.Pointer[func()]
	// awardDelay is how long each award (or bid release) the node sends
	// takes to reach its provider, in nanoseconds: a far or loaded
	// network.
	awardDelay atomic.Int64
	// rewriteAward, when set, rewrites each award the node sends (a
	// renter that lies about its lease id).
	rewriteAward atomic.Pointer[func([]byte) []byte]
	// holdConfirm, when set, runs before an award's confirm is handed
	// back to the node (the provider has booked, and may run, the lease).
	holdConfirm atomic.Pointer[func()]
	// serveLog, when set, replaces the job log the node serves its
	// renters (a provider that lies about its work).
	serveLog atomic.Pointer[func(leaseID string) (io.ReadCloser, error)]
	// rewriteReceipt, when set, rewrites each receipt the node sends for
	// countersigning (a provider that signs what it likes).
	rewriteReceipt atomic.Pointer[func([]byte) []byte]
	// loseReceiptAnswer delivers the node's next receipt but loses the
	// renter's answer (the countersigned receipt): the stream broke after
	// the renter recorded it.
	loseReceiptAnswer atomic.Bool
}

var errCrashed = errors.New("node crashed")

// crashStore is a node's store, notifying b once each record is written
// (a save wakes its waiters before it writes: a waiter reading the store
// must hear of the write itself).
type crashStore struct {
	c *crashable
	s *ledger.State
	b *broadcast.Signal
}

func (s crashStore) Put(key string, v any) error {
	if s.c.dead.Load() {
		return errCrashed
	}
	defer s.b.Notify()
	return s.s.Put(key, v)
}
func (s crashStore) List(fn func(string, []byte) error) error { return s.s.List(fn) }

type crashTransport struct {
	c *crashable
	t *auctiontest.MemTransport
}

func (t crashTransport) Request(ctx context.Context, to peer.ID, proto protocol.ID, data []byte) ([]byte, error) {
	if t.c.dead.Load() || (proto == wire.ProtoReceipt && t.c.noReceipts.Load()) ||
		(proto == wire.ProtoCancel && t.c.dropCancels.Load()) || (proto == wire.ProtoHeartbeat && t.c.dropHeartbeats.Load()) {
		return nil, errCrashed
	}
	if proto == wire.ProtoLeaseEvent && t.c.dropMoves.Load() {
		var ev wire.LeaseEvent
		if env, err := sign.UnmarshalEnvelope(data); err == nil && json.Unmarshal(env.Payload, &ev) == nil && ev.Moved != nil {
			return nil, errCrashed
		}
	}
	if len(data) > frame.Max {
		// What a libp2p stream refuses.
		return nil, frame.ErrTooLarge
	}
	if proto == wire.ProtoLeaseEvent && int64(len(data)) > t.c.maxEvent.Load() {
		t.c.maxEvent.Store(int64(len(data)))
	}
	if rw := t.c.rewriteReceipt.Load(); rw != nil && proto == wire.ProtoReceipt {
		data = (*rw)(data)
	}
	if proto == wire.ProtoReceipt && t.c.loseReceiptAnswer.CompareAndSwap(true, false) {
		if _, err := t.t.Request(ctx, to, proto, data); err != nil {
			return nil, err
		}
		return nil, context.DeadlineExceeded
	}
	return t.t.Request(ctx, to, proto, data)
}
func (t crashTransport) Publish(ctx context.Context, topic string, data []byte) error {
	if t.c.dead.Load() {
		return errCrashed
	}
	if topic == wire.ReputationTopic {
		if hold := t.c.holdGossip.Load(); hold != nil {
			(*hold)()
		}
		if t.c.withholdGossip.Load() {
			return nil
		}
	}
	return t.t.Publish(ctx, topic, data)
}
func (t crashTransport) SendCall(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	if t.c.dead.Load() {
		return nil, errCrashed
	}
	return t.t.SendCall(ctx, to, data)
}
func (t crashTransport) SendBid(ctx context.Context, to peer.ID, data []byte) error {
	if t.c.dead.Load() {
		return errCrashed
	}
	return t.t.SendBid(ctx, to, data)
}
func (t crashTransport) SendAward(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	if t.c.dead.Load() {
		return nil, errCrashed
	}
	if t.c.loseConfirms.Load() {
		if _, err := t.t.SendAward(ctx, to, data); err != nil {
			return nil, err
		}
		<-ctx.Done() // the confirm never arrives
		return nil, ctx.Err()
	}
	if rw := t.c.rewriteAward.Load(); rw != nil {
		data = (*rw)(data)
	}
	if d := time.Duration(t.c.awardDelay.Load()); d > 0 {
		in := time.NewTimer(d)
		select {
		case <-in.C:
		case <-ctx.Done():
			in.Stop()
			return nil, ctx.Err()
		}
	}
	resp, err := t.t.SendAward(ctx, to, data)
	if hold := t.c.holdConfirm.Load(); hold != nil && err == nil {
		(*hold)()
	}
	return resp, err
}

// provSpec describes a provider node.
type provSpec struct {
	model   string
	price   float64
	preempt bool // AllowPreemption
	// gpus, when set, are the host's devices (else one GPU of model), as
	// NVML would list them: the calendar books each.
	gpus []terms.GPU
	// exec, when set, runs the jobs instead of the fake executor.
	exec runtime.Executor
	// telemetry, when set, is the supervisor's sampler; a host whose gpus
	// were detected (NVML) also signs a fingerprint of them.
	telemetry func(pgid int, devices []int) runtime.Telemetry
	// sensors, when set, is the host's temperature and power reading,
	// held to maxTempC.
	sensors  func() (tempC, powerW int)
	maxTempC int
	// inputs, when set, fetches jobs' input artifacts
	// (SupervisorConfig.Artifacts).
	inputs func(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (func(), string, error)
	// noPersist is the policy's no_persist; maxRetain the supervisor's
	// JobFilesMaxRetain; now its clock (default time.Now); scrub its
	// Scrub.
	noPersist string
	maxRetain time.Duration
	now       Clock
	scrub     func(leaseID string) string
	// network is the supervisor's Network hook.
	network func(l terms.Lease, job terms.Job, spec *runtime.Spec) (func(runtime.Handle), func(), error)
}

// specHost is a provider's host as its provSpec describes it: the
// supervisor's collaborators its hooks stand for.
type specHost struct{ spec *provSpec }

func (p *provSpec) host() specHost { return specHost{p} }

// wire sets the collaborators whose hooks the spec sets.
func (h specHost) wire(cfg *SupervisorConfig) {
	if h.spec.telemetry != nil {
		cfg.Telemetry = h
	}
	if h.spec.sensors != nil {
		cfg.Thermal = h
	}
	if h.spec.inputs != nil {
		cfg.Artifacts = h
	}
	if h.spec.scrub != nil {
		cfg.Scrub = h
	}
	if h.spec.network != nil {
		cfg.Network = h
	}
}

func (h specHost) Telemetry(pgid int, devices []int) runtime.Telemetry {
	return h.spec.telemetry(pgid, devices)
}
func (h specHost) Sensors() (int, int) { return h.spec.sensors() }
func (h specHost) Limits() (int, int)  { return h.spec.maxTempC, 0 }
func (h specHost) Inputs(ctx context.Context, job terms.Job, dir string, keys *wire.LeaseKeys) (func(), string, error) {
	return h.spec.inputs(ctx, job, dir, keys)
}

// Outputs stores no outputs artifact: the spec's host has no store.
func (h specHost) Outputs(string, string, *wire.LeaseKeys) (string, error) {
	return "", errors.New("no artifact store")
}
func (h specHost) Remove(string) error         { return nil }
func (h specHost) Scrub(leaseID string) string { return h.spec.scrub(leaseID) }
func (h specHost) Hook(l terms.Lease, job terms.Job, spec *runtime.Spec) (func(runtime.Handle), func(), error) {
	return h.spec.network(l, job, spec)
}

// freshSelf is a provider's capability, issued afresh at each call.
type freshSelf terms.Capability

func (c freshSelf) Capability() terms.Capability {
	cc := terms.Capability(c)
	cc.IssuedAt, cc.ExpiresAt = time.Now(), time.Now().Add(time.Hour)
	return cc
}
func (freshSelf) Reliability() float64 { return terms.NeutralReliability }

// node is one in-memory daemon.
type node struct {
	h      *harness
	signer *sign.Signer
	db     *ledger.DB
	spec   *provSpec

	ctx      context.Context
	cancel   context.CancelFunc
	crash    *crashable
	tr       *auctiontest.MemTransport
	counters *Counters
	book     *attest.Book
	receipts *Receipts
	tracker  *Tracker
	sup      *Supervisor
	provider *auction.Provider
	exec     *fakeExec
	jobsDir  string
	kept     string // the tracker's KeptDir
	closed   bool
}

type harness struct {
	t   *testing.T
	net *auctiontest.MemNetwork
	// abandonGrace is the renters' grace after a lease's end.
	abandonGrace time.Duration
	// lossAfter is how long a running lease's provider may stay silent
	// before its renter calls it lost.
	lossAfter time.Duration
	// hbEvery is every node's heartbeat interval (default hbEvery).
	hbEvery time.Duration
	// settleWait bounds a renter's wait for a failed lease's receipt
	// before it requeues the job (TrackerConfig.SettleWait).
	settleWait time.Duration
	// queueBackoff is the renters' first and longest wait before a queued
	// job is offered again (default 20 ms doubling to 200 ms).
	queueBackoff, queueBackoffMax time.Duration
	// rebookAhead is the renters' TrackerConfig.RebookAhead (0: the
	// default; -1: no rebooks, for tests of a provider's own queue).
	rebookAhead time.Duration
	// nodes are the started nodes by peer id (the latest start of each).
	nodes sync.Map
	// onSave, when set, sees every job record the renters persist
	// (TrackerConfig.Pins); onCall every call for bids as a provider
	// takes it in.
	onSave func(api.JobView)
	onCall func(terms.Call)
	// changed is notified at each thing that can move a node's state: a
	// message a node handled, a save (or other change) its tracker or
	// supervisor announces, a ledger append, a line it logs (what its
	// timers do is logged).
	// waitFor re-checks its condition at each.
	changed broadcast.Signal
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, net: auctiontest.NewMemNetwork(), abandonGrace: time.Minute, lossAfter: time.Second, hbEvery: hbEvery,
		settleWait: 2 * time.Second, queueBackoff: 20 * time.Millisecond, queueBackoffMax: 200 * time.Millisecond}
}

// renter starts a renter-only node.
func (h *harness) renter() *node { return h.start(signtest.New(h.t), nil, nil) }

// provider starts a provider node with one GPU.
func (h *harness) provider(spec provSpec) *node { return h.start(signtest.New(h.t), nil, &spec) }

// start brings a node up on db (a fresh ledger when nil): the restart of a
// node reuses its signer and ledger.
func (h *harness) start(s *sign.Signer, db *ledger.DB, spec *provSpec) *node {
	t := h.t
	t.Helper()
	if db == nil {
		var err error
		if db, err = ledger.Open(t.TempDir()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
	}
	n := &node{h: h, signer: s, db: db, spec: spec, crash: &crashable{}, counters: NewCounters(),
		book: attest.NewBook(attest.BookOptions{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.kept = h.keptDir(peer.ID(s.ID()))
	n.tr = h.net.Join(peer.ID(s.ID()))
	ct := crashTransport{c: n.crash, t: n.tr}
	log := slog.New(notifyLog{b: &h.changed})
	var err error
	// Receipts are gossiped after a second here, not DefaultGossipEvery:
	// the tests wait for a third node to hear them. A provider waits 5 s
	// to hear its renter's gossip (a renter's batch goes out within 1 s).
	if n.receipts, err = NewReceipts(n.ctx, ReceiptsConfig{Ledger: notifyingLedger{db, &h.changed}, Book: n.book, Transport: ct, Counters: n.counters, Log: log,
		GossipEvery: time.Second, HeardWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if n.tracker, err = NewTracker(n.ctx, TrackerConfig{Signer: s, Transport: ct, Auction: ct,
		Store: crashStore{n.crash, db.State("renter-jobs"), &h.changed}, Receipts: n.receipts, HeartbeatInterval: h.hbEvery,
		AbandonGrace: h.abandonGrace, LossAfter: h.lossAfter, SettleWait: h.settleWait, Counters: n.counters,
		QueueBackoff: h.queueBackoff, QueueBackoffMax: h.queueBackoffMax, RebookAhead: h.rebookAhead, Evidence: streams{h, peer.ID(s.ID())},
		KeptDir: n.kept, Pins: h.pins(), Directory: directory{h}, Log: log}); err != nil {
		t.Fatal(err)
	}
	h.forward(n.ctx, &n.tracker.changed)
	h.forward(n.ctx, &n.counters.changed)
	handlers := auctiontest.MemHandlers{OnBid: n.tracker.Auction().HandleBid}
	if spec != nil {
		n.exec = newFakeExec(t)
		var exec runtime.Executor = n.exec
		if spec.exec != nil {
			exec = spec.exec
		}
		devs := spec.gpus
		if len(devs) == 0 {
			devs = []terms.GPU{{Model: spec.model, VRAMGB: 80}}
		}
		// A restarted node keeps its data dir (job logs and outputs).
		if prev, ok := h.nodes.Load(peer.ID(s.ID())); ok && prev.(*node).jobsDir != "" {
			n.jobsDir = prev.(*node).jobsDir
		} else {
			n.jobsDir = t.TempDir()
		}
		var fpEnv *sign.Envelope
		if len(devs) > 0 && devs[0].Detected {
			if fpEnv, err = attest.SignFingerprint(s, attest.Fingerprint{GPUs: devs, Source: attest.SourceNVML, IssuedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		cfg := SupervisorConfig{Signer: s, Transport: ct,
			Store: crashStore{n.crash, db.State("provider-leases"), &h.changed}, Receipts: n.receipts, Exec: exec,
			JobsDir: n.jobsDir, GPUs: devs, Fingerprint: fpEnv, HeartbeatInterval: h.hbEvery, PreemptGrace: time.Second,
			JobFilesMaxRetain: spec.maxRetain, Now: spec.now,
			RecoverDelay: time.Millisecond, SettleRetry: 20 * time.Millisecond, SettleRetryMax: 100 * time.Millisecond,
			Counters: n.counters, Log: log}
		spec.host().wire(&cfg)
		if n.sup, err = NewSupervisor(n.ctx, cfg); err != nil {
			t.Fatal(err)
		}
		h.forward(n.ctx, &n.sup.changed)
		capab := terms.Capability{Peer: s.ID().String(), Region: "eu-west",
			GPUs: devs,
			Policy: terms.Policy{PriceFloor: spec.price, AcceptPreemptible: true, AllowPreemption: spec.preempt, MaxTempC: spec.maxTempC,
				NoPersist: spec.noPersist}}
		if n.provider, err = auction.NewProvider(auction.ProviderConfig{Signer: s, Transport: ct,
			Calendar: auction.NewCalendar(len(devs)), Log: log, Runtime: n.sup, Sensors: n.sup, Self: freshSelf(capab)}); err != nil {
			t.Fatal(err)
		}
		n.sup.SetBookings(n.provider)
		if err := n.sup.Recover(); err != nil {
			t.Fatal(err)
		}
		handlers.OnCall, handlers.OnGossipedCall = n.provider.HandleCall, n.provider.HandleGossipedCall
		if see := h.onCall; see != nil {
			seen := func(data []byte) {
				if c, err := terms.DecodeCall(data); err == nil {
					see(c)
				}
			}
			handlers.OnCall = func(from peer.ID, data []byte) ([]byte, error) {
				seen(data)
				return n.provider.HandleCall(from, data)
			}
			handlers.OnGossipedCall = func(from peer.ID, data []byte) error {
				seen(data)
				return n.provider.HandleGossipedCall(from, data)
			}
		}
		handlers.OnAward = n.provider.HandleAward
		n.tr.OnRequest(wire.ProtoCancel, h.notifying(n.sup.HandleCancel))
		n.tr.Subscribe(auction.ProviderTopics(&capab)...)
	}
	n.tr.Handle(h.notifyingHandlers(handlers))
	n.tr.OnRequest(wire.ProtoHeartbeat, h.notifying(n.tracker.HandleHeartbeat))
	n.tr.OnRequest(wire.ProtoLeaseEvent, h.notifying(n.tracker.HandleLeaseEvent))
	n.tr.OnRequest(wire.ProtoReceipt, h.notifying(n.tracker.HandleReceipt))
	n.tr.OnTopic(wire.ReputationTopic, func(from peer.ID, data []byte) {
		defer h.changed.Notify()
		n.receipts.HandleGossip(from, data)
	})
	t.Cleanup(n.close)
	h.nodes.Store(peer.ID(s.ID()), n)
	return n
}

// forward notifies h.changed at each notify of b until ctx ends. It waits
// on b again before notifying, so no change of b's is missed.
func (h *harness) forward(ctx context.Context, b *broadcast.Signal) {
	next := b.Wait()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-next:
			}
			next = b.Wait()
			h.changed.Notify()
		}
	}()
}

// notifying is handle, notifying h.changed once it has answered.
func (h *harness) notifying(handle auctiontest.MemRequestHandler) auctiontest.MemRequestHandler {
	return func(ctx context.Context, from peer.ID, data []byte) ([]byte, error) {
		defer h.changed.Notify()
		return handle(ctx, from, data)
	}
}

// notifyingHandlers are hs, notifying h.changed once each has answered.
func (h *harness) notifyingHandlers(hs auctiontest.MemHandlers) auctiontest.MemHandlers {
	out := hs
	if f := hs.OnCall; f != nil {
		out.OnCall = func(from peer.ID, data []byte) ([]byte, error) { defer h.changed.Notify(); return f(from, data) }
	}
	if f := hs.OnGossipedCall; f != nil {
		out.OnGossipedCall = func(from peer.ID, data []byte) error { defer h.changed.Notify(); return f(from, data) }
	}
	if f := hs.OnBid; f != nil {
		out.OnBid = func(from peer.ID, data []byte) error { defer h.changed.Notify(); return f(from, data) }
	}
	if f := hs.OnAward; f != nil {
		out.OnAward = func(from peer.ID, data []byte) ([]byte, error) { defer h.changed.Notify(); return f(from, data) }
	}
	return out
}

// notifyingLedger is a node's ledger, notifying b after each append.
type notifyingLedger struct {
	Ledger
	b *broadcast.Signal
}

func (l notifyingLedger) AppendAll(entries []record.Entry) ([]record.Entry, error) {
	defer l.b.Notify()
	return l.Ledger.AppendAll(entries)
}

// notifyLog is a log that notifies b at each line and keeps nothing, or
// writes each line to stderr when GPUMESH_TEST_LOG is set (to read what
// led to a failure).
type notifyLog struct {
	b     *broadcast.Signal
	attrs []slog.Attr
}

func (l notifyLog) Enabled(context.Context, slog.Level) bool { return true }

func (l notifyLog) Handle(ctx context.Context, r slog.Record) error {
	l.b.Notify()
	if os.Getenv("GPUMESH_TEST_LOG") != "" {
		var sb strings.Builder
		sb.WriteString(r.Time.Format("15:04:05.000") + " " + r.Message)
		for _, a := range l.attrs {
			sb.WriteString(" " + a.String())
		}
		r.Attrs(func(a slog.Attr) bool { sb.WriteString(" " + a.String()); return true })
		fmt.Fprintln(os.Stderr, sb.String())
	}
	return nil
}

func (l notifyLog) WithAttrs(as []slog.Attr) slog.Handler {
	return notifyLog{b: l.b, attrs: append(append([]slog.Attr{}, l.attrs...), as...)}
}
func (l notifyLog) WithGroup(string) slog.Handler { return l }

// pins is the renters' JobPins: h.onSave, when set.
func (h *harness) pins() JobPins {
	if h.onSave == nil {
		return nil
	}
	return savePins(h.onSave)
}

// savePins hands each job record a renter persists to a test.
type savePins func(api.JobView)

func (f savePins) PinLive(v api.JobView) { f(v) }

// directory is what the renters know of the started providers: their GPU
// counts; no advertised fingerprint, no expected bidders.
type directory struct{ h *harness }

func (d directory) GPUs(provider string) int          { return d.h.providerGPUs(provider) }
func (directory) ExpectedBidders(*terms.Job) []string { return nil }
func (directory) Fingerprint(string) string           { return "" }

// providerGPUs is a started provider's GPU count, as its capability
// record says (the daemon's discovery.GPUs); 0 for anybody else.
func (h *harness) providerGPUs(provider string) int {
	id, err := peer.Decode(provider)
	if err != nil {
		return 0
	}
	x, ok := h.nodes.Load(id)
	if !ok || x.(*node).spec == nil {
		return 0
	}
	if n := len(x.(*node).spec.gpus); n > 0 {
		return n
	}
	return 1
}

// streams is a renter's lease streams to its providers (its Evidence).
type streams struct {
	h      *harness
	renter peer.ID
}

// FetchLog is renter's logs stream: it opens a lease's log on its provider
// as the daemon's serveLogs does (only the lease's renter may read it).
func (st streams) FetchLog(_ context.Context, prov peer.ID, leaseID string) (io.ReadCloser, error) {
	h, renter := st.h, st.renter
	x, ok := h.nodes.Load(prov)
	if !ok {
		return nil, fmt.Errorf("provider %s unreachable", prov)
	}
	p := x.(*node)
	if p.sup == nil || p.crash.dead.Load() {
		return nil, fmt.Errorf("provider %s unreachable", prov)
	}
	a, ok := p.sup.Authorize(leaseID, renter)
	if !ok {
		return nil, errors.New("stream reset")
	}
	if serve := p.crash.serveLog.Load(); serve != nil {
		return (*serve)(leaseID)
	}
	return os.Open(a.LogPath())
}

// FetchOutputs is the renter's outputs stream, as the daemon's
// serveOutputs answers it: the lease's whole manifest and its files'
// bundle, once the job ended.
func (st streams) FetchOutputs(_ context.Context, prov peer.ID, leaseID, _ string) ([]terms.OutputFile, io.ReadCloser, error) {
	h, renter := st.h, st.renter
	x, ok := h.nodes.Load(prov)
	if !ok {
		return nil, nil, fmt.Errorf("provider %s unreachable", prov)
	}
	p := x.(*node)
	if p.sup == nil || p.crash.dead.Load() {
		return nil, nil, fmt.Errorf("provider %s unreachable", prov)
	}
	a, ok := p.sup.Authorize(leaseID, renter)
	if !ok {
		return nil, nil, errors.New("stream reset")
	}
	outs, done := a.Outputs()
	if !done {
		return nil, nil, errors.New("job has not finished")
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(wire.WriteBundle(pw, a.OutputDir(), outs)) }()
	return outs, pr, nil
}

// keptDir is a renter's KeptDir, the same across its restarts.
func (h *harness) keptDir(renter peer.ID) string {
	if prev, ok := h.nodes.Load(renter); ok {
		return prev.(*node).kept
	}
	return h.t.TempDir()
}

func (n *node) id() string { return n.signer.ID().String() }

// close stops the node as the daemon does: its jobs are stopped and
// reported, then its goroutines end.
func (n *node) close() {
	if n.closed {
		return
	}
	n.closed = true
	if n.exec != nil {
		n.exec.mu.Lock()
		for name, g := range n.exec.gates {
			select {
			case <-g:
			default:
				close(g)
			}
			delete(n.exec.gates, name)
		}
		n.exec.mu.Unlock()
	}
	n.cancel()
	if n.sup != nil {
		n.sup.Close()
	}
	n.tracker.Wait()
	n.receipts.Wait()
}

// kill crashes the node: from now on it neither writes its store nor
// reaches the network, and its goroutines are ended. restart brings it back
// on the same key and ledger.
func (n *node) kill() {
	n.crash.dead.Store(true)
	n.h.net.Drop(peer.ID(n.signer.ID()))
	n.close()
}

func (n *node) restart() *node {
	n.h.t.Helper()
	n.h.net.Restore(peer.ID(n.signer.ID()))
	return n.h.start(n.signer, n.db, n.spec)
}

// job is a one-GPU job running the fake command.
func job(tier terms.Tier, maxPrice float64, dur time.Duration, cmd ...string) terms.Job {
	return terms.Job{Tier: tier, MaxPrice: maxPrice, GPUCount: 1, Duration: dur, Region: "eu",
		Preemptible: tier == terms.Bronze, BidWindow: bidWindow, Run: terms.RunSpec{Command: cmd}}
}

// post runs the job's auction on n and fails unless it was leased.
func (n *node) post(j terms.Job) api.JobView {
	n.h.t.Helper()
	v, err := n.tracker.Post(j)
	if err != nil {
		n.h.t.Fatalf("post: %v", err)
	}
	if v.Lease == nil {
		n.h.t.Fatalf("job %s not leased: %s %v", v.Job.ID, v.State, v.Reasons)
	}
	return v
}

// waitFor checks cond at each change of h's nodes (h.changed) until it
// holds, failing the test after within.
func (h *harness) waitFor(within time.Duration, what string, cond func() bool) {
	h.t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		next := h.changed.Wait()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			h.t.Fatalf("%s: not reached within %s", what, within)
		}
	}
}

// waitJob waits until the renter's view of a job satisfies cond.
func (n *node) waitJob(id, what string, cond func(api.JobView) bool) api.JobView {
	n.h.t.Helper()
	return n.waitJobWithin(id, 3*time.Second, what, cond)
}

// waitJobWithin is waitJob with its own limit.
func (n *node) waitJobWithin(id string, within time.Duration, what string, cond func(api.JobView) bool) api.JobView {
	n.h.t.Helper()
	var v api.JobView
	n.h.waitFor(within, "job "+id+": "+what, func() bool {
		var err error
		v, err = n.tracker.View(id)
		return err == nil && cond(v)
	})
	return v
}

// receipts returns the ledger's entries of kind for a lease.
func (n *node) entries(kind record.Kind, leaseID string) []record.Entry {
	n.h.t.Helper()
	es, err := n.db.List(record.Filter{Kind: kind, LeaseID: leaseID})
	if err != nil {
		n.h.t.Fatal(err)
	}
	return es
}

// lease returns the provider's record of a lease, as its stats show it.
func (n *node) lease(id string) (api.ProviderLease, bool) {
	var v api.ProviderStatsView
	n.sup.FillStats(&v)
	for _, pl := range append(v.Running, v.Recent...) {
		if pl.Lease.ID == id {
			return pl, true
		}
	}
	return api.ProviderLease{}, false
}
