package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/libp2p/go-libp2p/core/peer"
)

// apiPostJob runs an auction for the posted job and returns its view once
// the auction ended.
func (m *market) apiPostJob(r *http.Request) (any, error) {
	var req api.PostJobRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badRequest("job spec: %v", err)
	}
	job := req.Job
	job.Owner = m.d.ID().String()
	job.OwnerAddrs = m.d.Addrs()
	if job.CreatedAt.IsZero() {
		job.CreatedAt = m.d.now()
	}
	if job.ID == "" {
		job.ID = auction.NewID("job")
	}
	if job.Deadline.IsZero() {
		job.Deadline = job.CreatedAt.Add(defaultStartWindow(job.Tier))
	}
	if err := job.Validate(); err != nil {
		return nil, badRequest("%v", err)
	}
	m.mu.Lock()
	if _, dup := m.jobs[job.ID]; dup {
		m.mu.Unlock()
		return nil, badRequest("job id %s already used", job.ID)
	}
	m.jobs[job.ID] = &api.JobView{JobStatus: auction.JobStatus{Job: job, State: auction.JobBidding, PostedAt: m.d.now()}}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, job.BidWindow+2*time.Minute)
	defer cancel()
	if _, err := m.renter.Post(ctx, job); err != nil {
		m.d.log.Debug("auction ended without a lease", "job", job.ID, "err", err)
	}
	return m.jobView(job.ID)
}

// onRenterLease records a confirmed lease for one of our jobs.
func (m *market) onRenterLease(l auction.Lease, job auction.Job) {
	prov, _ := peer.Decode(l.Provider)
	mon := attest.NewHeartbeatMonitor(l.ID, prov, l.Start, m.heartbeatInterval())
	m.mu.Lock()
	v := m.jobs[job.ID]
	if v == nil {
		v = &api.JobView{}
		m.jobs[job.ID] = v
	}
	v.Lease = &l
	v.Run = auction.RunPending
	v.Started, v.Ended, v.ExitCode, v.Detail, v.Receipt, v.Heartbeats, v.LastTelemetry, v.Outputs =
		time.Time{}, time.Time{}, nil, "", nil, nil, nil, nil
	m.mons[l.ID] = mon
	m.byLease[l.ID] = job.ID
	m.mu.Unlock()
	m.d.log.Info("job leased", "job", job.ID, "lease", l.ID, "provider", l.Provider, "price", l.Price, "attempt", job.Attempt)
	m.saveJob(job.ID)
	m.watchLease(job.ID, l)
}

// abandonGrace is how long after a lease's end the renter waits for its
// provider's final report before it calls the lease abandoned.
const abandonGrace = time.Minute

// watchLease marks a lease abandoned, and slashes its provider, when the
// provider never reports its end: the renter's evidence is the signed award
// and confirm it holds, plus the silence after the lease's end.
func (m *market) watchLease(jobID string, l auction.Lease) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		grace := abandonGrace
		if m.d.opts.AbandonGrace > 0 {
			grace = m.d.opts.AbandonGrace
		}
		wait := l.End.Add(grace).Sub(m.d.now())
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(wait):
		}
		m.mu.Lock()
		v := m.jobs[jobID]
		abandoned := v != nil && v.Lease != nil && v.Lease.ID == l.ID && !v.Run.Terminal()
		if abandoned {
			v.Run, v.Detail = auction.RunFailed, "provider abandoned the lease: no final report by the lease end"
		}
		m.mu.Unlock()
		if !abandoned {
			return
		}
		if err := m.book.Slash(l.Provider, attest.Evidence{Kind: attest.SlashAbandonedLease, LeaseID: l.ID,
			Reporter: m.d.ID().String(), Detail: "no final report by the lease end"}); err != nil {
			m.d.log.Warn("slash", "err", err)
		}
		m.d.log.Warn("lease abandoned by its provider", "job", jobID, "lease", l.ID, "provider", l.Provider)
		m.saveJob(jobID)
	}()
}

func (m *market) onUnplaceable(job auction.Job, reason string) {
	m.d.log.Info("job unplaceable", "job", job.ID, "reason", reason)
	m.saveJob(job.ID)
}

// saveJob persists the renter's view of a job.
func (m *market) saveJob(id string) {
	v, err := m.jobView(id)
	if err != nil {
		return
	}
	if err := m.rentState.Put(id, v); err != nil {
		m.d.log.Error("persist job", "job", id, "err", err)
	}
}

// loadRenterJobs restores the renter's jobs after a restart.
func (m *market) loadRenterJobs() error {
	return m.rentState.List(func(id string, raw []byte) error {
		var v api.JobView
		if err := json.Unmarshal(raw, &v); err != nil {
			m.d.log.Warn("unreadable job record", "job", id, "err", err)
			return nil
		}
		if v.State == auction.JobBidding || v.State == auction.JobAwarding {
			v.State = auction.JobFailed
			v.Reasons = append(v.Reasons, "renter daemon restarted during the auction")
		}
		m.jobs[id] = &v
		if v.Lease != nil && !v.Run.Terminal() {
			prov, _ := peer.Decode(v.Lease.Provider)
			m.mons[v.Lease.ID] = attest.NewHeartbeatMonitor(v.Lease.ID, prov, v.Lease.Start, m.heartbeatInterval())
			m.byLease[v.Lease.ID] = id
		}
		return nil
	})
}

// jobView merges the auction's status with the execution state.
func (m *market) jobView(id string) (api.JobView, error) {
	st, inAuction := m.renter.Status(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.jobs[id]
	if !ok && !inAuction {
		return api.JobView{}, notFound("no job %s on this node", id)
	}
	out := api.JobView{}
	if ok {
		out = *v
		out.History = append([]api.LeaseRecord(nil), v.History...)
	}
	if inAuction {
		// The auction knows bids and awards; the current lease is ours (it
		// is cleared while a preempted job is requeued).
		keepLease := out.Lease
		out.JobStatus = st
		if ok {
			out.Lease = keepLease
			if keepLease != nil {
				out.Winner = keepLease.Provider
			}
		}
	}
	if out.Lease != nil {
		l := *out.Lease
		switch {
		case out.Run == auction.RunRunning:
			l.State = auction.RunRunning
		case out.Run.Terminal():
			l.State = out.Run
		}
		out.Lease = &l
		if mon := m.mons[out.Lease.ID]; mon != nil && out.Receipt == nil {
			end := m.d.now()
			if !out.Ended.IsZero() {
				end = out.Ended
			}
			sum := mon.Summary(end)
			out.Heartbeats = &sum
		}
	}
	return out, nil
}

func (m *market) jobList() []api.JobView {
	ids := map[string]bool{}
	for _, s := range m.renter.List() {
		ids[s.Job.ID] = true
	}
	m.mu.Lock()
	for id := range m.jobs {
		ids[id] = true
	}
	m.mu.Unlock()
	out := make([]api.JobView, 0, len(ids))
	for id := range ids {
		if v, err := m.jobView(id); err == nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PostedAt.Before(out[j].PostedAt) })
	return out
}

func (m *market) bids(id string) (api.BidsView, error) {
	ranked, err := m.renter.Bids(id)
	if err != nil {
		if errors.Is(err, auction.ErrUnknownJob) {
			return api.BidsView{}, notFound("no job %s on this node", id)
		}
		return api.BidsView{}, badRequest("%v", err)
	}
	if ranked == nil {
		ranked = []auction.Ranked{}
	}
	return api.BidsView{JobID: id, Bids: ranked, Explain: auction.Explain(ranked)}, nil
}

// cancelJob cancels a job in auction, or stops its running lease.
func (m *market) cancelJob(id string) (api.JobView, error) {
	v, err := m.jobView(id)
	if err != nil {
		return v, err
	}
	switch {
	case v.State == auction.JobBidding || v.State == auction.JobAwarding:
		if err := m.renter.Cancel(id); err != nil {
			return v, badRequest("%v", err)
		}
	case v.Lease != nil && !v.Run.Terminal():
		b, err := m.sealed(sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: v.Lease.ID, JobID: id})
		if err != nil {
			return v, err
		}
		prov, _ := peer.Decode(v.Lease.Provider)
		ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
		defer cancel()
		if _, err := m.d.net.Request(ctx, prov, nil, wire.ProtoCancel, b); err != nil {
			return v, fmt.Errorf("ask provider to stop the job: %w", err)
		}
	default:
		return v, badRequest("job %s is %s (run %s): nothing to cancel", id, v.State, orNone(string(v.Run)))
	}
	return m.jobView(id)
}

// releaseLease asks a provider to cancel a lease it confirmed that the
// auction does not use (a hedged award that confirmed after another won).
func (m *market) releaseLease(l auction.Lease) {
	m.count("renter.lease_released")
	b, err := m.sealed(sign.DomainLeaseCancel, wire.CancelRequest{LeaseID: l.ID, JobID: l.JobID})
	if err != nil {
		m.d.log.Warn("release lease", "lease", l.ID, "err", err)
		return
	}
	prov, err := peer.Decode(l.Provider)
	if err != nil {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
		defer cancel()
		if prov == m.d.ID() && m.provider != nil {
			_, err = m.handleCancel(ctx, prov, b)
		} else {
			_, err = m.d.net.Request(ctx, prov, nil, wire.ProtoCancel, b)
		}
		if err != nil {
			m.count("renter.release_failed")
			m.d.log.Info("release lease", "lease", l.ID, "provider", l.Provider, "err", err)
		}
	}()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// handleHeartbeat verifies a provider's telemetry for one of our leases.
func (m *market) handleHeartbeat(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	env, err := sign.UnmarshalEnvelope(data)
	if err != nil {
		m.count("renter.heartbeat_malformed")
		return nil, err
	}
	hb, err := attest.OpenHeartbeat(env)
	if err != nil {
		m.count("renter.heartbeat_bad_signature")
		return nil, err
	}
	m.mu.Lock()
	mon := m.mons[hb.LeaseID]
	jobID := m.byLease[hb.LeaseID]
	m.mu.Unlock()
	if mon == nil {
		m.count("renter.heartbeat_unknown_lease")
		return nil, fmt.Errorf("unknown lease %s", hb.LeaseID)
	}
	if hb.Provider != from.String() {
		m.count("renter.heartbeat_relayed")
		return nil, errors.New("heartbeat not sent by its provider")
	}
	if err := mon.Accept(env, m.d.now()); err != nil {
		m.count("renter.heartbeat_rejected")
		return nil, err
	}
	m.mu.Lock()
	if v := m.jobs[jobID]; v != nil {
		v.LastTelemetry = &hb
	}
	m.mu.Unlock()
	return nil, nil
}

// handleLeaseEvent takes a provider's signed report on a lease of ours.
// For a terminal state it answers with our heartbeat summary, which goes
// into the receipt.
func (m *market) handleLeaseEvent(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	var ev wire.LeaseEvent
	if err := sign.OpenFrom(data, sign.DomainLeaseEvent, from, &ev); err != nil {
		m.count("renter.event_rejected")
		return nil, err
	}
	m.mu.Lock()
	jobID := m.byLease[ev.LeaseID]
	v := m.jobs[jobID]
	mon := m.mons[ev.LeaseID]
	if v == nil || v.Lease == nil || v.Lease.ID != ev.LeaseID || v.Lease.Provider != from.String() {
		m.mu.Unlock()
		m.count("renter.event_unknown_lease")
		return nil, fmt.Errorf("no lease %s from %s", ev.LeaseID, from)
	}
	prevRun := v.Run
	v.Run, v.Detail, v.ExitCode = ev.Run, ev.Detail, ev.ExitCode
	if !ev.Started.IsZero() {
		v.Started = ev.Started
	}
	v.Ended = ev.Ended
	v.Outputs = ev.Outputs
	lease := *v.Lease
	m.mu.Unlock()
	m.d.log.Info("lease event", "job", jobID, "lease", ev.LeaseID, "run", ev.Run, "detail", ev.Detail)
	m.saveJob(jobID)
	if !ev.Run.Terminal() {
		return nil, nil
	}
	end := ev.Ended
	if end.IsZero() || end.After(m.d.now()) {
		end = m.d.now()
	}
	sum := mon.Summary(end)
	if ev.Run == auction.RunPreempted && prevRun != auction.RunPreempted && lease.Preemptible {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.requeue(jobID, lease, ev.Detail)
		}()
	}
	return json.Marshal(sum)
}

// requeue puts a preempted job back into the auction for the time it has
// left, once its preempted lease has been settled.
func (m *market) requeue(jobID string, lease auction.Lease, reason string) {
	// Give the receipt exchange a moment so history shows the settled cost.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		v, _ := m.jobView(jobID)
		if v.Receipt != nil || m.ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.archiveLease(jobID, lease.ID)
	ctx, cancel := context.WithTimeout(m.ctx, 3*time.Minute)
	defer cancel()
	if _, err := m.renter.Requeue(ctx, jobID, reason); err != nil {
		m.d.log.Warn("requeue", "job", jobID, "err", err)
	}
	m.saveJob(jobID)
}

// archiveLease moves the current lease of a job into its history.
func (m *market) archiveLease(jobID, leaseID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.jobs[jobID]
	if v == nil || v.Lease == nil || v.Lease.ID != leaseID {
		return
	}
	cost := 0.0
	if v.Receipt != nil {
		cost = v.Receipt.Amount
	}
	v.History = append(v.History, api.LeaseRecord{Lease: *v.Lease, Run: v.Run, Detail: v.Detail, CostUSD: cost,
		Started: v.Started, Ended: v.Ended, Attempt: v.Lease.Attempt, Receipt: v.Receipt != nil, ExitCode: v.ExitCode})
	// The job goes back to auction: the current-lease fields describe the
	// next lease from now on.
	v.Lease, v.Receipt, v.ExitCode, v.LastTelemetry, v.Heartbeats, v.Outputs = nil, nil, nil, nil, nil, nil
	v.Run, v.Started, v.Ended = "", time.Time{}, time.Time{}
	v.Detail = fmt.Sprintf("requeued after attempt %d was %s", leaseAttempt(v.History), v.History[len(v.History)-1].Run)
}

// handleReceipt checks a provider-signed receipt against our own view of
// the lease and our heartbeat record, countersigns it and records it.
func (m *market) handleReceipt(_ context.Context, from peer.ID, data []byte) ([]byte, error) {
	sr, err := attest.UnmarshalReceipt(data)
	if err != nil {
		m.count("renter.receipt_malformed")
		return nil, err
	}
	r := sr.Receipt
	m.mu.Lock()
	jobID := m.byLease[r.LeaseID]
	v := m.jobs[jobID]
	mon := m.mons[r.LeaseID]
	var lease auction.Lease
	if v != nil && v.Lease != nil {
		lease = *v.Lease
	}
	m.mu.Unlock()
	if v == nil || lease.ID != r.LeaseID || r.Provider != from.String() {
		m.count("renter.receipt_unknown_lease")
		return nil, fmt.Errorf("no lease %s from %s", r.LeaseID, from)
	}
	if err := attest.CheckReceipt(r, lease); err != nil {
		m.count("renter.receipt_mismatch")
		return nil, err
	}
	if mine := mon.Summary(r.End); mine.Count != r.Heartbeats.Count || mine.Rejected != r.Heartbeats.Rejected {
		m.count("renter.receipt_telemetry_mismatch")
		return nil, fmt.Errorf("receipt claims %d heartbeats, renter verified %d", r.Heartbeats.Count, mine.Count)
	}
	if err := sr.Countersign(m.d.signer); err != nil {
		m.count("renter.receipt_bad_signature")
		return nil, err
	}
	if err := m.recordReceipt(sr, true); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if v := m.jobs[jobID]; v != nil && v.Lease != nil && v.Lease.ID == r.LeaseID {
		rc := r
		v.Receipt = &rc
		v.CostUSD += r.Amount
		sum := r.Heartbeats
		v.Heartbeats = &sum
	}
	m.mu.Unlock()
	m.saveJob(jobID)
	m.gossipReceipt(sr)
	return sr.Marshal()
}

// gossipReceipt publishes a two-party receipt for everyone's reputation.
func (m *market) gossipReceipt(sr *attest.SignedReceipt) {
	b, err := sr.Marshal()
	if err != nil {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		defer cancel()
		if err := m.d.net.Publish(ctx, wire.ReputationTopic, b); err != nil && m.ctx.Err() == nil {
			m.d.log.Debug("gossip receipt", "err", err)
		}
	}()
}

// handleGossipReceipt feeds a gossiped receipt to the reputation book,
// which verifies both signatures and rejects (and counts) forgeries.
func (m *market) handleGossipReceipt(_ peer.ID, data []byte) {
	sr, err := attest.UnmarshalReceipt(data)
	if err != nil {
		m.count("reputation.gossip_malformed")
		return
	}
	if err := m.book.AddReceipt(sr); err != nil {
		m.d.log.Debug("gossiped receipt rejected", "err", err)
	}
}

// loadReceipts replays the receipts in our ledger into the reputation book
// (reputation survives restarts; the ledger is its durable source).
func (m *market) loadReceipts() error {
	entries, err := m.d.db.List(ledgerFilterReceipts)
	if err != nil {
		return err
	}
	for _, e := range entries {
		sr, err := attest.UnmarshalReceipt(e.Data)
		if err != nil {
			continue
		}
		_ = m.book.AddReceipt(sr)
	}
	return nil
}

// defaultStartWindow is how soon a job must start when its poster gave no
// deadline: gold and silver are on-demand tiers (a provider that can only
// start hours later does not bid), bronze waits for spare capacity.
func defaultStartWindow(t auction.Tier) time.Duration {
	switch t {
	case auction.Gold:
		return 10 * time.Minute
	case auction.Silver:
		return 30 * time.Minute
	}
	return 24 * time.Hour
}

func leaseAttempt(h []api.LeaseRecord) int { return h[len(h)-1].Attempt }
