package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/ledger"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxOutputBytes caps the result files one lease may return.
const MaxOutputBytes = 256 << 20

// JobFilesRetention is how long a provider keeps a lease's job log and
// collected outputs.
const JobFilesRetention = 7 * 24 * time.Hour

// providerRecord is what a provider persists per lease, so a restart never
// forgets a job.
type providerRecord struct {
	Rec      api.ProviderLease    `json:"rec"`
	Job      auction.Job          `json:"job"`
	Pgid     int                  `json:"pgid,omitempty"`
	LastBeat time.Time            `json:"last_beat,omitempty"`
	Settled  bool                 `json:"settled"`
	Outputs  []auction.OutputFile `json:"outputs,omitempty"`
}

// leaseRun executes one confirmed lease on the provider.
type leaseRun struct {
	m    *market
	mu   sync.Mutex
	pr   providerRecord
	h    runtime.Handle
	stop chan struct{} // closed to abort a pending or running job
	// stopAs is the run state recorded when the job is stopped on purpose.
	stopAs     auction.RunState
	stopDetail string
	done       chan struct{}
	confirmed  time.Time // when the lease was confirmed (for start latency)
}

func (m *market) logPath(leaseID string) string {
	return filepath.Join(m.jobsDir, "logs", leaseID+".log")
}
func (m *market) outDir(leaseID string) string { return filepath.Join(m.jobsDir, "outputs", leaseID) }
func (m *market) workRoot() string             { return m.work }

// pruneJobFiles removes job logs and outputs older than JobFilesRetention.
func (m *market) pruneJobFiles() {
	for _, dir := range []string{filepath.Join(m.jobsDir, "logs"), filepath.Join(m.jobsDir, "outputs")} {
		if n, err := runtime.Prune(dir, JobFilesRetention); err != nil {
			m.d.log.Warn("prune job files", "err", err)
		} else if n > 0 {
			m.d.log.Info("pruned job files", "dir", dir, "count", n)
		}
	}
}

func (m *market) saveRun(r *leaseRun) {
	r.mu.Lock()
	pr := r.pr
	r.mu.Unlock()
	if err := m.provState.Put(pr.Rec.Lease.ID, pr); err != nil {
		m.d.log.Error("persist lease", "lease", pr.Rec.Lease.ID, "err", err)
	}
}

// onProviderLease is the auction's callback for a confirmed lease: it stops
// the bronze leases this one evicts and schedules the job.
func (m *market) onProviderLease(l auction.Lease, job auction.Job, preempts []string) {
	for _, id := range preempts {
		m.mu.Lock()
		victim := m.runs[id]
		m.mu.Unlock()
		if victim != nil {
			victim.abort(auction.RunPreempted, fmt.Sprintf("preempted by %s lease %s", job.Tier, l.ID))
		}
	}
	r := &leaseRun{m: m, stop: make(chan struct{}), done: make(chan struct{}), confirmed: m.d.now(),
		pr: providerRecord{Rec: api.ProviderLease{Lease: l, Run: auction.RunPending}, Job: job}}
	m.mu.Lock()
	m.runs[l.ID] = r
	m.mu.Unlock()
	m.saveRun(r)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r.run()
	}()
}

// abort stops a pending or running job, recording why.
func (r *leaseRun) abort(as auction.RunState, detail string) {
	r.mu.Lock()
	if r.stopAs == "" {
		r.stopAs, r.stopDetail = as, detail
		close(r.stop)
	}
	r.mu.Unlock()
}

// shutdown stops the job because the daemon is stopping and waits for it.
func (r *leaseRun) shutdown() {
	r.abort(auction.RunFailed, "provider daemon shut down during the lease")
	<-r.done
}

func (r *leaseRun) lease() auction.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pr.Rec.Lease
}

func (r *leaseRun) run() {
	defer close(r.done)
	m := r.m
	l, job := r.lease(), r.pr.Job
	log := m.d.log.With("lease", l.ID, "job", l.JobID)
	if wait := l.Start.Sub(m.d.now()); wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.stop:
			r.finish(runtime.Result{Started: m.d.now(), Ended: m.d.now(), ExitCode: -1}, nil)
			return
		}
	}
	if err := os.MkdirAll(filepath.Dir(m.logPath(l.ID)), 0o700); err != nil {
		r.finish(runtime.Result{ExitCode: -1, Started: m.d.now(), Ended: m.d.now(), Err: err}, nil)
		return
	}
	logf, err := os.OpenFile(m.logPath(l.ID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.finish(runtime.Result{ExitCode: -1, Started: m.d.now(), Ended: m.d.now(), Err: err}, nil)
		return
	}
	defer logf.Close()
	lw := &lockedWriter{w: logf}
	gpus := make([]int, l.GPUCount)
	for i := range gpus {
		gpus[i] = i
	}
	spec := runtime.Spec{ID: l.ID, Command: job.Run.Command, Image: job.Run.Image, Env: job.Run.Env,
		GPUs: gpus, Deadline: l.End, MemoryMB: job.Run.MemoryMB, Outputs: job.Run.Outputs}
	started := m.d.now()
	h, err := m.exec.Start(m.ctx, spec, lw, lw)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: job failed to start: %v\n", err)
		r.finish(runtime.Result{ExitCode: -1, Started: started, Ended: m.d.now(), Err: err}, nil)
		return
	}
	r.mu.Lock()
	r.h = h
	r.pr.Rec.Run = auction.RunRunning
	r.pr.Rec.Started = started
	r.pr.Rec.Backend = backendName(m.exec, spec)
	if p, ok := h.(interface{ Pid() int }); ok {
		r.pr.Pgid = p.Pid()
	}
	r.mu.Unlock()
	m.saveRun(r)
	log.Info("job started", "backend", r.pr.Rec.Backend, "start_latency", started.Sub(maxTime(l.Start, r.confirmed)).Round(time.Microsecond))
	go m.sendEvent(r)

	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		r.heartbeats(h)
	}()
	resultCh := make(chan runtime.Result, 1)
	go func() { resultCh <- h.Wait() }()
	var res runtime.Result
	select {
	case res = <-resultCh:
	case <-r.stop:
		_ = h.Stop(m.d.cfg.Provider.PreemptGrace)
		res = <-resultCh
	}
	<-beatsDone
	outs, err := runtime.CollectOutputs(h.WorkDir(), job.Run.Outputs, m.outDir(l.ID), MaxOutputBytes)
	if err != nil {
		fmt.Fprintf(lw, "gpumesh: collecting outputs: %v\n", err)
	}
	if err := h.Cleanup(); err != nil {
		log.Warn("wipe work dir", "err", err)
	}
	m.pruneJobFiles()
	r.finish(res, outs)
}

func backendName(e runtime.Executor, spec runtime.Spec) string {
	if a, ok := e.(*runtime.AutoExecutor); ok {
		return a.Backend(spec)
	}
	return e.Name()
}

// finish records how the job ended, frees the calendar and settles.
func (r *leaseRun) finish(res runtime.Result, outs []auction.OutputFile) {
	m := r.m
	r.mu.Lock()
	state, detail := classify(res, r.stopAs, r.stopDetail)
	rec := &r.pr.Rec
	if job := r.pr.Job; state == auction.RunExpired && job.Preemptible && rec.Lease.End.Before(rec.Lease.Start.Add(job.Duration)) {
		// A bronze job took a backfill gap shorter than itself: reaching the
		// gap's end is a preemption, and its renter requeues the rest.
		state, detail = auction.RunPreempted, "backfill gap ended before the job did"
	}
	rec.Run, rec.Detail = state, detail
	if rec.Started.IsZero() {
		rec.Started = res.Started
	}
	rec.Ended = res.Ended
	if rec.Ended.IsZero() {
		rec.Ended = m.d.now()
	}
	if res.Started.IsZero() && rec.Run != auction.RunRunning {
		// never started: no time used.
		rec.Started = rec.Ended
	}
	if res.ExitCode >= 0 && (res.Reason != "" || res.Err == nil) && !res.Started.IsZero() {
		ec := res.ExitCode
		rec.ExitCode = &ec
	}
	r.pr.Outputs = outs
	lease := rec.Lease
	ended := rec.Ended
	r.mu.Unlock()
	m.saveRun(r)
	_ = m.provider.LeaseEnded(lease.ID, ended, state)
	m.d.log.Info("job ended", "lease", lease.ID, "run", state, "detail", detail)
	m.settle(r)
}

// classify maps an executor result to a run state.
func classify(res runtime.Result, stopAs auction.RunState, stopDetail string) (auction.RunState, string) {
	switch {
	case stopAs != "":
		return stopAs, stopDetail
	case res.Err != nil && res.Reason == "":
		return auction.RunFailed, res.Err.Error()
	case res.Reason == runtime.ReasonDeadline:
		return auction.RunExpired, "lease ended before the job did (stopped at the lease end)"
	case res.Reason == runtime.ReasonOOM:
		return auction.RunFailed, "killed: memory limit exceeded"
	case res.Reason == runtime.ReasonExited && res.ExitCode == 0:
		return auction.RunSucceeded, ""
	case res.Reason == runtime.ReasonExited:
		return auction.RunFailed, fmt.Sprintf("exit code %d", res.ExitCode)
	case res.Err != nil:
		return auction.RunFailed, res.Err.Error()
	}
	return auction.RunFailed, "job ended: " + res.Reason
}

// heartbeats sends signed telemetry to the renter every interval until the
// job ends.
func (r *leaseRun) heartbeats(h runtime.Handle) {
	m := r.m
	l := r.lease()
	every := m.heartbeatInterval()
	t := time.NewTicker(every)
	defer t.Stop()
	waitDone := make(chan struct{})
	go func() { h.Wait(); close(waitDone) }()
	var seq uint64
	for first := true; ; first = false {
		// The first heartbeat goes out as the job starts, then one per
		// interval, so coverage reflects the whole run.
		if !first {
			select {
			case <-waitDone:
				return
			case <-t.C:
			}
		}
		seq++
		r.mu.Lock()
		pgid := r.pr.Pgid
		r.mu.Unlock()
		var tel runtime.Telemetry
		if pgid > 0 {
			tel = runtime.Sample(m.d.inv, pgid)
		} else {
			tel = runtime.Sample(m.d.inv)
		}
		hb := attest.Heartbeat{LeaseID: l.ID, Provider: m.d.ID().String(), Seq: seq, Time: m.d.now(),
			GPUUtil: tel.GPUUtil, TempC: tel.TempC, PowerW: tel.PowerW, CPUSeconds: tel.CPUSeconds, Source: attest.SourceProcess}
		if tel.Source == runtime.SourceNVML {
			hb.Source = attest.SourceNVML
			hb.MemUsedMB = tel.MemUsedMB
		} else {
			hb.RSSMB = tel.MemUsedMB
		}
		env, err := attest.SignHeartbeat(m.d.signer, hb)
		if err != nil {
			continue
		}
		b, _ := env.Marshal()
		r.mu.Lock()
		r.pr.LastBeat = hb.Time
		r.mu.Unlock()
		m.saveRun(r) // so a crash knows how long the job ran
		if m.dropHeartbeat(seq) {
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, every)
		renter, _ := peer.Decode(l.Renter)
		if _, err := m.d.net.Request(ctx, renter, nil, wire.ProtoHeartbeat, b); err != nil {
			m.d.log.Debug("heartbeat not delivered", "lease", l.ID, "err", err)
		}
		cancel()
	}
}

// dropHeartbeat is a fault-injection hook: a provider configured (in tests)
// to skip heartbeats behaves like one with flaky telemetry.
func (m *market) dropHeartbeat(seq uint64) bool {
	return m.d.opts.DropHeartbeats != nil && m.d.opts.DropHeartbeats(seq)
}

func (m *market) heartbeatInterval() time.Duration {
	if iv := m.d.cfg.Provider.HeartbeatInterval; iv > 0 {
		return iv
	}
	return 5 * time.Second
}

// sendEvent reports the run's state to the renter and returns the renter's
// heartbeat summary (for terminal states).
func (m *market) sendEvent(r *leaseRun) (*attest.HeartbeatSummary, error) {
	r.mu.Lock()
	rec := r.pr.Rec
	ev := wire.LeaseEvent{LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Provider: m.d.ID().String(), Run: rec.Run,
		Detail: rec.Detail, ExitCode: rec.ExitCode, Started: rec.Started, Ended: rec.Ended, Outputs: r.pr.Outputs, Time: m.d.now()}
	r.mu.Unlock()
	b, err := m.sealed(sign.DomainLeaseEvent, ev)
	if err != nil {
		return nil, err
	}
	renter, err := peer.Decode(rec.Lease.Renter)
	if err != nil {
		return nil, err
	}
	var resp []byte
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(m.d.ctx, 10*time.Second)
		resp, err = m.d.net.Request(ctx, renter, nil, wire.ProtoLeaseEvent, b)
		cancel()
		if err == nil || m.d.ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 500 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	if !ev.Run.Terminal() {
		return nil, nil
	}
	var sum attest.HeartbeatSummary
	if err := json.Unmarshal(resp, &sum); err != nil {
		return nil, fmt.Errorf("renter's heartbeat summary: %w", err)
	}
	return &sum, nil
}

// settle reports the end to the renter, exchanges the two-party receipt and
// records it in the ledger and the reputation book.
func (m *market) settle(r *leaseRun) {
	log := m.d.log.With("lease", r.lease().ID)
	sum, err := m.sendEvent(r)
	if err != nil {
		log.Warn("renter unreachable at lease end; receipt not settled", "err", err)
		return
	}
	r.mu.Lock()
	rec := r.pr.Rec
	outs := r.pr.Outputs
	r.mu.Unlock()
	if rec.Started.Before(rec.Lease.Start) {
		rec.Started = rec.Lease.Start
	}
	// A receipt spans a positive interval: a lease that never ran (or died
	// before its first heartbeat) is settled as a 1ms span.
	if !rec.Ended.After(rec.Started) {
		rec.Ended = rec.Started.Add(time.Millisecond)
	}
	used := rec.Ended.Sub(rec.Started)
	gpuSec := used.Seconds() * float64(rec.Lease.GPUCount)
	rc := attest.Receipt{
		LeaseID: rec.Lease.ID, JobID: rec.Lease.JobID, Renter: rec.Lease.Renter, Provider: rec.Lease.Provider,
		Start: rec.Started, End: rec.Ended, GPUCount: rec.Lease.GPUCount, GPUSeconds: gpuSec, Price: rec.Lease.Price,
		Amount: attest.AmountFor(gpuSec, rec.Lease.Price), Outcome: rec.Run,
		ResultHash: auction.ManifestHash(outs), Heartbeats: *sum, IssuedAt: m.d.now(),
	}
	sr, err := attest.NewReceipt(m.d.signer, rc)
	if err != nil {
		log.Error("make receipt", "err", err)
		return
	}
	b, err := sr.Marshal()
	if err != nil {
		return
	}
	renter, _ := peer.Decode(rec.Lease.Renter)
	ctx, cancel := context.WithTimeout(m.d.ctx, 15*time.Second)
	resp, err := m.d.net.Request(ctx, renter, nil, wire.ProtoReceipt, b)
	cancel()
	if err != nil {
		log.Warn("receipt not countersigned", "err", err)
		return
	}
	full, err := attest.OpenReceipt(resp)
	if err != nil || full.Receipt.LeaseID != rc.LeaseID || string(full.Payload) != string(sr.Payload) {
		log.Warn("renter returned an invalid receipt", "err", err)
		m.count("provider.bad_countersign")
		return
	}
	if err := m.recordReceipt(full, false); err != nil {
		log.Error("ledger", "err", err)
		return
	}
	r.mu.Lock()
	r.pr.Settled = true
	r.mu.Unlock()
	m.saveRun(r)
	m.gossipReceipt(full)
	log.Info("lease settled", "amount_usd", fmt.Sprintf("%.6f", rc.Amount), "gpu_seconds", fmt.Sprintf("%.1f", gpuSec))
}

// recordReceipt appends a verified two-party receipt and the payment it
// implies to the ledger (atomically), and feeds the reputation book.
func (m *market) recordReceipt(sr *attest.SignedReceipt, asRenter bool) error {
	if err := sr.Verify(); err != nil {
		return err
	}
	raw, err := sr.Marshal()
	if err != nil {
		return err
	}
	r := sr.Receipt
	pay := ledger.Entry{Kind: ledger.KindPaymentEarned, Direction: ledger.DirEarned, Counterparty: r.Renter,
		LeaseID: r.LeaseID, JobID: r.JobID, Amount: r.Amount}
	counter := r.Renter
	if asRenter {
		pay = ledger.Entry{Kind: ledger.KindPaymentOwed, Direction: ledger.DirOwed, Counterparty: r.Provider,
			LeaseID: r.LeaseID, JobID: r.JobID, Amount: r.Amount}
		counter = r.Provider
	}
	entries := []ledger.Entry{{Kind: ledger.KindReceipt, Counterparty: counter, LeaseID: r.LeaseID, JobID: r.JobID, Data: raw}}
	if r.Amount > 0 {
		entries = append(entries, pay)
	}
	if _, err := m.d.db.AppendAll(entries); err != nil {
		return err
	}
	if err := m.book.AddReceipt(sr); err != nil {
		m.d.log.Warn("reputation book refused own receipt", "err", err)
	}
	return nil
}

// recoverProviderLeases runs at start: a lease that was pending or running
// when the daemon died is reported failed (never silently forgotten), its
// leftover processes are killed and its scratch space wiped.
func (m *market) recoverProviderLeases() error {
	var stale []providerRecord
	err := m.provState.List(func(_ string, raw []byte) error {
		var pr providerRecord
		if err := json.Unmarshal(raw, &pr); err != nil {
			return nil
		}
		if !pr.Rec.Run.Terminal() || !pr.Settled {
			stale = append(stale, pr)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, pr := range stale {
		if !pr.Rec.Run.Terminal() {
			was := pr.Rec.Run
			killOrphan(pr.Pgid, m.workRoot())
			pr.Rec.Run = auction.RunFailed
			pr.Rec.Detail = fmt.Sprintf("provider daemon restarted while the job was %s; the job was stopped", was)
			pr.Rec.Ended = pr.LastBeat
			if pr.Rec.Ended.IsZero() || pr.Rec.Started.IsZero() {
				pr.Rec.Ended = pr.Rec.Started
			}
			m.d.log.Warn("lease interrupted by a daemon restart", "lease", pr.Rec.Lease.ID, "was", was)
		}
		if err := m.provState.Put(pr.Rec.Lease.ID, pr); err != nil {
			return err
		}
		r := &leaseRun{m: m, pr: pr, stop: make(chan struct{}), done: make(chan struct{})}
		close(r.done)
		m.runs[pr.Rec.Lease.ID] = r
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			// Wait for the network before telling the renter.
			select {
			case <-time.After(2 * time.Second):
			case <-m.ctx.Done():
				return
			}
			m.settle(r)
		}()
	}
	if n, err := runtime.WipeOrphans(m.workRoot(), func(string) bool { return false }); err != nil {
		m.d.log.Warn("wipe orphaned work dirs", "err", err)
	} else if n > 0 {
		m.d.log.Info("wiped orphaned work dirs", "count", n)
	}
	m.pruneJobFiles()
	return nil
}

// killOrphan kills a process group left behind by a previous daemon, if it
// still runs inside our work root.
func killOrphan(pgid int, root string) {
	if pgid <= 1 {
		return
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pgid))
	if err != nil || !strings.HasPrefix(cwd, root+string(os.PathSeparator)) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func sampleUtil(m *market) float64 {
	return runtime.Sample(m.d.inv).GPUUtil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
