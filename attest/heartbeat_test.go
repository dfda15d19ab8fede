package attest_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

const iv = 10 * time.Second

func hbEnv(t *testing.T, s *sign.Signer, lease string, seq uint64, at time.Time) *sign.Envelope {
	t.Helper()
	env, err := attest.SignHeartbeat(s, attest.Heartbeat{
		LeaseID: lease, Seq: seq, Time: at, GPUUtil: 80, MemUsedMB: 1000,
		TempC: 60 + int(seq%10), PowerW: 300, Source: attest.SourceProcess, // no fingerprint: NVML would be refused
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestHeartbeatRoundTrip(t *testing.T) {
	s := signtest.New(t)
	env := hbEnv(t, s, "L1", 1, t0)
	b, err := env.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	env2, err := sign.UnmarshalEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := attest.OpenHeartbeat(env2)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Provider != s.ID().String() || hb.Seq != 1 || !hb.Time.Equal(t0) || hb.GPUUtil != 80 {
		t.Fatalf("round trip changed the heartbeat: %+v", hb)
	}
	if _, err := attest.SignHeartbeat(s, attest.Heartbeat{LeaseID: "L1", Provider: signtest.New(t).ID().String(), Time: t0, Source: attest.SourceNVML}); !errors.Is(err, attest.ErrWrongSigner) {
		t.Fatalf("heartbeat for another provider signed: %v", err)
	}
	if _, err := attest.SignHeartbeat(s, attest.Heartbeat{LeaseID: "L1", Time: t0, Source: attest.SourceNVML, GPUUtil: 140}); !errors.Is(err, attest.ErrInvalidHeartbeat) {
		t.Fatalf("utilisation 140%% accepted: %v", err)
	}
}

func TestHeartbeatMonitorRejects(t *testing.T) {
	prov, other := signtest.Pair(t)
	m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	now := t0.Add(time.Minute)
	if err := m.Accept(hbEnv(t, prov, "L1", 5, now), now); err != nil {
		t.Fatal(err)
	}
	replay := hbEnv(t, prov, "L1", 5, now.Add(time.Second))
	older := hbEnv(t, prov, "L1", 4, now.Add(time.Second))
	wrongLease := hbEnv(t, prov, "L2", 6, now)
	otherSigner := hbEnv(t, other, "L1", 7, now)
	// Signed by other but naming prov: sign.Seal bypasses SignHeartbeat's check.
	impostor, err := sign.Seal(other, sign.DomainHeartbeat, attest.Heartbeat{
		LeaseID: "L1", Provider: prov.ID().String(), Seq: 8, Time: now, Source: attest.SourceNVML})
	if err != nil {
		t.Fatal(err)
	}
	forged := hbEnv(t, prov, "L1", 9, now)
	forged.Sig[0] ^= 0xff
	wrongDomain, err := sign.Seal(prov, sign.DomainFingerprint, attest.Heartbeat{
		LeaseID: "L1", Provider: prov.ID().String(), Seq: 10, Time: now, Source: attest.SourceNVML})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  *sign.Envelope
		at   time.Time
		want error
	}{
		{"same seq", replay, now.Add(time.Second), attest.ErrReplay},
		{"old seq", older, now.Add(time.Second), attest.ErrReplay},
		{"exact replay", hbEnv(t, prov, "L1", 5, now), now.Add(2 * time.Second), attest.ErrReplay},
		{"wrong lease", wrongLease, now, attest.ErrWrongLease},
		{"other signer", otherSigner, now, attest.ErrWrongSigner},
		{"impostor", impostor, now, attest.ErrWrongSigner},
		{"bad sig", forged, now, sign.ErrBadSignature},
		{"wrong domain", wrongDomain, now, sign.ErrWrongDomain},
		{"future", hbEnv(t, prov, "L1", 11, now.Add(time.Hour)), now, attest.ErrClock},
		{"before start", hbEnv(t, prov, "L1", 12, t0.Add(-time.Hour)), now, attest.ErrClock},
		{"stale", hbEnv(t, prov, "L1", 13, now), now.Add(time.Hour), attest.ErrClock},
		{"time goes back", hbEnv(t, prov, "L1", 14, now.Add(-5*time.Second)), now, attest.ErrClock},
		{"nil", nil, now, sign.ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := m.Accept(c.env, c.at); !errors.Is(err, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			}
		})
	}
	s := m.Summary(now.Add(time.Second))
	if s.Rejected != len(cases) || s.Count != 1 {
		t.Fatalf("summary counted %d rejected / %d accepted, want %d / 1", s.Rejected, s.Count, len(cases))
	}
	// Still accepts the next genuine heartbeat.
	if err := m.Accept(hbEnv(t, prov, "L1", 6, now.Add(iv)), now.Add(iv)); err != nil {
		t.Fatalf("genuine heartbeat after rejections: %v", err)
	}
}

// TestHeartbeatOvertakenOnTheWay: a provider that gives up waiting for a
// beat's answer sends the next one, which may arrive first; the earlier
// beat, when it comes, is taken once, in its place, and counts towards
// coverage. A late beat whose time does not fit between its neighbours,
// or one taken already, is refused as a replay.
func TestHeartbeatOvertakenOnTheWay(t *testing.T) {
	prov := signtest.New(t)
	m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * iv) }
	for _, seq := range []uint64{1, 3, 2, 5} {
		if err := m.Accept(hbEnv(t, prov, "L1", seq, at(int(seq))), at(5)); err != nil {
			t.Fatalf("beat %d: %v", seq, err)
		}
	}
	for _, c := range []struct {
		name string
		seq  uint64
		time time.Time
	}{
		{"taken already", 2, at(2)},
		{"after its successor", 4, at(5).Add(time.Second)},
		{"before its predecessor", 4, at(3).Add(-time.Second)},
	} {
		if err := m.Accept(hbEnv(t, prov, "L1", c.seq, c.time), at(5)); !errors.Is(err, attest.ErrReplay) {
			t.Errorf("%s: %v, want a replay", c.name, err)
		}
	}
	if err := m.Accept(hbEnv(t, prov, "L1", 4, at(4)), at(5)); err != nil {
		t.Fatalf("beat 4 in its place: %v", err)
	}
	s := m.Summary(at(6))
	if s.Count != 5 || s.Rejected != 3 || len(s.Gaps) != 0 {
		t.Fatalf("summary %+v: want 5 beats, 3 refused, no gap", s)
	}
}

func TestHeartbeatSummary(t *testing.T) {
	prov := signtest.New(t)
	end := t0.Add(100 * iv)

	full := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv)
	half := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv)
	down := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv)
	for k := 0; k <= 100; k++ {
		at := t0.Add(time.Duration(k) * iv)
		env := hbEnv(t, prov, "L", uint64(k+1), at)
		if err := full.Accept(env, at); err != nil {
			t.Fatal(err)
		}
		if k%2 == 0 {
			if err := half.Accept(env, at); err != nil {
				t.Fatal(err)
			}
		}
		if k < 30 || k >= 60 { // down for 30 intervals
			if err := down.Accept(env, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs := full.Summary(end)
	if fs.Expected != 100 || fs.Count != 101 || math.Abs(fs.Coverage-1) > 1e-9 || len(fs.Gaps) != 0 {
		t.Fatalf("full: %+v", fs)
	}
	if fs.MaxTempC != 69 || math.Abs(fs.MeanGPUUtil-80) > 1e-9 {
		t.Fatalf("full telemetry: max temp %d, mean util %v", fs.MaxTempC, fs.MeanGPUUtil)
	}
	hs := half.Summary(end)
	if math.Abs(hs.Coverage-0.5) > 0.01 || len(hs.Gaps) != 0 {
		t.Fatalf("every other heartbeat: coverage %v, gaps %v", hs.Coverage, hs.Gaps)
	}
	// The silence is measured from the last accepted heartbeat, by the
	// receiver's clock: a refused one does not count.
	if got := down.LastAccepted(); !got.Equal(end) {
		t.Fatalf("down's last accepted heartbeat at %s, want %s", got, end)
	}
	if err := down.Accept(hbEnv(t, prov, "L", 1, end.Add(iv)), end.Add(iv)); err == nil || !down.LastAccepted().Equal(end) {
		t.Fatalf("a replayed heartbeat (%v) moved the last accepted time to %s", err, down.LastAccepted())
	}
	if got := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv).LastAccepted(); !got.IsZero() {
		t.Fatalf("a silent monitor's last accepted heartbeat at %s", got)
	}
	ds := down.Summary(end)
	if len(ds.Gaps) != 1 || !ds.Gaps[0].Start.Equal(t0.Add(29*iv)) || !ds.Gaps[0].End.Equal(t0.Add(60*iv)) {
		t.Fatalf("downtime gaps: %+v", ds.Gaps)
	}
	if math.Abs(ds.Coverage-0.7) > 0.01 {
		t.Fatalf("downtime coverage %v, want ~0.7", ds.Coverage)
	}
	// Only heartbeats up to end count; a silent tail is a gap.
	early := full.Summary(t0.Add(50 * iv))
	if early.Count != 51 {
		t.Fatalf("summary to half time counted %d", early.Count)
	}
	silent := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv).Summary(end)
	if silent.Coverage != 0 || len(silent.Gaps) != 1 || silent.Expected != 100 {
		t.Fatalf("silent lease: %+v", silent)
	}
}

func TestCheckHeartbeatAgainstFingerprint(t *testing.T) {
	s := signtest.New(t)
	fp := nvmlFingerprint(s)
	declared := fp
	declared.Source = attest.SourceDeclared
	declared.GPUs = []terms.GPU{{Model: "RTX 4090", VRAMGB: 24}}
	ok := attest.Heartbeat{LeaseID: "L", Provider: s.ID().String(), Seq: 1, Time: t0,
		Source: attest.SourceNVML, GPUUUIDs: []string{"GPU-bbbb"}, MemUsedMB: 20000}
	if err := attest.CheckHeartbeatAgainstFingerprint(ok, fp); err != nil {
		t.Fatalf("consistent heartbeat: %v", err)
	}
	proc := attest.Heartbeat{LeaseID: "L", Provider: s.ID().String(), Seq: 1, Time: t0, Source: attest.SourceProcess}
	if err := attest.CheckHeartbeatAgainstFingerprint(proc, declared); err != nil {
		t.Fatalf("process telemetry on declared hardware: %v", err)
	}
	bad := map[string]func() (attest.Heartbeat, attest.Fingerprint){
		"nvml on declared": func() (attest.Heartbeat, attest.Fingerprint) { return ok, declared },
		"unknown uuid": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.GPUUUIDs = []string{"GPU-zzzz"}
			return h, fp
		},
		"too many gpus": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.GPUUUIDs = []string{"GPU-aaaa", "GPU-bbbb", "GPU-aaaa"}
			return h, fp
		},
		"same gpu twice": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.GPUUUIDs = []string{"GPU-aaaa", "GPU-aaaa"}
			return h, fp
		},
		"more memory than vram": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.MemUsedMB = 49*1024 + 1
			return h, fp
		},
		"other provider": func() (attest.Heartbeat, attest.Fingerprint) { return ok, nvmlFingerprint(signtest.New(t)) },
		"device reading of an unknown uuid": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.Devices = []attest.DeviceSample{{Index: 1, UUID: "GPU-zzzz", Util: 10}}
			return h, fp
		},
		"device index beyond the fingerprint": func() (attest.Heartbeat, attest.Fingerprint) {
			h := ok
			h.Devices = []attest.DeviceSample{{Index: 2, UUID: "GPU-bbbb", Util: 10}}
			return h, fp
		},
	}
	withDevice := ok
	withDevice.Devices = []attest.DeviceSample{{Index: 1, UUID: "GPU-bbbb", Util: 80, MemUsedMB: 20000, TempC: 70, PowerW: 300}}
	if err := attest.CheckHeartbeatAgainstFingerprint(withDevice, fp); err != nil {
		t.Fatalf("consistent per-device heartbeat: %v", err)
	}
	for name, mk := range bad {
		t.Run(name, func(t *testing.T) {
			hb, f := mk()
			if err := attest.CheckHeartbeatAgainstFingerprint(hb, f); !errors.Is(err, attest.ErrContradiction) {
				t.Errorf("%s: got %v", name, err)
			}
		})
	}
}

func TestHeartbeatSummaryBoundsGaps(t *testing.T) {
	prov := signtest.New(t)
	m := attest.NewHeartbeatMonitor("L", prov.ID(), t0, iv)
	at := t0
	var seq uint64
	for i := 0; i < 200; i++ {
		step := 3 * iv
		if i == 150 {
			step = 50 * iv // the longest outage
		}
		at = at.Add(step)
		seq++
		if err := m.Accept(hbEnv(t, prov, "L", seq, at), at); err != nil {
			t.Fatal(err)
		}
	}
	s := m.Summary(at)
	if len(s.Gaps) != attest.MaxSummaryGaps {
		t.Fatalf("%d gaps kept, want %d", len(s.Gaps), attest.MaxSummaryGaps)
	}
	long := false
	for i, g := range s.Gaps {
		if i > 0 && g.Start.Before(s.Gaps[i-1].End) {
			t.Fatalf("gaps out of order at %d", i)
		}
		if g.End.Sub(g.Start) == 50*iv {
			long = true
		}
	}
	if !long {
		t.Fatal("the longest outage was dropped")
	}
	// A bounded summary fits in a receipt; an unbounded one is refused.
	renter := signtest.New(t)
	r := receipt("L", prov, renter, at)
	r.Heartbeats = s
	if _, err := attest.NewReceipt(prov, r); err != nil {
		t.Fatalf("receipt with a bounded summary: %v", err)
	}
	for len(r.Heartbeats.Gaps) < 2000 {
		r.Heartbeats.Gaps = append(r.Heartbeats.Gaps, s.Gaps...)
	}
	if _, err := attest.NewReceipt(prov, r); !errors.Is(err, sign.ErrOversized) {
		t.Fatalf("receipt with 2000 gaps: %v", err)
	}
}

// TestHeartbeatMonitorRateLimit: a provider flooding a lease with 3,000
// genuine heartbeats in 2.5 s gets a handful accepted and the rest refused
// and counted; an honest cadence, including a burst after a stall, is never
// limited.
func TestHeartbeatMonitorRateLimit(t *testing.T) {
	prov := signtest.New(t)
	m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	const flood = 3000
	start := t0.Add(time.Minute)
	step := 2500 * time.Millisecond / flood
	accepted := 0
	for i := 0; i < flood; i++ {
		at := start.Add(time.Duration(i) * step)
		err := m.Accept(hbEnv(t, prov, "L1", uint64(i+1), at), at)
		switch {
		case err == nil:
			accepted++
		case !errors.Is(err, attest.ErrRateLimited):
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	limit := attest.HeartbeatBurst + int(2.5*attest.HeartbeatRateFactor/iv.Seconds()) + 1
	s := m.Summary(start.Add(3 * time.Second))
	t.Logf("flood of %d in 2.5 s: %d accepted, %d refused", flood, accepted, s.RateLimited)
	if accepted > limit || accepted < attest.HeartbeatBurst {
		t.Fatalf("%d of %d accepted, want %d..%d", accepted, flood, attest.HeartbeatBurst, limit)
	}
	if s.Count != accepted || s.Rejected != flood-accepted || s.RateLimited != flood-accepted {
		t.Fatalf("summary %+v after %d accepted", s, accepted)
	}
	// The bucket refills: a heartbeat one interval later is accepted.
	later := start.Add(3*time.Second + iv)
	if err := m.Accept(hbEnv(t, prov, "L1", flood+1, later), later); err != nil {
		t.Fatalf("heartbeat after the flood: %v", err)
	}

	// Honest: one per interval for 100 intervals, then a stall and five
	// queued heartbeats arriving together.
	h := attest.NewHeartbeatMonitor("L2", prov.ID(), t0, iv)
	seq := uint64(0)
	for i := 1; i <= 100; i++ {
		seq++
		at := t0.Add(time.Duration(i) * iv)
		if err := h.Accept(hbEnv(t, prov, "L2", seq, at), at.Add(300*time.Millisecond)); err != nil {
			t.Fatalf("honest heartbeat %d: %v", i, err)
		}
	}
	arrive := t0.Add(106 * iv)
	for i := 101; i <= 105; i++ {
		seq++
		if err := h.Accept(hbEnv(t, prov, "L2", seq, t0.Add(time.Duration(i)*iv)), arrive); err != nil {
			t.Fatalf("queued heartbeat %d after a stall: %v", i, err)
		}
	}
	if s := h.Summary(arrive); s.Count != 105 || s.Rejected != 0 || s.RateLimited != 0 {
		t.Fatalf("honest summary %+v", s)
	}
}

// TestHeartbeatMonitorFingerprint: once the monitor knows the provider's
// signed fingerprint, it refuses heartbeats naming devices the fingerprint
// does not list, and accepts ones that match.
func TestHeartbeatMonitorFingerprint(t *testing.T) {
	prov, other := signtest.Pair(t)
	fp, err := attest.SignFingerprint(prov, nvmlFingerprint(prov))
	if err != nil {
		t.Fatal(err)
	}
	otherFP, err := attest.SignFingerprint(other, nvmlFingerprint(other))
	if err != nil {
		t.Fatal(err)
	}
	m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	if err := m.SetFingerprint(otherFP); !errors.Is(err, attest.ErrWrongSigner) {
		t.Fatalf("another provider's fingerprint: %v", err)
	}
	if err := m.SetFingerprint(fp); err != nil {
		t.Fatal(err)
	}
	beat := func(seq uint64, uuids ...string) *sign.Envelope {
		env, err := attest.SignHeartbeat(prov, attest.Heartbeat{LeaseID: "L1", Seq: seq, Time: t0.Add(time.Duration(seq) * iv),
			GPUUtil: 80, MemUsedMB: 1000, Source: attest.SourceNVML, GPUUUIDs: uuids})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	for _, c := range []struct {
		name  string
		seq   uint64
		uuids []string
		want  error
	}{
		{"listed device", 1, []string{"GPU-aaaa"}, nil},
		{"unknown device", 2, []string{"GPU-zzzz"}, attest.ErrContradiction},
		{"one of two unknown", 3, []string{"GPU-bbbb", "GPU-zzzz"}, attest.ErrContradiction},
		{"both listed devices", 4, []string{"GPU-aaaa", "GPU-bbbb"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			at := t0.Add(time.Duration(c.seq) * iv)
			if err := m.Accept(beat(c.seq, c.uuids...), at); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if s := m.Summary(t0.Add(5 * iv)); s.Count != 2 || s.Rejected != 2 {
		t.Fatalf("summary %+v", s)
	}
}

// TestHeartbeatWithoutFingerprintNamesNoDevice: until the provider's
// signed fingerprint came with a lease's heartbeats, a heartbeat naming
// devices (a UUID in GPUUUIDs or a device reading) or claiming NVML
// telemetry is refused, not slashed: nothing signed says which devices
// the provider has. Process telemetry naming no device is accepted.
func TestHeartbeatWithoutFingerprintNamesNoDevice(t *testing.T) {
	prov := signtest.New(t)
	m := attest.NewHeartbeatMonitor("L1", prov.ID(), t0, iv)
	beat := func(seq uint64, hb attest.Heartbeat) *sign.Envelope {
		hb.LeaseID, hb.Seq, hb.Time = "L1", seq, t0.Add(time.Duration(seq)*iv)
		env, err := attest.SignHeartbeat(prov, hb)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	for i, c := range []struct {
		name string
		hb   attest.Heartbeat
		ok   bool
	}{
		{"fake uuid", attest.Heartbeat{GPUUtil: 90, Source: attest.SourceNVML, GPUUUIDs: []string{"GPU-fake"}}, false},
		{"fake device reading", attest.Heartbeat{GPUUtil: 90, Source: attest.SourceNVML,
			Devices: []attest.DeviceSample{{Index: 0, UUID: "GPU-fake", Util: 90}}}, false},
		{"nvml naming nothing", attest.Heartbeat{GPUUtil: 90, Source: attest.SourceNVML}, false},
		{"process naming a uuid", attest.Heartbeat{Source: attest.SourceProcess, GPUUUIDs: []string{"GPU-fake"}}, false},
		{"process telemetry", attest.Heartbeat{CPUSeconds: 1, RSSMB: 10, Source: attest.SourceProcess}, true},
	} {
		seq := uint64(i + 1)
		t.Run(c.name, func(t *testing.T) {
			err := m.Accept(beat(seq, c.hb), t0.Add(time.Duration(seq)*iv))
			if c.ok != (err == nil) || errors.Is(err, attest.ErrContradiction) {
				t.Fatalf("Accept = %v, want ok=%v (and never a slashable contradiction)", err, c.ok)
			}
		})
	}
	if s := m.Summary(t0.Add(30 * iv)); s.Count != 1 || s.Rejected != 4 {
		t.Fatalf("summary %+v: want 1 accepted, 4 refused", s)
	}
	// With the fingerprint, its own devices are accepted.
	fp, err := attest.SignFingerprint(prov, nvmlFingerprint(prov))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetFingerprint(fp); err != nil {
		t.Fatal(err)
	}
	if err := m.Accept(beat(25, attest.Heartbeat{GPUUtil: 90, Source: attest.SourceNVML, GPUUUIDs: []string{"GPU-aaaa"}}), t0.Add(25*iv)); err != nil {
		t.Fatalf("a listed device after the fingerprint: %v", err)
	}
}
