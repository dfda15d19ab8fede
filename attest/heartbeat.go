package attest

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/auction/terms"
)

// Heartbeat timing bounds used by HeartbeatMonitor.
const (
	// HeartbeatSkew is how far a heartbeat's timestamp may lie in the future
	// of the receiver's clock, or before the lease start.
	HeartbeatSkew = 30 * time.Second
	// DefaultHeartbeatInterval is used when a monitor is created with a
	// non-positive interval.
	DefaultHeartbeatInterval = 10 * time.Second
	// heartbeatLagIntervals: a heartbeat older than this many intervals (plus
	// HeartbeatSkew) when it arrives is stale.
	heartbeatLagIntervals = 5
	// maxHeartbeatGPUs bounds the devices a heartbeat may report.
	maxHeartbeatGPUs = MaxFingerprintGPUs
	// MaxSummaryGaps bounds HeartbeatSummary.Gaps, so that a summary always
	// fits in a receipt: when there are more gaps, the longest are kept.
	MaxSummaryGaps = 64
	// HeartbeatRateFactor and HeartbeatBurst are HeartbeatMonitor's token
	// bucket: it accepts HeartbeatRateFactor heartbeats per promised
	// interval on average, and bursts of up to HeartbeatBurst (a provider
	// flushing heartbeats queued during a network stall).
	HeartbeatRateFactor = 4
	HeartbeatBurst      = 8
	// MaxMonitorHeartbeats bounds the heartbeats one monitor keeps (about
	// 30 days at the default interval; 10 MiB): beyond it, heartbeats are
	// refused as rate limited.
	MaxMonitorHeartbeats = 1 << 18
)

// Errors returned by HeartbeatMonitor.Accept and CheckHeartbeatAgainstFingerprint.
var (
	ErrReplay           = errors.New("attest: replayed or out-of-order heartbeat")
	ErrWrongLease       = errors.New("attest: heartbeat for another lease")
	ErrWrongSigner      = errors.New("attest: heartbeat not signed by the lease's provider")
	ErrClock            = errors.New("attest: heartbeat timestamp out of bounds")
	ErrInvalidHeartbeat = errors.New("attest: invalid heartbeat")
	ErrContradiction    = errors.New("attest: heartbeat contradicts fingerprint")
	ErrRateLimited      = errors.New("attest: heartbeat rate limit exceeded")
	// ErrNoFingerprint: the heartbeat names devices (or claims NVML
	// telemetry) before the provider's signed fingerprint came, so
	// nothing says the devices are the provider's. Not slashable: there
	// is no signed statement it contradicts.
	ErrNoFingerprint = errors.New("attest: heartbeat names gpus but no signed fingerprint came with the lease")
)

// Heartbeat is a provider's signed telemetry sample for a running lease.
// GPU figures are zero when Source is SourceProcess.
type Heartbeat struct {
	LeaseID  string    `json:"lease_id"`
	Provider string    `json:"provider"`
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	// GPUUtil is the mean utilisation of the lease's GPUs, in percent (0..100).
	GPUUtil    float64 `json:"gpu_util"`
	MemUsedMB  int     `json:"mem_used_mb"`
	TempC      int     `json:"temp_c"`
	PowerW     int     `json:"power_w"`
	CPUSeconds float64 `json:"cpu_seconds"`
	RSSMB      int     `json:"rss_mb"`
	// Source is SourceNVML or SourceProcess.
	Source string `json:"source"`
	// GPUUUIDs lists the devices sampled, when known (NVML reports them).
	// It lets a renter check the telemetry against the signed fingerprint.
	GPUUUIDs []string `json:"gpu_uuids,omitempty"`
	// Devices are the per-device readings of the lease's GPUs (NVML); the
	// aggregate fields above summarise them. Their UUIDs are also listed
	// in GPUUUIDs.
	Devices []DeviceSample `json:"devices,omitempty"`
	// Fingerprint is the provider's signed hardware fingerprint, whose
	// hash its capability advertises: the renter holds the telemetry to it
	// (HeartbeatMonitor.SetFingerprint).
	Fingerprint *sign.Envelope `json:"fingerprint,omitempty"`
	// Preparing marks a heartbeat sent from the lease's start while the
	// job's inputs and checkpoint are fetched, before it starts: proof the
	// provider is alive, not that the job runs (its renter does not count
	// it as the run's start).
	Preparing bool `json:"preparing,omitempty"`
}

// DeviceSample is one GPU's reading in a heartbeat.
type DeviceSample struct {
	Index     int     `json:"index"` // the provider's device index
	UUID      string  `json:"uuid,omitempty"`
	Util      float64 `json:"util"` // percent, 0..100
	MemUsedMB int     `json:"mem_used_mb"`
	TempC     int     `json:"temp_c"`
	PowerW    int     `json:"power_w"`
}

func (hb Heartbeat) validate() error {
	switch {
	case hb.LeaseID == "":
		return fmt.Errorf("%w: empty lease id", ErrInvalidHeartbeat)
	case hb.Source != SourceNVML && hb.Source != SourceProcess:
		return fmt.Errorf("%w: source %q", ErrInvalidHeartbeat, hb.Source)
	case math.IsNaN(hb.GPUUtil) || hb.GPUUtil < 0 || hb.GPUUtil > 100:
		return fmt.Errorf("%w: gpu utilisation %v outside 0..100", ErrInvalidHeartbeat, hb.GPUUtil)
	case math.IsNaN(hb.CPUSeconds) || math.IsInf(hb.CPUSeconds, 0) || hb.CPUSeconds < 0:
		return fmt.Errorf("%w: cpu seconds %v", ErrInvalidHeartbeat, hb.CPUSeconds)
	case hb.MemUsedMB < 0 || hb.PowerW < 0 || hb.RSSMB < 0:
		return fmt.Errorf("%w: negative counter", ErrInvalidHeartbeat)
	case len(hb.GPUUUIDs) > maxHeartbeatGPUs || len(hb.Devices) > maxHeartbeatGPUs:
		return fmt.Errorf("%w: %d gpus", ErrInvalidHeartbeat, max(len(hb.GPUUUIDs), len(hb.Devices)))
	case hb.Time.IsZero():
		return fmt.Errorf("%w: zero timestamp", ErrInvalidHeartbeat)
	}
	for _, d := range hb.Devices {
		if math.IsNaN(d.Util) || d.Util < 0 || d.Util > 100 || d.MemUsedMB < 0 || d.PowerW < 0 || d.Index < 0 {
			return fmt.Errorf("%w: device %d reading out of range", ErrInvalidHeartbeat, d.Index)
		}
	}
	return nil
}

// uuids is the devices the heartbeat names: GPUUUIDs and the per-device
// readings' UUIDs, each once.
func (hb Heartbeat) uuids() []string {
	out := append([]string(nil), hb.GPUUUIDs...)
	in := make(map[string]bool, len(out))
	for _, u := range out {
		in[u] = true
	}
	for _, d := range hb.Devices {
		if d.UUID != "" && !in[d.UUID] {
			in[d.UUID] = true
			out = append(out, d.UUID)
		}
	}
	return out
}

// SignHeartbeat signs hb with the provider's key. An empty hb.Provider is
// filled with the signer's ID; any other provider is an error.
func SignHeartbeat(s *sign.Signer, hb Heartbeat) (*sign.Envelope, error) {
	if s == nil {
		return nil, errors.New("attest: nil signer")
	}
	if hb.Provider == "" {
		hb.Provider = s.ID().String()
	}
	if hb.Provider != s.ID().String() {
		return nil, fmt.Errorf("%w: provider %s is not the signer %s", ErrWrongSigner, hb.Provider, s.ID())
	}
	if err := hb.validate(); err != nil {
		return nil, err
	}
	return sign.Seal(s, sign.DomainHeartbeat, hb)
}

// OpenHeartbeat verifies a heartbeat envelope's signature, checks that the
// signer is the heartbeat's provider and returns the heartbeat. It does not
// check sequencing or timing; HeartbeatMonitor does.
func OpenHeartbeat(env *sign.Envelope) (Heartbeat, error) {
	var hb Heartbeat
	id, err := sign.Open(env, sign.DomainHeartbeat, &hb)
	if err != nil {
		return Heartbeat{}, fmt.Errorf("attest: open heartbeat: %w", err)
	}
	if hb.Provider != id.String() {
		return Heartbeat{}, fmt.Errorf("%w: signed by %s, claims %q", ErrWrongSigner, id, hb.Provider)
	}
	if err := hb.validate(); err != nil {
		return Heartbeat{}, err
	}
	return hb, nil
}

// CheckHeartbeatAgainstFingerprint reports (as ErrContradiction) telemetry
// that the provider's own signed fingerprint makes impossible: NVML
// telemetry from a machine whose hardware was only declared, a device UUID
// the fingerprint does not list, more devices than the fingerprint has, or
// more GPU memory in use than the listed devices hold. Both values must
// already be verified (OpenHeartbeat, OpenFingerprint).
func CheckHeartbeatAgainstFingerprint(hb Heartbeat, fp Fingerprint) error {
	if hb.Provider != fp.Peer {
		return fmt.Errorf("%w: heartbeat from %q, fingerprint of %q", ErrContradiction, hb.Provider, fp.Peer)
	}
	if hb.Source == SourceNVML {
		detected := 0
		for _, g := range fp.GPUs {
			if g.Detected {
				detected++
			}
		}
		if fp.Source != SourceNVML || detected == 0 {
			return fmt.Errorf("%w: nvml telemetry but the fingerprint's hardware is %s only", ErrContradiction, fp.Source)
		}
	}
	uuids := hb.uuids()
	if len(uuids) > len(fp.GPUs) {
		return fmt.Errorf("%w: %d gpus reported, fingerprint lists %d", ErrContradiction, len(uuids), len(fp.GPUs))
	}
	known := make(map[string]bool, len(fp.GPUs))
	vramMB := 0
	for _, g := range fp.GPUs {
		if g.UUID != "" {
			known[g.UUID] = true
		}
		vramMB += g.VRAMGB * 1024
	}
	seen := make(map[string]bool, len(hb.GPUUUIDs))
	for _, d := range hb.Devices {
		if d.Index >= len(fp.GPUs) {
			return fmt.Errorf("%w: device index %d, fingerprint lists %d gpus", ErrContradiction, d.Index, len(fp.GPUs))
		}
		if d.UUID != "" && !known[d.UUID] {
			return fmt.Errorf("%w: gpu %q not in fingerprint", ErrContradiction, d.UUID)
		}
	}
	for _, u := range hb.GPUUUIDs {
		if !known[u] {
			return fmt.Errorf("%w: gpu %q not in fingerprint", ErrContradiction, u)
		}
		if seen[u] {
			return fmt.Errorf("%w: gpu %q reported twice", ErrContradiction, u)
		}
		seen[u] = true
	}
	if hb.Source == SourceNVML && vramMB > 0 && hb.MemUsedMB > vramMB {
		return fmt.Errorf("%w: %d MB gpu memory in use, fingerprint holds %d MB", ErrContradiction, hb.MemUsedMB, vramMB)
	}
	return nil
}

// HeartbeatSummary is the renter's account of a lease's telemetry. It is
// carried inside the completion receipt.
type HeartbeatSummary struct {
	// Count is the number of accepted heartbeats within the lease span.
	Count int `json:"count"`
	// Expected is the number of whole heartbeat intervals in the span.
	Expected int `json:"expected"`
	// Coverage is the fraction (0..1) of the lease span lying within half an
	// interval of an accepted heartbeat: one heartbeat per interval gives
	// (close to) 1, every other one dropped gives 0.5.
	Coverage float64 `json:"coverage"`
	// Gaps are the spans longer than two intervals with no heartbeat, in
	// time order; at most MaxSummaryGaps of them (the longest).
	Gaps []terms.Interval `json:"gaps,omitempty"`
	// Rejected counts heartbeats that failed verification, RateLimited
	// those among them refused by the monitor's rate limit.
	Rejected    int     `json:"rejected"`
	RateLimited int     `json:"rate_limited,omitempty"`
	MaxTempC    int     `json:"max_temp_c"`
	MeanGPUUtil float64 `json:"mean_gpu_util"`
}

// HeartbeatMonitor is a renter's per-lease verifier and accumulator of the
// provider's heartbeats. It is safe for concurrent use. Its memory is
// bounded: it keeps at most MaxMonitorHeartbeats heartbeats, and accepts
// them at no more than HeartbeatRateFactor per interval (see Accept).
type HeartbeatMonitor struct {
	leaseID  string
	provider sign.ID
	start    time.Time
	interval time.Duration

	mu          sync.Mutex
	fp          *Fingerprint
	fpEnv       *sign.Envelope
	haveSeq     bool
	lastSeq     uint64
	lastTime    time.Time
	lastAt      time.Time // when (receiver's clock) the last one was accepted
	beats       []beat
	rejected    int
	rateLimited int
	tokens      float64
	refilled    time.Time
}

type beat struct {
	seq  uint64
	t    time.Time
	util float64
	temp int
}

// NewHeartbeatMonitor returns a monitor for one lease. interval is the
// heartbeat period the provider promised; a non-positive interval means
// DefaultHeartbeatInterval.
func NewHeartbeatMonitor(leaseID string, provider sign.ID, start time.Time, interval time.Duration) *HeartbeatMonitor {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	return &HeartbeatMonitor{leaseID: leaseID, provider: provider, start: start, interval: interval}
}

// SetFingerprint gives the monitor the provider's signed hardware
// fingerprint: from then on Accept refuses (ErrContradiction) heartbeats
// the fingerprint makes impossible, such as ones naming a GPU it does not
// list (CheckHeartbeatAgainstFingerprint). The fingerprint must verify and
// describe the lease's provider.
func (m *HeartbeatMonitor) SetFingerprint(env *sign.Envelope) error {
	fp, err := OpenFingerprint(env)
	if err != nil {
		return err
	}
	if fp.Peer != m.provider.String() {
		return fmt.Errorf("%w: fingerprint of %s, lease provider %s", ErrWrongSigner, fp.Peer, m.provider)
	}
	m.mu.Lock()
	m.fp = &fp
	m.fpEnv = env
	m.mu.Unlock()
	return nil
}

// Fingerprint is the envelope SetFingerprint took (nil before): with a
// heartbeat Accept refused as ErrContradiction it is the slash evidence.
func (m *HeartbeatMonitor) Fingerprint() *sign.Envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fpEnv
}

// Accept verifies a heartbeat envelope received at now and records it. It
// checks the signature, that the signer is the lease's provider and the
// heartbeat's Provider, the lease id, that Seq is strictly greater than any
// accepted before (ErrReplay otherwise), that the timestamp is not before
// the previous heartbeat's, not more than HeartbeatSkew before the lease
// start or after now, and not older than five intervals plus HeartbeatSkew
// (ErrClock), and, once SetFingerprint was called, that the fingerprint
// allows it (ErrContradiction); before it, a heartbeat naming devices or
// claiming NVML telemetry is refused (ErrNoFingerprint). A heartbeat passing all that is still
// refused (ErrRateLimited) when the lease's token bucket, refilled by now at
// HeartbeatRateFactor per interval up to HeartbeatBurst, is empty, or when
// the monitor already holds MaxMonitorHeartbeats. Every rejection is
// counted in the summary.
func (m *HeartbeatMonitor) Accept(env *sign.Envelope, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.accept(env, now); err != nil {
		m.rejected++
		if errors.Is(err, ErrRateLimited) {
			m.rateLimited++
		}
		return err
	}
	return nil
}

// take spends one token of the bucket at now, reporting whether there was
// one. A clock going backwards refills nothing.
func (m *HeartbeatMonitor) take(now time.Time) bool {
	if m.refilled.IsZero() {
		m.tokens, m.refilled = HeartbeatBurst, now
	}
	if now.After(m.refilled) {
		rate := HeartbeatRateFactor / m.interval.Seconds()
		m.tokens = math.Min(HeartbeatBurst, m.tokens+now.Sub(m.refilled).Seconds()*rate)
		m.refilled = now
	}
	if m.tokens < 1 {
		return false
	}
	m.tokens--
	return true
}

func (m *HeartbeatMonitor) accept(env *sign.Envelope, now time.Time) error {
	if env == nil {
		return sign.ErrMalformed
	}
	if env.Signer != m.provider.String() {
		return fmt.Errorf("%w: signer %q, provider %s", ErrWrongSigner, env.Signer, m.provider)
	}
	hb, err := OpenHeartbeat(env)
	if err != nil {
		return err
	}
	if hb.LeaseID != m.leaseID {
		return fmt.Errorf("%w: %q, want %q", ErrWrongLease, hb.LeaseID, m.leaseID)
	}
	// A beat overtaken on the way by the next one (its sender gave up
	// waiting for an answer and sent the next) is taken once, where it
	// belongs: its time between those of its neighbours by sequence.
	late := m.haveSeq && hb.Seq <= m.lastSeq
	if late {
		if err := m.fitsLate(hb); err != nil {
			return err
		}
	}
	switch {
	case hb.Time.After(now.Add(HeartbeatSkew)):
		return fmt.Errorf("%w: %s is in the future of %s", ErrClock, hb.Time.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	case hb.Time.Before(m.start.Add(-HeartbeatSkew)):
		return fmt.Errorf("%w: %s is before the lease start %s", ErrClock, hb.Time.Format(time.RFC3339Nano), m.start.Format(time.RFC3339Nano))
	case hb.Time.Before(now.Add(-(heartbeatLagIntervals*m.interval + HeartbeatSkew))):
		return fmt.Errorf("%w: %s is stale at %s", ErrClock, hb.Time.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	case !late && m.haveSeq && hb.Time.Before(m.lastTime):
		return fmt.Errorf("%w: %s goes back from %s", ErrClock, hb.Time.Format(time.RFC3339Nano), m.lastTime.Format(time.RFC3339Nano))
	}
	if m.fp != nil {
		if err := CheckHeartbeatAgainstFingerprint(hb, *m.fp); err != nil {
			return err
		}
	} else if uuids := hb.uuids(); hb.Source == SourceNVML || len(uuids) > 0 {
		return fmt.Errorf("%w: %s telemetry naming %d gpus", ErrNoFingerprint, hb.Source, len(uuids))
	}
	if len(m.beats) >= MaxMonitorHeartbeats {
		return fmt.Errorf("%w: lease already holds %d heartbeats", ErrRateLimited, len(m.beats))
	}
	if !m.take(now) {
		return fmt.Errorf("%w: more than %d per %s", ErrRateLimited, HeartbeatRateFactor, m.interval)
	}
	if !late {
		m.haveSeq, m.lastSeq, m.lastTime = true, hb.Seq, hb.Time
	}
	m.lastAt = now
	m.beats = append(m.beats, beat{seq: hb.Seq, t: hb.Time, util: hb.GPUUtil, temp: hb.TempC})
	return nil
}

// fitsLate checks a beat whose sequence number is below the last one's:
// never taken before, and timed no earlier than the accepted beat before
// it and no later than the one after it (by sequence).
func (m *HeartbeatMonitor) fitsLate(hb Heartbeat) error {
	var prev, next *beat
	for i := range m.beats {
		b := &m.beats[i]
		switch {
		case b.seq == hb.Seq:
			return fmt.Errorf("%w: seq %d again", ErrReplay, hb.Seq)
		case b.seq < hb.Seq && (prev == nil || b.seq > prev.seq):
			prev = b
		case b.seq > hb.Seq && (next == nil || b.seq < next.seq):
			next = b
		}
	}
	if prev != nil && hb.Time.Before(prev.t) || next != nil && hb.Time.After(next.t) {
		return fmt.Errorf("%w: seq %d at %s out of order after %d", ErrReplay, hb.Seq, hb.Time.Format(time.RFC3339Nano), m.lastSeq)
	}
	return nil
}

// LastAccepted is when, by the receiver's clock (Accept's now), the last
// heartbeat was accepted; zero before the first. A renter measures a
// provider's silence from it.
func (m *HeartbeatMonitor) LastAccepted() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastAt
}

// Summary accounts for the lease span [start, end) given the heartbeats
// accepted so far. Heartbeats after end are ignored.
func (m *HeartbeatMonitor) Summary(end time.Time) HeartbeatSummary {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := HeartbeatSummary{Rejected: m.rejected, RateLimited: m.rateLimited}
	span := end.Sub(m.start)
	if span > 0 {
		s.Expected = int(span / m.interval)
	}
	var in []time.Time
	var utilSum float64
	for _, b := range m.beats {
		if b.t.After(end) {
			continue
		}
		in = append(in, b.t)
		utilSum += b.util
		if s.Count == 0 || b.temp > s.MaxTempC {
			s.MaxTempC = b.temp
		}
		s.Count++
	}
	if s.Count > 0 {
		s.MeanGPUUtil = utilSum / float64(s.Count)
	}
	if span <= 0 {
		return s
	}
	// Accepted timestamps are non-decreasing, but sort anyway: cheap, and
	// keeps Summary correct whatever Accept's ordering rule becomes.
	sort.Slice(in, func(i, j int) bool { return in[i].Before(in[j]) })

	// Coverage: union of [t-interval/2, t+interval/2) clipped to the span.
	half := m.interval / 2
	var covered time.Duration
	curStart, curEnd := time.Time{}, time.Time{}
	flush := func() {
		if !curEnd.After(curStart) {
			return
		}
		covered += curEnd.Sub(curStart)
	}
	for i, t := range in {
		a, b := t.Add(-half), t.Add(m.interval-half)
		if a.Before(m.start) {
			a = m.start
		}
		if b.After(end) {
			b = end
		}
		if !b.After(a) {
			continue
		}
		if i > 0 && !a.After(curEnd) {
			if b.After(curEnd) {
				curEnd = b
			}
			continue
		}
		flush()
		curStart, curEnd = a, b
	}
	flush()
	s.Coverage = math.Min(1, float64(covered)/float64(span))

	// Gaps: consecutive points of start, heartbeats, end further apart than
	// two intervals.
	prev := m.start
	for _, t := range append(in, end) {
		if t.Before(prev) {
			continue
		}
		if t.Sub(prev) > 2*m.interval {
			s.Gaps = append(s.Gaps, terms.Interval{Start: prev, End: t})
		}
		prev = t
	}
	if len(s.Gaps) > MaxSummaryGaps {
		idx := make([]int, len(s.Gaps))
		for i := range idx {
			idx[i] = i
		}
		dur := func(i int) time.Duration { return s.Gaps[i].End.Sub(s.Gaps[i].Start) }
		sort.SliceStable(idx, func(a, b int) bool { return dur(idx[a]) > dur(idx[b]) })
		idx = idx[:MaxSummaryGaps]
		sort.Ints(idx)
		kept := make([]terms.Interval, len(idx))
		for i, j := range idx {
			kept[i] = s.Gaps[j]
		}
		s.Gaps = kept
	}
	return s
}

// SilentUntil extends a summary taken up to from (over a span that began
// at start) with silence until end: no heartbeat after from, so the
// extension is one gap, and coverage and the expected count cover the
// longer span. A renter that no longer holds a lost lease's heartbeats
// (it restarted) answers the provider's late report with it.
func (s HeartbeatSummary) SilentUntil(start, from, end time.Time, interval time.Duration) HeartbeatSummary {
	if !end.After(from) || interval <= 0 {
		return s
	}
	out := s
	out.Gaps = append(append([]terms.Interval(nil), s.Gaps...), terms.Interval{Start: from, End: end})
	if span := end.Sub(start); span > 0 {
		out.Expected = int(span / interval)
		if old := from.Sub(start); old > 0 {
			out.Coverage = s.Coverage * float64(old) / float64(span)
		} else {
			out.Coverage = 0
		}
	}
	return out
}
