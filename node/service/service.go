package service

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/history"
	"github.com/gpumesh/gpumesh/p2p/broadcast"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Health thresholds, in consecutive failed probes: a ready replica leaves
// routing after unreadyAfter, and is replaced after replaceAfter.
const (
	unreadyAfter = 2
	replaceAfter = 4
	// postBackoff spaces auctions after one that found no provider.
	postBackoff    = 2 * time.Second
	maxPostBackoff = time.Minute
	// maxEvents is how many events a service keeps.
	maxEvents = 64
)

// replica is one lease of a service: for a gang service (Job.Nodes > 1),
// one gang, whose rank 0 serves the port.
type replica struct {
	jobID    string
	leaseID  string
	provider peer.ID
	leaseEnd time.Time
	// leaseStart, price (USD per GPU-hour) and gpus are the lease's, for
	// what the replica costs.
	leaseStart time.Time
	price      float64
	gpus       int
	state      string
	since      time.Time
	leasedAt   time.Time
	renewing   bool
	failures   int
	probeErr   string

	// region is the one of the spec's regions it was leased in,
	// providerRegion its provider's (as it bid); rtt the round trip to its
	// provider as this node measured it (ns; 0: not yet).
	region, providerRegion string
	rtt                    atomic.Int64
	// members are a gang replica's members (Job.Nodes > 1) as its job's
	// view last showed them; the replica's own lease is rank 0's.
	members []api.GangMember

	suspect     atomic.Bool // a request failed at the transport: out of routing until a probe passes
	outstanding atomic.Int64
	win         window
	transport   *http.Transport
	stop        chan struct{}
}

// Service is one running service: its replicas and its gateway.
type Service struct {
	m    *Manager
	spec api.ServiceSpec
	ln   net.Listener
	// token is the gateway's secret: a request must carry it (TokenHeader
	// or ?token=) to be routed; only the renter's daemon and its owner
	// (serve post / serve status over the owner-only socket) know it.
	token string
	// hosts are the Host header values the gateway answers: its own
	// address (by IP and as localhost), so that a browser page on a name
	// rebound to 127.0.0.1 is turned away.
	hosts   []string
	srv     *http.Server
	created time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	win     window // every request, for the autoscaler
	retries atomic.Int64
	// keptBytes is the room taken by the bodies kept to send again of
	// the requests in flight (keepBody).
	keptBytes atomic.Int64
	proxy     *httputil.ReverseProxy
	// turn makes replicas equally loaded take requests in turn.
	turn atomic.Uint64
	// public is the public endpoint (nil without one, or when it could not
	// be served again after a restart: publicErr says why).
	public    *public
	publicErr string
	publicRec *publicRecord // the record of a public endpoint not served
	// tokens are the public endpoint's API tokens (read lock-free per
	// request, replaced under mu).
	tokens atomic.Pointer[[]*apiToken]
	// latency is a sample of win's figures a minute (the console's chart).
	latency *history.Ring[api.LatencySample]

	// routable is the replicas requests may go to, by region, nearest
	// first (rebuilt on each state change, read lock-free per request).
	routable atomic.Pointer[[]group]
	// routeChanged is notified each time routable is rebuilt: requests
	// waiting for a replica watch it.
	routeChanged broadcast.Signal
	// lastRequest is when the latest request came (unix ns, by the
	// service's clock), waiting how many wait for a replica (scale to
	// zero); kick wakes the control loop at once.
	lastRequest atomic.Int64
	waiting     atomic.Int64
	kick        chan struct{}

	mu           sync.Mutex
	desired      int
	reps         []*replica
	events       []api.ServiceEvent
	stopped      bool
	lowSince     time.Time
	postFailedAt time.Time
	postFailures int  // auctions in a row that found no lease
	dirty        bool // changed since last persisted
	halted       bool // the daemon is shutting down: nothing is cancelled any more

	// spentGPUSeconds and spentUSD are the GPU time and cost of the
	// replicas gone (those running add theirs in the view).
	spentGPUSeconds, spentUSD float64

	// asleep is set while a ScaleToZero service runs no replica for being
	// idle; wakeAt is when a request woke it, until its first replica is
	// ready (a cold start); coldStarts counts them, lastColdStart is the
	// latest's time.
	asleep        bool
	wakeAt        time.Time
	coldStarts    int
	lastColdStart time.Duration

	// avoid is the providers that lost a replica through their own fault
	// (went silent, restarted, broke), newest last: new replicas' auctions
	// exclude them, as the renter's requeue excludes a lost provider.
	avoid []string
}

func newService(m *Manager, spec api.ServiceSpec, ln net.Listener, token string) *Service {
	if token == "" {
		token = newToken()
	}
	s := &Service{m: m, spec: spec, ln: ln, token: token, created: m.cfg.Now(), desired: spec.Replicas,
		latency: history.New[api.LatencySample](history.Keep)}
	if ln != nil {
		s.hosts = gatewayHosts(ln.Addr().String())
	}
	s.ctx, s.cancel = context.WithCancel(m.ctx)
	s.proxy = s.newProxy()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	s.routable.Store(&[]group{})
	s.kick = make(chan struct{}, 1)
	s.lastRequest.Store(s.created.UnixNano())
	s.tokens.Store(&[]*apiToken{})
	return s
}

func (s *Service) now() time.Time { return s.m.cfg.Now() }

// Gateway is the gateway's loopback address.
func (s *Service) Gateway() string { return s.ln.Addr().String() }

func (s *Service) start() {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(s.ln)
	}()
	go func() {
		defer s.wg.Done()
		s.loop()
	}()
}

// tickEvery is the control loop's period: half the probe interval, within
// [100ms, 1s].
func (s *Service) tickEvery() time.Duration {
	return min(max(s.spec.ProbeInterval/2, 100*time.Millisecond), time.Second)
}

func (s *Service) loop() {
	t := time.NewTicker(s.tickEvery())
	defer t.Stop()
	for {
		s.tick()
		s.m.changed.Notify()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// event records (and logs) one thing that happened to the service; s.mu
// is held.
func (s *Service) event(format string, a ...any) {
	s.eventAt(s.now(), format, a...)
}

// eventAt is event at a given time: a decision's event carries the time
// the decision was taken at (the autoscaler's hysteresis counts from it),
// not the moment, later on a loaded host, it was recorded.
func (s *Service) eventAt(at time.Time, format string, a ...any) {
	what := fmt.Sprintf(format, a...)
	s.dirty = true
	s.m.log.Info("service: "+what, "service", s.spec.ID)
	defer s.m.changed.Notify()
	s.events = append(s.events, api.ServiceEvent{Time: at, What: what})
	if len(s.events) > maxEvents {
		s.events = s.events[len(s.events)-maxEvents:]
	}
}

// reroute rebuilds the routing set; s.mu is held. Ready replicas are
// routed to; draining ones only while no replica is ready.
func (s *Service) reroute() {
	var ready, draining []*replica
	for _, r := range s.reps {
		switch r.state {
		case api.ReplicaReady:
			ready = append(ready, r)
		case api.ReplicaDraining:
			if r.failures == 0 && r.transport != nil {
				draining = append(draining, r)
			}
		}
	}
	if len(ready) == 0 {
		ready = draining
	}
	gs := s.routeGroups(ready)
	s.routable.Store(&gs)
	s.routeChanged.Notify()
	s.m.changed.Notify()
}

// setState moves r to state; s.mu is held.
func (s *Service) setState(r *replica, state string) {
	if r.state == state {
		return
	}
	r.state, r.since = state, s.now()
	s.reroute()
}

// addReplica posts one more replica's auction, in region (one of the
// spec's regions, or "" without them); s.mu is held.
func (s *Service) addReplica(region string) {
	job := s.spec.Job
	job.Run.Env = maps.Clone(job.Run.Env)
	job.ID = terms.NewID("job")
	if region != "" {
		job.Region = region
	}
	// A replica is wanted now: a booking that starts later could not be
	// ready within the start timeout, and would hold a slot while the
	// service waits for it (a busy provider's later start is not a bid).
	job.CreatedAt, job.Deadline = time.Time{}, s.now().Add(s.spec.StartTimeout/2)
	job.Exclude = slices.Clone(s.avoid)
	r := &replica{jobID: job.ID, region: region, state: api.ReplicaBidding, since: s.now(), stop: make(chan struct{})}
	s.reps = append(s.reps, r)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		v, err := s.m.cfg.Leaser.Post(job)
		s.leased(r, v, err)
	}()
}

// leased takes a replica's auction outcome.
func (s *Service) leased(r *replica, v api.JobView, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && v.Lease == nil {
		err = fmt.Errorf("no lease (%s, %s)", v.State, orUnknown(strings.Join(v.Reasons, "; ")))
	}
	var prov peer.ID
	if err == nil {
		if prov, err = peer.Decode(v.Lease.Provider); err != nil {
			err = fmt.Errorf("lease names no valid provider: %w", err)
		}
	}
	if !slices.Contains(s.reps, r) {
		// The service stopped during the auction (retire cancelled the
		// job): a lease won meanwhile is not used either.
		if err == nil {
			s.cancelJob(r.jobID)
		}
		return
	}
	if err != nil {
		s.postFailedAt = s.now()
		s.postFailures++
		s.retire(r, "auction failed: "+err.Error())
		return
	}
	s.postFailures = 0
	r.leaseID, r.provider, r.leaseEnd, r.leasedAt = v.Lease.ID, prov, v.Lease.End, s.now()
	r.leaseStart, r.price, r.gpus = v.Lease.Start, v.Lease.Price, v.Lease.GPUCount
	if k := v.Job.Nodes; k > 1 {
		// Every member's GPUs for the span of rank 0's lease (the
		// members' leases are awarded together), at their mean price.
		r.members, r.gpus = v.Gang, k*v.Lease.GPUCount
		if len(v.Gang) > 0 {
			r.price = 0
			for _, m := range v.Gang {
				r.price += m.Price / float64(len(v.Gang))
			}
		}
	}
	if i := slices.IndexFunc(v.Bids, func(b terms.Ranked) bool { return b.Bid.Provider == v.Lease.Provider }); i >= 0 {
		r.providerRegion = v.Bids[i].Bid.Region
	}
	r.transport = s.newTransport(prov, r.leaseID)
	if s.stopped {
		s.retire(r, "service stopped")
		return
	}
	s.setState(r, api.ReplicaStarting)
	s.event("replica %s leased: lease %s on %s until %s", r.jobID, r.leaseID, shortPeer(prov), r.leaseEnd.UTC().Format(time.TimeOnly))
	if s.halted {
		return // kept in the record for the next run
	}
	s.startProbes(r)
}

// startProbes starts r's readiness probes; s.mu is held.
func (s *Service) startProbes(r *replica) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.probeLoop(r)
	}()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown reason"
	}
	return s
}

func shortPeer(p peer.ID) string {
	s := p.String()
	if len(s) > 12 {
		return "…" + s[len(s)-8:]
	}
	return s
}

// avoidProvider keeps provider out of the service's next auctions (the
// latest terms.MaxAttempts such providers); s.mu is held.
func (s *Service) avoidProvider(p peer.ID) {
	provider := p.String()
	if p == "" || slices.Contains(s.avoid, provider) {
		return
	}
	s.avoid = append(s.avoid, provider)
	if len(s.avoid) > terms.MaxAttempts {
		s.avoid = s.avoid[len(s.avoid)-terms.MaxAttempts:]
	}
	s.event("provider %s lost a replica through its own fault: left out of new replicas' auctions", shortPeer(p))
}

// endedWhy says why a replica's job ended: its lease's end or, for a
// gang, the end of the member whose lease ended first (the renter stops
// the others after it).
func endedWhy(v api.JobView) string {
	why, at := fmt.Sprintf("lease ended: %s %s", v.Run, v.Detail), v.Ended
	if !v.Run.Terminal() {
		at = time.Time{}
	}
	for _, m := range v.Gang {
		if m.Rank > 0 && m.Run.Terminal() && (at.IsZero() || m.Ended.Before(at)) {
			why, at = fmt.Sprintf("gang member %d ended: %s %s", m.Rank, m.Run, m.Detail), m.Ended
		}
	}
	return why
}

// avoidGang keeps the providers of a gang's members that ended through
// their own fault out of the service's next auctions; s.mu is held.
func (s *Service) avoidGang(gang []api.GangMember) {
	for _, m := range gang {
		if m.Rank == 0 || m.Fault != terms.FaultProvider {
			continue // rank 0's fault is its job's own
		}
		if p, err := peer.Decode(m.Provider); err == nil {
			s.avoidProvider(p)
		}
	}
}

// retire removes r from the service and cancels its lease (in the
// background); s.mu is held.
func (s *Service) retire(r *replica, why string) {
	i := -1
	for j, x := range s.reps {
		if x == r {
			i = j
		}
	}
	if i < 0 {
		return
	}
	s.reps = append(s.reps[:i], s.reps[i+1:]...)
	gs, usd := r.spent(s.now())
	s.spentGPUSeconds += gs
	s.spentUSD += usd
	close(r.stop)
	s.reroute()
	if r.transport != nil {
		r.transport.CloseIdleConnections()
	}
	s.event("replica %s removed: %s", r.jobID, why)
	// Also without a lease: a job whose auction found no lease stays
	// queued on the renter and would be leased later, a replica nobody
	// routes to holding a GPU.
	s.cancelJob(r.jobID)
}

// spent is r's GPU time up to now (its lease's, from its start to now or
// its end) and what that costs at the lease's price.
func (r *replica) spent(now time.Time) (gpuSeconds, usd float64) {
	if r.leaseID == "" || r.leaseStart.IsZero() {
		return 0, 0
	}
	end := now
	if !r.leaseEnd.IsZero() && r.leaseEnd.Before(end) {
		end = r.leaseEnd
	}
	if !end.After(r.leaseStart) {
		return 0, 0
	}
	gpuSeconds = end.Sub(r.leaseStart).Seconds() * float64(r.gpus)
	return gpuSeconds, gpuSeconds / 3600 * r.price
}

// cancelJob cancels a replica's job in the background.
func (s *Service) cancelJob(jobID string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if _, err := s.m.cfg.Leaser.Cancel(jobID); err != nil {
			s.m.log.Debug("service: cancel replica lease", "job", jobID, "err", err)
		}
	}()
}

// probeLoop probes r's readiness until it is retired.
func (s *Service) probeLoop(r *replica) {
	t := time.NewTicker(s.spec.ProbeInterval)
	defer t.Stop()
	for {
		err := s.probe(r)
		s.probed(r, err)
		if err == nil {
			s.measureRTT(r)
		}
		select {
		case <-r.stop:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe is one readiness check: GET the health path, or, without one,
// connect to the replica's port through its provider.
func (s *Service) probe(r *replica) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.probeTimeout())
	defer cancel()
	if s.spec.Health == "" {
		c, err := Connect(ctx, s.m.cfg.Open, r.provider, r.leaseID)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://replica"+s.spec.Health, nil)
	if err != nil {
		return err
	}
	resp, err := r.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	drain(resp)
	if resp.StatusCode >= 400 {
		return fmt.Errorf("health %s answered %s", s.spec.Health, resp.Status)
	}
	return nil
}

// probeTimeout bounds one probe: the spec's, else the interval (a probe
// slower than that is a failed one), at least 500ms.
func (s *Service) probeTimeout() time.Duration {
	if s.spec.ProbeTimeout > 0 {
		return s.spec.ProbeTimeout
	}
	return max(s.spec.ProbeInterval, 500*time.Millisecond)
}

// probed takes one probe's result.
func (s *Service) probed(r *replica, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || !slices.Contains(s.reps, r) {
		return
	}
	if err == nil {
		r.failures, r.probeErr = 0, ""
		r.suspect.Store(false)
		if r.state == api.ReplicaStarting || r.state == api.ReplicaUnhealthy {
			s.event("replica %s ready (%s after its lease)", r.jobID, s.now().Sub(r.leasedAt).Round(time.Millisecond))
			s.setState(r, api.ReplicaReady)
			s.coldStarted(s.now())
		}
		return
	}
	r.failures++
	r.probeErr = err.Error()
	if r.state == api.ReplicaReady && r.failures >= unreadyAfter {
		s.event("replica %s out of routing: %d failed probes: %v", r.jobID, r.failures, err)
		s.setState(r, api.ReplicaUnhealthy)
	}
	if r.state == api.ReplicaDraining {
		s.reroute()
	}
}

// backoff is how long after an auction that found no lease the next one
// starts: postBackoff, doubled for each further failure, at most
// maxPostBackoff.
func (s *Service) backoff() time.Duration {
	if s.postFailures == 0 {
		return 0
	}
	return min(postBackoff<<min(s.postFailures-1, 10), maxPostBackoff)
}

// renewBefore is how long before a lease's end its successor is leased.
func (s *Service) renewBefore() time.Duration {
	d := s.spec.Job.Duration
	return min(max(d/4, s.spec.Job.BidWindow+5*time.Second), d/2)
}

// scaleWindow is the span of requests the autoscaler looks at.
func (s *Service) scaleWindow() time.Duration { return max(3*time.Second, 3*s.tickEvery()) }

// tick is one pass of the control loop: it follows the leases, replaces
// failed replicas, renews ending leases, scales, and leases or drains
// replicas to meet the desired count.
func (s *Service) tick() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.halted {
		return
	}
	s.latency.Sample(now, func() api.LatencySample { return s.win.sample(now) })
	for _, r := range slices.Clone(s.reps) {
		if r.state == api.ReplicaBidding {
			continue
		}
		v, err := s.m.cfg.Leaser.View(r.jobID)
		if err == nil && len(v.Gang) > 0 {
			r.members = v.Gang
		}
		switch {
		case err != nil:
			s.retire(r, "job lost: "+err.Error())
		case v.Lease == nil || v.Lease.ID != r.leaseID:
			s.retire(r, "lease "+r.leaseID+" replaced or gone")
		case v.Run.Terminal() || slices.ContainsFunc(v.Gang, func(m api.GangMember) bool { return m.Run.Terminal() }):
			// The renter never requeues a replica's job (terms.Job.Requeues):
			// replacing it is the service's, below. A gang replica lives
			// and dies with each member: once one ended (its provider
			// lost, its run failed), the renter stops the others, and the
			// service replaces the whole gang.
			if v.Run.Terminal() && v.Fault == terms.FaultProvider {
				s.avoidProvider(r.provider)
			}
			s.avoidGang(v.Gang)
			s.retire(r, endedWhy(v))
		case r.state == api.ReplicaUnhealthy && r.failures >= replaceAfter:
			s.retire(r, fmt.Sprintf("failing its readiness probe (%d in a row): %s", r.failures, r.probeErr))
		case r.state == api.ReplicaStarting && now.Sub(r.leasedAt) > s.spec.StartTimeout:
			s.retire(r, fmt.Sprintf("not ready %s after its lease: %s", s.spec.StartTimeout, orUnknown(r.probeErr)))
		case !r.renewing && r.state != api.ReplicaDraining && r.leaseEnd.Sub(now) < s.renewBefore():
			r.renewing = true
			s.event("replica %s: lease ends at %s, leasing a successor", r.jobID, r.leaseEnd.UTC().Format(time.TimeOnly))
		}
	}
	s.autoscale(now)
	s.sleepIfIdle(now)

	var live []*replica
	readyLive := 0
	for _, r := range s.reps {
		if r.state == api.ReplicaDraining || r.renewing {
			continue
		}
		live = append(live, r)
		if r.state == api.ReplicaReady {
			readyLive++
		}
	}
	if len(live) < s.desired && now.Sub(s.postFailedAt) >= s.backoff() {
		added := map[string]int{}
		for range s.desired - len(live) {
			region := s.regionFor(live, added)
			added[region]++
			s.addReplica(region)
		}
	}
	if extra := len(live) - s.desired; extra > 0 {
		// Drain the least useful first: in the regions most over their
		// share, starting or unhealthy, then the newest ready ones;
		// auctions still running are left to finish.
		cands := make([]*replica, 0, len(live))
		for _, r := range live {
			if r.state != api.ReplicaBidding {
				cands = append(cands, r)
			}
		}
		s.drainOrder(cands, live)
		for _, r := range cands[:min(extra, len(cands))] {
			s.event("replica %s draining: %d replicas wanted", r.jobID, s.desired)
			s.setState(r, api.ReplicaDraining)
		}
	}
	if readyLive >= s.desired {
		for _, r := range s.reps {
			if r.renewing && r.state != api.ReplicaDraining {
				s.event("replica %s draining: its successor is ready", r.jobID)
				s.setState(r, api.ReplicaDraining)
			}
		}
	}
	for _, r := range slices.Clone(s.reps) {
		if r.state == api.ReplicaDraining && r.outstanding.Load() == 0 {
			s.retire(r, "drained")
		}
	}
	if s.dirty {
		s.save()
	}
}

// autoscale moves the desired count on load and latency (not while
// scaled to zero); s.mu is held.
func (s *Service) autoscale(now time.Time) {
	if s.asleep {
		return
	}
	in := scaleInput{now: now, desired: s.desired, min: s.spec.Replicas, max: s.spec.MaxReplicas,
		target: s.spec.TargetP95, targetConcurrency: s.spec.TargetConcurrency,
		lowSince: s.lowSince, downAfter: s.spec.ScaleDownAfter}
	for _, r := range s.reps {
		switch {
		case r.state == api.ReplicaBidding || r.state == api.ReplicaStarting:
			in.pending++
		case r.state == api.ReplicaReady && !r.renewing:
			in.ready++
			in.outstanding += int(r.outstanding.Load())
		}
	}
	sum := summarize(s.win.recent(now, s.scaleWindow()))
	in.p95, in.samples = sum.p95, sum.count
	d, low := decide(in)
	s.lowSince = low
	if d != s.desired {
		s.eventAt(now, "autoscale: %d → %d replicas (p95 %s over %d requests, %d outstanding on %d ready)",
			s.desired, d, in.p95.Round(time.Millisecond), in.samples, in.outstanding, in.ready)
		s.desired = d
	}
}

// scale changes the service's bounds.
func (s *Service) scale(req api.ScaleRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return badRequest("service %s is stopped", s.spec.ID)
	}
	lo, hi := s.spec.Replicas, s.spec.MaxReplicas
	if req.Replicas != 0 {
		lo = req.Replicas
		hi = max(hi, lo)
	}
	if req.MaxReplicas != 0 {
		hi = req.MaxReplicas
	}
	if lo < 1 || hi < lo || hi > MaxReplicas {
		return badRequest("service: replicas %d..%d: need 1 <= replicas <= max replicas <= %d", lo, hi, MaxReplicas)
	}
	if floor := regionFloor(&s.spec); lo < floor {
		return badRequest("service: replicas %d is fewer than its %d regions × %d per region", lo, len(s.spec.Regions), s.spec.ReplicasPerRegion)
	}
	s.spec.Replicas, s.spec.MaxReplicas = lo, hi
	d := min(max(s.desired, lo), hi)
	if d != s.desired && !s.asleep {
		s.event("scaled by its owner: %d → %d replicas (bounds %d..%d)", s.desired, d, lo, hi)
		s.desired = d
	}
	return nil
}

// stop closes the gateway and cancels every replica's lease.
func (s *Service) stop(why string) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.event("service stopping: %s", why)
	for _, r := range slices.Clone(s.reps) {
		s.retire(r, "service stopped")
	}
	s.save()
	s.mu.Unlock()
	s.shutdown()
	s.cancel()
	s.wg.Wait()
}

// shutdown closes the gateway and the public endpoint, letting requests
// in flight finish for a while.
func (s *Service) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	if s.public != nil {
		wg.Go(func() { _ = s.public.srv.Shutdown(ctx) })
	}
	_ = s.srv.Shutdown(ctx)
	wg.Wait()
}

// halt stops serving because the daemon shuts down: the gateway closes
// and the control loop ends, but the replicas keep their leases and the
// service is persisted for the next run to adopt them.
func (s *Service) halt() {
	s.mu.Lock()
	s.halted = true
	s.mu.Unlock()
	s.shutdown()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	if !s.stopped {
		s.save()
	}
	s.mu.Unlock()
}

// view is the service's status.
func (s *Service) view() api.ServiceView {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := api.ServiceView{ID: s.spec.ID, Spec: s.spec, Gateway: s.Gateway(), Token: s.token, Stopped: s.stopped, Desired: s.desired,
		Retries: s.retries.Load(), Events: append([]api.ServiceEvent(nil), s.events...), Created: s.created,
		Replicas: []api.ReplicaView{}}
	outstanding := 0
	gpuSeconds, usd := s.spentGPUSeconds, s.spentUSD
	for _, r := range s.reps {
		rv := api.ReplicaView{JobID: r.jobID, LeaseID: r.leaseID, Provider: r.provider.String(), State: r.state,
			LeaseEnd: r.leaseEnd, PriceUSD: r.price, GPUs: r.gpus, Renewing: r.renewing, Since: r.since,
			Region: r.region, ProviderRegion: r.providerRegion, RTTMS: ms(time.Duration(r.rtt.Load())),
			Members: slices.Clone(r.members), ReplicaStats: r.win.view(now, int(r.outstanding.Load()))}
		gs, cost := r.spent(now)
		setCost(&rv.ReplicaStats, gs, cost)
		gpuSeconds += gs
		usd += cost
		if r.provider == "" {
			rv.Provider = ""
		}
		if rv.LastError == "" && r.probeErr != "" {
			rv.LastError = "probe: " + r.probeErr
		}
		if r.state == api.ReplicaReady {
			v.Ready++
		}
		outstanding += rv.Outstanding
		v.Replicas = append(v.Replicas, rv)
	}
	v.Regions = s.regionViews()
	v.ScaledToZero, v.ColdStarts, v.LastColdStartMS = s.asleep, s.coldStarts, ms(s.lastColdStart)
	v.Totals = s.win.view(now, outstanding)
	setCost(&v.Totals, gpuSeconds, usd)
	if s.spec.Public != nil {
		pv := &api.PublicView{Tokens: len(*s.tokens.Load()), Error: s.publicErr}
		if p := s.public; p != nil {
			pv.URL, pv.Fingerprint, pv.CertPEM, pv.NotAfter = "https://"+p.ln.Addr().String(), p.fingerprint, p.selfCert, p.notAfter
		}
		v.Public = pv
	}
	return v
}
