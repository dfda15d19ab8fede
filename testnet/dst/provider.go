package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
	"github.com/gpumesh/gpumesh/node/wire"
)

// Provider timings.
const (
	bidTTL         = 30 * time.Second
	heartbeatEvery = 30 * time.Second
	answerTimeout  = 15 * time.Second // how long a report or receipt waits for its answer
)

// rules are the provider's lease rules, the daemon's defaults scaled to
// a simulated run.
var rules = lifecycle.Rules{
	Grace: 10 * time.Second, SettleRetry: 5 * time.Second, SettleRetryMax: time.Minute,
	SettleWindow: time.Hour, MaxRefusals: 5, RecoverDelay: 5 * time.Second,
}

// run is a provider's lease: the machine's state (what it persists) and
// what the driver holds for it in memory.
type run struct {
	st      lifecycle.Lease
	timer   int // generation of the armed timer (ArmTimer replaces it)
	waiting int // generation of the report or receipt awaiting its answer
	beating bool
	exec    int // generation of the executor run (a stop or exit ends it)
	receipt []byte
}

// provider books leases on its calendar and runs them with the
// production lease machine (lifecycle.Rules.Step), whose effects it
// carries out: timers go into the event queue, the executor's outcome is
// drawn from the seed, reports and receipts go over the network.
type provider struct {
	n        *node
	capacity int
	price    float64
	book     Book
	runs     map[string]*run
}

func newProvider(n *node, capacity int, price float64) *provider {
	return &provider{n: n, capacity: capacity, price: price, book: n.s.cfg.Rules.NewBook(capacity), runs: map[string]*run{}}
}

// restartProvider starts a provider again from its disk: each lease's
// persisted state is fed to the machine as Restarted.
func restartProvider(n *node, capacity int, price float64) *provider {
	p := newProvider(n, capacity, price)
	var ids []string
	for _, k := range n.disk.keys("lease/") {
		raw, _ := n.disk.get(k)
		var st lifecycle.Lease
		if err := json.Unmarshal(raw, &st); err != nil {
			panic(fmt.Sprintf("provider %s: lease record %s: %v", n.name, k, err))
		}
		p.runs[st.Lease.ID] = &run{st: st}
		ids = append(ids, st.Lease.ID)
	}
	for _, id := range ids {
		r := p.runs[id]
		if r.st.Phase.Final() {
			continue
		}
		p.step(r, lifecycle.Restarted{})
		if r.st.Phase != lifecycle.Waiting {
			// Not booked again for a start ahead: the crash cut it short
			// (or it had ended), and its devices are free.
			n.s.chk.freed(n, id, n.s.now)
		}
	}
	return p
}

func (p *provider) step(r *run, ev lifecycle.Event) {
	st, effs := rules.Step(r.st, ev, p.n.now())
	if st.Phase != r.st.Phase || st.Run != r.st.Run {
		p.n.s.logf("%s lease %s: %T: %s/%s -> %s/%s", p.n.name, st.Lease.ID, ev, r.st.Phase, r.st.Run, st.Phase, st.Run)
	}
	r.st = st
	for _, e := range effs {
		p.do(r, e)
	}
}

// onCall bids for a job: the earliest start at which the calendar has
// room for it, at this provider's price.
func (p *provider) onCall(job terms.Job, from *node) {
	now := p.n.now()
	starts := []time.Time{now.Add(2 * time.Second)}
	for _, b := range p.book.Bookings() {
		if b.End.After(now) {
			starts = append(starts, b.End)
		}
	}
	for _, s := range starts {
		if s.After(job.Deadline) || !p.book.HasRoom(s, s.Add(job.Duration), nil, job.GPUCount, 0) {
			continue
		}
		b := terms.Bid{JobID: job.ID, Attempt: job.Attempt, Provider: p.n.id, Price: p.price, Start: s, End: s.Add(job.Duration),
			Nonce: fmt.Sprintf("%s/%s", p.n.name, job.ID), IssuedAt: now, ExpiresAt: now.Add(bidTTL)}
		p.n.s.net.send(p.n, from, "bid "+job.ID, func() { from.onBid(b) })
		return
	}
}

// onAward books an awarded lease and confirms it, or declines it.
func (p *provider) onAward(l terms.Lease, job terms.Job, from *node) {
	s := p.n.s
	if r := p.runs[l.ID]; r != nil {
		// A duplicated award: answered as the first was.
		if r.st.Run == terms.RunPending {
			confirmed := r.st.Lease
			s.net.send(p.n, from, "confirm "+l.ID, func() { from.onConfirm(confirmed, p.n) })
		}
		return
	}
	decline := func(why string) {
		s.logf("%s declines %s: %s", p.n.name, l.ID, why)
		s.net.send(p.n, from, "decline "+l.ID, func() { from.onDecline(l, p.n) })
	}
	if l.Provider != p.n.id || l.Renter != from.id {
		decline("not ours")
		return
	}
	if l.Late(p.n.now()) {
		decline("late")
		return
	}
	if err := p.book.Reserve(auction.Booking{LeaseID: l.ID, Start: l.Start, End: l.End, GPUs: l.GPUCount}); err != nil {
		decline(err.Error())
		return
	}
	b, _ := p.book.Booking(l.ID)
	l.Devices = b.Devices
	r := &run{}
	p.runs[l.ID] = r
	p.step(r, lifecycle.Confirmed{Lease: l, Job: job})
	s.chk.booked(p.n, l.ID, b)
	confirmed := r.st.Lease
	s.net.send(p.n, from, "confirm "+l.ID, func() { from.onConfirm(confirmed, p.n) })
}

// onCancel stops a lease its renter no longer wants.
func (p *provider) onCancel(id string, from *node) {
	if r := p.runs[id]; r != nil && r.st.Lease.Renter == from.id {
		p.step(r, lifecycle.StopRequested{As: terms.RunCancelled, Detail: "cancelled by its renter"})
	}
}

func (p *provider) renter(r *run) *node { return p.n.s.byID(r.st.Lease.Renter) }

func (p *provider) do(r *run, e lifecycle.Effect) {
	s, n, id := p.n.s, p.n, r.st.Lease.ID
	feed := func(d time.Duration, what string, ev lifecycle.Event) {
		n.after(d, what+" "+id, func() {
			if p.runs[id] == r {
				p.step(r, ev)
			}
		})
	}
	switch e := e.(type) {
	case lifecycle.Persist:
		n.disk.putJSON("lease/"+id, r.st)
	case lifecycle.ArmTimer:
		r.timer++
		gen := r.timer
		n.atLocal(e.At, "timer "+id, func() {
			if r.timer == gen && p.runs[id] == r {
				p.step(r, lifecycle.TimerDue{})
			}
		})
	case lifecycle.StartHeartbeats:
		r.beating = true
		p.beat(r)
	case lifecycle.Release:
		r.beating = false
	case lifecycle.Prepare:
		feed(s.between(0, 2*time.Second), "prepared", lifecycle.Prepared{})
	case lifecycle.CancelPrepare:
		feed(0, "prepare cancelled", lifecycle.Failed{Exit: lifecycle.Exit{Code: -1, Err: "preparation cancelled"}})
	case lifecycle.StartExecutor:
		p.execute(r)
	case lifecycle.StopExecutor:
		r.exec++
		gen := r.exec
		n.after(s.between(0, e.Grace), "stopped "+id, func() {
			if r.exec == gen && p.runs[id] == r {
				p.step(r, lifecycle.Exited{Exit: lifecycle.Exit{Started: r.st.Started, Ended: n.now(), Code: -1, How: lifecycle.HowOther, Reason: "stopped"}})
			}
		})
	case lifecycle.CollectOutputs:
		feed(s.between(0, time.Second), "outputs collected", lifecycle.OutputsCollected{})
	case lifecycle.Free:
		if p.book.Truncate(id, n.now()) || p.book.Release(id) {
			s.chk.freed(n, id, s.now)
		}
	case lifecycle.Notify:
		ev := wire.LeaseEvent{LeaseID: id, JobID: r.st.Lease.JobID, Provider: n.id, Run: r.st.Run, Started: r.st.Started, Time: n.now()}
		to := p.renter(r)
		s.net.send(n, to, "event "+id+" "+string(ev.Run), func() { to.onEvent(ev, n) })
	case lifecycle.SendReport:
		p.report(r)
	case lifecycle.SendReceipt:
		p.sendReceipt(r, e.Start, e.End)
	case lifecycle.RecordDispute:
		s.stats.Disputed++
		data, _ := json.Marshal(struct {
			Reason string `json:"reason"`
		}{e.Reason})
		n.led.append(record.Entry{Kind: record.KindDispute, LeaseID: id, JobID: r.st.Lease.JobID, Counterparty: r.st.Lease.Renter, Data: data})
	case lifecycle.Rebook:
		err := p.book.Reserve(auction.Booking{LeaseID: id, Start: r.st.Lease.Start, End: r.st.Lease.End, GPUs: r.st.Lease.GPUCount, Devices: r.st.Lease.Devices})
		if err != nil {
			s.chk.freed(n, id, s.now)
			feed(0, "rebook failed", lifecycle.RebookFailed{Err: err.Error()})
		} else {
			feed(0, "rebooked", lifecycle.Rebooked{})
		}
	case lifecycle.Count:
		if e.Name == "provider.settle_abandoned" {
			s.stats.Abandoned++
		}
		s.logf("%s count %s (%s)", n.name, e.Name, id)
	case lifecycle.AnnounceMove, lifecycle.Snapshot, lifecycle.Purge, lifecycle.Park, lifecycle.KillOrphan:
		// Nothing to do here: no lease moves or parks in the
		// simulation, and it keeps no files.
	default:
		panic(fmt.Sprintf("provider %s: effect %T not carried out", n.name, e))
	}
}

// beat sends a heartbeat to the lease's renter every heartbeatEvery
// while the machine wants them.
func (p *provider) beat(r *run) {
	if !r.beating {
		return
	}
	id, to := r.st.Lease.ID, p.renter(r)
	p.n.s.net.send(p.n, to, "heartbeat "+id, func() { to.onHeartbeat(id, p.n) })
	p.n.after(heartbeatEvery, "heartbeat timer "+id, func() {
		if p.runs[id] == r {
			p.beat(r)
		}
	})
}

// execute starts the job: what it does is drawn from the seed. Whatever
// it does, the executor stops it at the lease's end.
func (p *provider) execute(r *run) {
	s, n, id := p.n.s, p.n, r.st.Lease.ID
	o := s.cfg.Executor
	r.exec++
	gen := r.exec
	exit := func(at time.Duration, what string, x func() lifecycle.Exit) {
		n.after(at, what+" "+id, func() {
			if r.exec == gen && p.runs[id] == r {
				r.exec++
				p.step(r, lifecycle.Exited{Exit: x()})
			}
		})
	}
	n.after(s.between(0, 500*time.Millisecond), "exec started "+id, func() {
		if r.exec != gen || p.runs[id] != r {
			return
		}
		p.step(r, lifecycle.ExecStarted{Backend: "sim"})
		if r.st.Phase != lifecycle.Running {
			return
		}
		started := r.st.Started
		d := r.st.Terms.Duration
		switch k := s.rng.IntN(o.Succeed + o.Fail + o.Hang + o.Crash); {
		case k < o.Succeed:
			exit(s.between(d/3, d), "exited 0", func() lifecycle.Exit {
				return lifecycle.Exit{Started: started, Ended: n.now(), Code: 0, How: lifecycle.HowExited}
			})
		case k < o.Succeed+o.Fail:
			exit(s.between(0, d), "exited 1", func() lifecycle.Exit {
				return lifecycle.Exit{Started: started, Ended: n.now(), Code: 1, How: lifecycle.HowExited}
			})
		case k < o.Succeed+o.Fail+o.Hang:
			// Hangs: only the lease's end stops it.
		default:
			at := s.between(0, d)
			s.after(at, nil, "crash "+n.name+" under "+id, func() { s.crash(n, s.between(time.Second, 2*time.Minute)) })
		}
		exit(r.st.Lease.End.Sub(n.now()), "deadline", func() lifecycle.Exit {
			return lifecycle.Exit{Started: started, Ended: n.now(), Code: -1, How: lifecycle.HowDeadline}
		})
	})
}

// report sends the final report; the renter's answer (or its absence by
// answerTimeout) goes back to the machine.
func (p *provider) report(r *run) {
	s, n, id := p.n.s, p.n, r.st.Lease.ID
	r.waiting++
	gen := r.waiting
	ev := wire.LeaseEvent{LeaseID: id, JobID: r.st.Lease.JobID, Provider: n.id, Run: r.st.Run, Fault: r.st.Fault,
		Started: r.st.Started, Ended: r.st.Ended, Time: n.now()}
	to := p.renter(r)
	s.net.send(n, to, "final "+id+" "+string(ev.Run), func() { to.onEvent(ev, n) })
	n.after(answerTimeout, "report timeout "+id, func() {
		if r.waiting == gen && p.runs[id] == r {
			r.waiting++
			p.step(r, lifecycle.ReportFailed{Err: "no answer"})
		}
	})
}

// onReleased takes a renter's answer to a final report that it released
// the lease, checked as node/lease's Supervisor checks it.
func (p *provider) onReleased(id string, answer []byte, from *node) {
	r := p.runs[id]
	if r == nil || r.st.Phase != lifecycle.Reporting || from.id != r.st.Lease.Renter {
		return
	}
	var ans wire.LeaseEventAnswer
	if err := json.Unmarshal(answer, &ans); err != nil || ans.Released == nil ||
		ans.CheckReleased(from.signer.ID(), id, r.st.Lease.JobID) != nil {
		p.n.s.stats.Refused++
		return // the report's timeout retries it
	}
	r.waiting++
	p.step(r, lifecycle.ReportReleased{})
}

func (p *provider) onFinalAck(id string, from *node) {
	r := p.runs[id]
	if r == nil || r.st.Phase != lifecycle.Reporting || from.id != r.st.Lease.Renter {
		return
	}
	r.waiting++
	p.step(r, lifecycle.ReportDelivered{})
}

// sendReceipt bills start to end as node/lease's Supervisor.trySettle
// does (attest.BillableSeconds of the span, on the renter's empty
// heartbeat summary: the simulation sends no signed heartbeats; issued
// as of the end, so that every attempt sends the same receipt) and sends
// the receipt for countersigning.
func (p *provider) sendReceipt(r *run, start, end time.Time) {
	s, n, l := p.n.s, p.n, r.st.Lease
	sum := attest.HeartbeatSummary{}
	gpuSec := attest.BillableSeconds(l, start, end, end, sum) * l.BilledGPUs()
	rc := attest.Receipt{LeaseID: l.ID, JobID: l.JobID, Renter: l.Renter, Provider: l.Provider, Start: start, End: end,
		GPUCount: l.GPUCount, GPUSeconds: gpuSec, Price: l.Price, Amount: attest.AmountFor(gpuSec, l.Price),
		Outcome: r.st.Run, Fault: r.st.Fault, Heartbeats: sum, IssuedAt: end}
	if s.cfg.ReissueReceipts {
		rc.IssuedAt = n.now()
	}
	sr, err := attest.NewReceipt(n.signer, rc)
	if err != nil {
		panic(fmt.Sprintf("provider %s: receipt of %s: %v", n.name, l.ID, err))
	}
	b, err := sr.Marshal()
	if err != nil {
		panic(err)
	}
	r.receipt = sr.Payload
	r.waiting++
	gen := r.waiting
	to := p.renter(r)
	s.net.send(n, to, "receipt "+l.ID, func() { to.onReceipt(b, n) })
	n.after(answerTimeout, "receipt timeout "+l.ID, func() {
		if r.waiting == gen && p.runs[l.ID] == r {
			r.waiting++
			p.step(r, lifecycle.ReceiptFailed{Err: "no answer"})
		}
	})
}

// onReceiptAnswer takes the renter's answer to lease id's receipt: the
// countersigned receipt, checked and recorded, or its refusal.
func (p *provider) onReceiptAnswer(id string, b []byte, refusal error, from *node) {
	r := p.runs[id]
	if r == nil || r.st.Lease.Renter != from.id {
		return
	}
	if refusal != nil {
		if r.st.Phase == lifecycle.Receipting {
			r.waiting++
			p.step(r, lifecycle.ReceiptRefused{Err: refusal.Error()})
		}
		return
	}
	full, err := attest.OpenReceipt(b)
	if err != nil || full.Receipt.LeaseID != id {
		return
	}
	if !p.n.s.cfg.SettleTwice && (r.st.Phase != lifecycle.Receipting || string(full.Payload) != string(r.receipt)) {
		return // a late or duplicated answer: the lease is settled already, or waits on another receipt
	}
	recordReceipt(p.n, full.Receipt, b, false)
	r.waiting++
	p.step(r, lifecycle.ReceiptCountersigned{})
}
