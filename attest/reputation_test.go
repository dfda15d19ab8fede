package attest_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest"
	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
)

type vclock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *vclock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *vclock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func newBook(now time.Time) (*attest.Book, *vclock) {
	c := &vclock{t: now}
	return attest.NewBook(attest.BookOptions{Now: c.Now}), c
}

func mustAdd(t *testing.T, b *attest.Book, sr *attest.SignedReceipt) {
	t.Helper()
	if err := b.AddReceipt(sr); err != nil {
		t.Fatal(err)
	}
}

// establish gives each renter full standing in b: the book first saw it
// DefaultRenterMatureAge ago (by c) and it owes DefaultRenterMatureSpend in
// a receipt with another provider, as a renter with real history would.
func establish(t *testing.T, b *attest.Book, c *vclock, renters ...*sign.Signer) {
	t.Helper()
	now := c.Now()
	defer c.Set(now)
	then := now.Add(-attest.DefaultRenterMatureAge)
	c.Set(then)
	other := signtest.New(t)
	for _, renter := range renters {
		r := receipt("season-"+renter.ID().String(), other, renter, then)
		r.Price = attest.DefaultRenterMatureSpend
		r.Amount = attest.DefaultRenterMatureSpend
		mustAdd(t, b, signed(t, other, renter, r))
	}
}

// history gives prov n receipts from n distinct established renters,
// ending one hour apart before end, with the given outcome and coverage.
func history(t *testing.T, b *attest.Book, c *vclock, prov *sign.Signer, tag string, n int, end time.Time, outcome terms.RunState, coverage float64) {
	t.Helper()
	for i := 0; i < n; i++ {
		renter := signtest.New(t)
		establish(t, b, c, renter)
		r := receipt(fmt.Sprintf("%s-%d", tag, i), prov, renter, end.Add(-time.Duration(i)*time.Hour))
		r.Outcome = outcome
		r.Heartbeats.Coverage = coverage
		mustAdd(t, b, signed(t, prov, renter, r))
	}
}

func TestScoreUnknownAndNewIdentity(t *testing.T) {
	b, c := newBook(t0)
	if got := b.Score("nobody"); got != attest.Prior {
		t.Fatalf("unknown identity scores %v, want prior %v", got, attest.Prior)
	}
	prov, renter := signtest.Pair(t)
	mustAdd(t, b, signed(t, prov, renter, receipt("L1", prov, renter, t0)))
	// The renter is new to the book too: its receipt counts, but cannot
	// lift the provider above the prior.
	if one := b.Stats(prov.ID().String()); one.Receipts != 1 || one.Weight <= 0 || math.Abs(one.Score-attest.Prior) > 1e-12 {
		t.Fatalf("one perfect receipt from a new renter: %+v; want counted, at the prior", one)
	}
	history(t, b, c, prov, "more", 30, t0, terms.RunSucceeded, 1)
	if many := b.Score(prov.ID().String()); many < 0.9 {
		t.Fatalf("31 perfect receipts only reach %v", many)
	}
	st := b.Stats(prov.ID().String())
	if st.Receipts != 31 || st.Completed != 31 || st.Renters != 31 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	if f := b.ReputationFunc(); f(prov.ID().String()) != b.Score(prov.ID().String()) {
		t.Fatal("ReputationFunc disagrees with Score")
	}
}

func TestForgeriesRejectedCountedAndHarmless(t *testing.T) {
	b, c := newBook(t0)
	prov, renter := signtest.Pair(t)
	pid := prov.ID().String()
	history(t, b, c, prov, "base", 5, t0, terms.RunSucceeded, 1)
	before := b.Stats(pid)

	// A bad receipt that would, if counted, move the score a lot: a failure.
	bad := func(lease string) attest.Receipt {
		r := receipt(lease, prov, renter, t0)
		r.Outcome = terms.RunFailed
		return r
	}
	oneSig, err := attest.NewReceipt(prov, bad("F1"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := signed(t, prov, renter, receipt("F2", prov, renter, t0))
	tampered.Receipt.Outcome = terms.RunFailed
	tamperedAmount := signed(t, prov, renter, receipt("F3", prov, renter, t0))
	tamperedAmount.Receipt.Amount = 1e6
	swapped := signed(t, prov, renter, bad("F4"))
	swapped.ProviderSig, swapped.RenterSig = swapped.RenterSig, swapped.ProviderSig
	self := forge(t, prov, prov, receipt("F5", prov, prov, t0))

	cases := []struct {
		name    string
		sr      *attest.SignedReceipt
		counter string
	}{
		{"one signature", oneSig, attest.CountIncomplete},
		{"tampered outcome", tampered, attest.CountTampered},
		{"tampered amount", tamperedAmount, attest.CountTampered},
		{"swapped signatures", swapped, attest.CountBadSignature},
		{"self dealing", self, attest.CountSelfDealing},
	}
	for _, c := range cases {
		if err := b.AddReceipt(c.sr); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
		if got := b.Counters()[c.counter]; got < 1 {
			t.Errorf("%s: counter %q is %d", c.name, c.counter, got)
		}
	}
	// 5 receipts for prov, and the 5 that gave their renters standing.
	if cnt := b.Counters(); cnt[attest.CountTampered] != 2 || cnt[attest.CountAccepted] != 10 {
		t.Fatalf("counters %v", cnt)
	}
	if after := b.Stats(pid); after != before {
		t.Fatalf("forgeries changed the reputation:\nbefore %+v\nafter  %+v", before, after)
	}
	if s := b.Score(prov.ID().String()); s != before.Score {
		t.Fatal("score changed")
	}

	// Replaying a counted receipt is idempotent and counted as a duplicate.
	dup := signed(t, prov, renter, bad("D1"))
	mustAdd(t, b, dup)
	afterOne := b.Stats(pid)
	if afterOne.Score >= before.Score {
		t.Fatal("a counted failure did not lower the score")
	}
	for i := 0; i < 3; i++ {
		if err := b.AddReceipt(dup); err != nil {
			t.Fatalf("replayed receipt: %v", err)
		}
	}
	if got := b.Counters()[attest.CountDuplicate]; got != 3 {
		t.Fatalf("duplicate counter %d, want 3", got)
	}
	// A different receipt for the same lease conflicts.
	conflicting := signed(t, prov, renter, receipt("D1", prov, renter, t0))
	if err := b.AddReceipt(conflicting); !errors.Is(err, attest.ErrConflict) {
		t.Fatalf("conflicting receipt: %v", err)
	}
	if after := b.Stats(pid); after != afterOne {
		t.Fatalf("replays changed the reputation: %+v vs %+v", after, afterOne)
	}
}

func TestDroppedHeartbeatsScoreLower(t *testing.T) {
	b, c := newBook(t0)
	honest, flaky := signtest.Pair(t)
	history(t, b, c, honest, "h", 10, t0, terms.RunSucceeded, 1)
	history(t, b, c, flaky, "f", 10, t0, terms.RunSucceeded, 0.5)
	h, f := b.Stats(honest.ID().String()), b.Stats(flaky.ID().String())
	if !(f.Score < h.Score) {
		t.Fatalf("coverage 0.5 scores %v, full coverage %v", f.Score, h.Score)
	}
	if f.Completion != h.Completion || f.Honesty != h.Honesty || !(f.Coverage < h.Coverage) {
		t.Fatalf("only uptime should differ: %+v vs %+v", f, h)
	}
}

func TestRecencyWeighting(t *testing.T) {
	now := t0.AddDate(0, 6, 0)
	for _, tc := range []struct {
		halfLife time.Duration
		wantGap  bool
	}{{30 * 24 * time.Hour, true}, {1 << 62, false}} {
		t.Run(fmt.Sprintf("half-life %v", tc.halfLife), func(t *testing.T) {
			c := &vclock{t: now}
			b := attest.NewBook(attest.BookOptions{Now: c.Now, HalfLife: tc.halfLife})
			reformed, decaying := signtest.Pair(t)
			old := now.AddDate(0, -4, 0)
			history(t, b, c, reformed, "ro", 8, old, terms.RunFailed, 1)
			history(t, b, c, reformed, "rn", 8, now, terms.RunSucceeded, 1)
			history(t, b, c, decaying, "do", 8, old, terms.RunSucceeded, 1)
			history(t, b, c, decaying, "dn", 8, now, terms.RunFailed, 1)
			r, d := b.Score(reformed.ID().String()), b.Score(decaying.ID().String())
			if tc.wantGap && !(r > d+0.1) {
				t.Errorf("half-life %v: old failures (%v) should weigh less than new ones (%v)", tc.halfLife, r, d)
			}
			if !tc.wantGap && math.Abs(r-d) > 0.005 {
				t.Errorf("without decay both histories should score alike: %v vs %v", r, d)
			}
		})
	}
	// Time passing alone pulls a record back toward the prior.
	b, c := newBook(t0)
	p := signtest.New(t)
	history(t, b, c, p, "x", 10, t0, terms.RunSucceeded, 1)
	fresh := b.Score(p.ID().String())
	c.Set(t0.AddDate(2, 0, 0))
	if aged := b.Score(p.ID().String()); !(aged < fresh && aged > attest.Prior) {
		t.Fatalf("score after two years %v, fresh %v", aged, fresh)
	}
}

func TestPreemptionIsNotTheProvidersFault(t *testing.T) {
	b, c := newBook(t0)
	pre, fail := signtest.Pair(t)
	history(t, b, c, pre, "s", 5, t0, terms.RunSucceeded, 1)
	history(t, b, c, pre, "p", 5, t0.Add(-24*time.Hour), terms.RunPreempted, 1)
	history(t, b, c, fail, "s", 5, t0, terms.RunSucceeded, 1)
	history(t, b, c, fail, "p", 5, t0.Add(-24*time.Hour), terms.RunFailed, 1)
	p, f := b.Stats(pre.ID().String()), b.Stats(fail.ID().String())
	if p.Preempted != 5 || p.Failed != 0 || f.Failed != 5 {
		t.Fatalf("outcome counts: %+v / %+v", p, f)
	}
	if !(p.Score > f.Score+0.05) {
		t.Fatalf("preempted %v vs failed %v", p.Score, f.Score)
	}
	// Preemptions count neither for nor against completion.
	only := signtest.New(t)
	history(t, b, c, only, "s", 5, t0, terms.RunSucceeded, 1)
	if o := b.Stats(only.ID().String()); math.Abs(o.Completion-p.Completion) > 1e-9 {
		t.Fatalf("completion with preemptions %v, without %v", p.Completion, o.Completion)
	}
}

func TestTightClusterCap(t *testing.T) {
	b, c := newBook(t0)
	pump, broad := signtest.Pair(t)
	friend := signtest.New(t)
	establish(t, b, c, friend)
	// One renter pumps 200 tiny successful receipts within one day.
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 200; i++ {
		end := day.Add(time.Duration(i+1) * time.Minute)
		r := receipt(fmt.Sprintf("pump-%d", i), pump, friend, end)
		r.Start = end.Add(-time.Second)
		r.GPUSeconds, r.Amount = 1, 2.0/3600
		r.Heartbeats = attest.HeartbeatSummary{}
		mustAdd(t, b, signed(t, pump, friend, r))
	}
	history(t, b, c, broad, "b", 10, t0, terms.RunSucceeded, 1)
	p, q := b.Stats(pump.ID().String()), b.Stats(broad.ID().String())
	if p.Receipts != 200 || p.Renters != 1 {
		t.Fatalf("pump stats %+v", p)
	}
	if math.Abs(p.Weight-attest.DefaultRenterCap) > 0.05 {
		t.Fatalf("200 receipts from one renter in one day weigh %v, want ~%d", p.Weight, attest.DefaultRenterCap)
	}
	if !(q.Score > p.Score) {
		t.Fatalf("10 distinct renters (%v) should beat 200 receipts from one (%v)", q.Score, p.Score)
	}
}

func TestOverclaimIsFraud(t *testing.T) {
	b, c := newBook(t0)
	prov, renter := signtest.Pair(t)
	pid := prov.ID().String()
	history(t, b, c, prov, "ok", 5, t0, terms.RunSucceeded, 1)
	before := b.Stats(pid)
	r := receipt("over", prov, renter, t0)
	r.GPUSeconds, r.Amount = 36000, 20 // ten hours on one GPU in one hour
	sr := forge(t, prov, renter, r)
	if err := sr.Verify(); err != nil {
		t.Fatalf("doubly signed overclaim should verify (it is evidence): %v", err)
	}
	mustAdd(t, b, sr)
	after := b.Stats(pid)
	if after.Overclaims != 1 || after.Slashes != 1 || !(after.Honesty < before.Honesty) || !(after.Score < before.Score*0.6) {
		t.Fatalf("overclaim: before %+v after %+v", before, after)
	}
	if b.Counters()[attest.CountOverclaim] != 1 {
		t.Fatalf("counters %v", b.Counters())
	}
	// Slashing the same lease for overclaim again is deduplicated.
	if err := b.Slash(pid, attest.Evidence{Kind: attest.SlashOverclaim, LeaseID: "over"}); err != nil {
		t.Fatal(err)
	}
	if b.Stats(pid) != after {
		t.Fatal("duplicate overclaim slash changed the score")
	}
}

func TestSlash(t *testing.T) {
	b, c := newBook(t0)
	prov := signtest.New(t)
	pid := prov.ID().String()
	history(t, b, c, prov, "s", 10, t0, terms.RunSucceeded, 1)
	s0 := b.Score(pid)
	ev := attest.Evidence{Kind: attest.SlashAbandonedLease, LeaseID: "L7", Detail: "no heartbeats after 10m"}
	if err := b.Slash(pid, ev); err != nil {
		t.Fatal(err)
	}
	s1 := b.Score(pid)
	if math.Abs(s1-s0*0.8) > 1e-9 {
		t.Fatalf("abandoned lease: score %v -> %v, want x0.8", s0, s1)
	}
	for i := 0; i < 3; i++ {
		if err := b.Slash(pid, ev); err != nil {
			t.Fatal(err)
		}
	}
	if b.Score(pid) != s1 || b.Counters()[attest.CountSlashDuplicate] != 3 || b.Stats(pid).Slashes != 1 {
		t.Fatalf("duplicate slashes not deduplicated: score %v, counters %v", b.Score(pid), b.Counters())
	}
	// Same lease, other kind: a separate slash.
	if err := b.Slash(pid, attest.Evidence{Kind: attest.SlashHeartbeatContradictsFingerprint, LeaseID: "L7"}); err != nil {
		t.Fatal(err)
	}
	s2 := b.Score(pid)
	if math.Abs(s2-s1*0.5) > 1e-9 {
		t.Fatalf("contradiction: %v -> %v, want x0.5", s1, s2)
	}
	// Slashes fade with the half-life.
	c.Set(t0.Add(10 * attest.DefaultHalfLife))
	if b.Score(pid) < 0.5 {
		t.Fatalf("ten half-lives later the score is still %v", b.Score(pid))
	}
	for _, bad := range []attest.Evidence{
		{Kind: "rude", LeaseID: "L1"},
		{Kind: attest.SlashAbandonedLease},
	} {
		if err := b.Slash(pid, bad); !errors.Is(err, attest.ErrBadEvidence) {
			t.Errorf("evidence %+v: %v", bad, err)
		}
	}
	if err := b.Slash("", ev); !errors.Is(err, attest.ErrBadEvidence) {
		t.Errorf("empty provider: %v", err)
	}
	if b.Counters()[attest.CountBadEvidence] != 3 {
		t.Fatalf("counters %v", b.Counters())
	}
}

func TestSlashWithProof(t *testing.T) {
	b, _ := newBook(t0)
	prov := signtest.New(t)
	pid := prov.ID().String()
	declared := nvmlFingerprint(prov)
	declared.Source = attest.SourceDeclared
	for i := range declared.GPUs {
		declared.GPUs[i].Detected = false
	}
	fpDeclared, err := attest.SignFingerprint(prov, declared)
	if err != nil {
		t.Fatal(err)
	}
	fpNVML, err := attest.SignFingerprint(prov, nvmlFingerprint(prov))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := attest.SignHeartbeat(prov, attest.Heartbeat{LeaseID: "L1", Seq: 1, Time: t0, Source: attest.SourceNVML, GPUUtil: 90})
	if err != nil {
		t.Fatal(err)
	}
	kind := attest.SlashHeartbeatContradictsFingerprint
	// Consistent pair: not evidence.
	if err := b.Slash(pid, attest.Evidence{Kind: kind, LeaseID: "L1", Heartbeat: hb, Fingerprint: fpNVML}); !errors.Is(err, attest.ErrBadEvidence) {
		t.Fatalf("consistent proof accepted: %v", err)
	}
	// Someone else's provider.
	if err := b.Slash(signtest.New(t).ID().String(), attest.Evidence{Kind: kind, LeaseID: "L1", Heartbeat: hb, Fingerprint: fpDeclared}); !errors.Is(err, attest.ErrBadEvidence) {
		t.Fatalf("proof against the wrong provider accepted: %v", err)
	}
	if b.Score(pid) != attest.Prior {
		t.Fatal("rejected evidence changed the score")
	}
	if err := b.Slash(pid, attest.Evidence{Kind: kind, LeaseID: "L1", Heartbeat: hb, Fingerprint: fpDeclared}); err != nil {
		t.Fatalf("valid proof: %v", err)
	}
	if got := b.Score(pid); math.Abs(got-attest.Prior*0.5) > 1e-9 {
		t.Fatalf("score after proven contradiction %v", got)
	}
}

func TestBookConcurrent(t *testing.T) {
	b, _ := newBook(t0)
	prov := signtest.New(t)
	renters := make([]*sign.Signer, 4)
	for i := range renters {
		renters[i] = signtest.New(t)
	}
	var wg sync.WaitGroup
	for g, renter := range renters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				sr, err := attest.NewReceipt(prov, receipt(fmt.Sprintf("c%d-%d", g, i), prov, renter, t0.Add(-time.Duration(i)*24*time.Hour)))
				if err == nil {
					err = sr.Countersign(renter)
				}
				if err == nil {
					err = b.AddReceipt(sr)
				}
				if err != nil {
					t.Error(err)
					return
				}
				_ = b.Score(prov.ID().String())
				_ = b.Counters()
			}
		}()
	}
	wg.Wait()
	if st := b.Stats(prov.ID().String()); st.Receipts != 80 || st.Renters != 4 {
		t.Fatalf("stats after concurrent adds %+v", st)
	}
}

func TestBookForgetsOldestBeyondMaxRecords(t *testing.T) {
	c := &vclock{t: t0}
	b := attest.NewBook(attest.BookOptions{Now: c.Now, MaxRecords: 5})
	prov := signtest.New(t)
	history(t, b, c, prov, "old", 3, t0.AddDate(0, -1, 0), terms.RunFailed, 1)
	history(t, b, c, prov, "new", 5, t0, terms.RunSucceeded, 1)
	st := b.Stats(prov.ID().String())
	if st.Receipts != 5 || st.Failed != 0 || st.Completed != 5 || st.Renters != 5 {
		t.Fatalf("after overflow: %+v", st)
	}
}

// TestSybilRentersCannotFarmReputation: forty throwaway renter identities,
// each countersigning one perfect receipt for a lease that never happened
// (and padding their accounts with big receipts from a second fake
// provider), leave the never-leased fake provider at the prior at most,
// below an honest provider whose imperfect history from established
// renters puts it just above the prior. That holds even when newcomers'
// receipts weigh as much as anyone's: it is the newcomer part's ceiling at
// Prior, not its small weight, that stops the farm. Newcomers' failures
// still count against a provider.
func TestSybilRentersCannotFarmReputation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts attest.BookOptions
	}{
		{name: "defaults"},
		{name: "newcomers weigh fully", opts: attest.BookOptions{NewcomerWeight: 1, NewcomerCap: 1e9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &vclock{t: t0}
			tc.opts.Now = c.Now
			b := attest.NewBook(tc.opts)
			fake, accomplice, honest, failing := signtest.New(t), signtest.New(t), signtest.New(t), signtest.New(t)
			for i := 0; i < 40; i++ {
				sybil := signtest.New(t)
				mustAdd(t, b, signed(t, fake, sybil, receipt(fmt.Sprintf("sybil-%d", i), fake, sybil, t0.Add(-time.Duration(i)*time.Minute))))
				pad := receipt(fmt.Sprintf("pad-%d", i), accomplice, sybil, t0)
				pad.Price, pad.Amount = 1000, 1000
				mustAdd(t, b, signed(t, accomplice, sybil, pad))
				// A newcomer's lease that failed on its provider.
				r := receipt(fmt.Sprintf("failed-%d", i), failing, sybil, t0)
				r.Outcome, r.Heartbeats.Coverage = terms.RunFailed, 0.2
				mustAdd(t, b, signed(t, failing, sybil, r))
			}
			// The honest provider: 6 leases from established renters, four
			// failed, half the heartbeats: just above the prior.
			history(t, b, c, honest, "ok", 2, t0, terms.RunSucceeded, 0.5)
			history(t, b, c, honest, "ko", 4, t0.Add(-24*time.Hour), terms.RunFailed, 0.5)
			f, h, l := b.Stats(fake.ID().String()), b.Stats(honest.ID().String()), b.Stats(failing.ID().String())
			t.Logf("fake (40 sybil receipts) %.4f weight %.2f; honest (6 established) %.4f weight %.2f; failing (40 newcomer failures) %.4f",
				f.Score, f.Weight, h.Score, h.Weight, l.Score)
			if f.Receipts != 40 || f.Renters != 40 || h.Receipts != 6 || l.Failed != 40 {
				t.Fatalf("receipts not all counted: fake %+v honest %+v failing %+v", f, h, l)
			}
			if !(h.Score > attest.Prior && h.Score < attest.Prior+0.03) {
				t.Fatalf("the honest provider scores %.4f, want just above the prior %v", h.Score, attest.Prior)
			}
			if f.Score > attest.Prior+1e-12 || !(f.Score < h.Score) {
				t.Fatalf("sybil farm scores %.4f (prior %v), honest provider %.4f", f.Score, attest.Prior, h.Score)
			}
			for _, comp := range []float64{f.Completion, f.Coverage, f.Honesty} {
				if comp > attest.Prior+1e-12 {
					t.Fatalf("sybil receipts lifted a component above the prior: %+v", f)
				}
			}
			if !(l.Completion < attest.Prior && l.Coverage < attest.Prior && l.Score < attest.Prior) {
				t.Fatalf("newcomers' failures did not lower the provider: %+v", l)
			}
		})
	}
}

// TestBookBoundsIdentities: a flood of cheap identities is forgotten
// beyond MaxIdentities, while a provider with established history and a
// slashed one are kept.
func TestBookBoundsIdentities(t *testing.T) {
	const max = 16
	c := &vclock{t: t0}
	b := attest.NewBook(attest.BookOptions{Now: c.Now, MaxIdentities: max})
	good, slashed := signtest.Pair(t)
	history(t, b, c, good, "g", 3, t0, terms.RunSucceeded, 1)
	if err := b.Slash(slashed.ID().String(), attest.Evidence{Kind: attest.SlashAbandonedLease, LeaseID: "gone"}); err != nil {
		t.Fatal(err)
	}
	goodBefore, slashedBefore := b.Stats(good.ID().String()), b.Stats(slashed.ID().String())
	providers, renters := 1+3+1, 3 // good, the 3 that gave renters standing, slashed
	var first string
	for i := 0; i < 200; i++ {
		p, r := signtest.Pair(t)
		c.Set(t0.Add(time.Duration(i) * time.Second))
		mustAdd(t, b, signed(t, p, r, receipt(fmt.Sprintf("flood-%d", i), p, r, t0)))
		providers++
		renters++
		if i == 0 {
			first = p.ID().String()
		}
		cnt := b.Counters()
		if kept := providers - cnt[attest.CountEvictedProvider]; kept > max {
			t.Fatalf("after %d flood receipts the book tracks %d providers, limit %d", i+1, kept, max)
		}
		if kept := renters - cnt[attest.CountEvictedRenter]; kept > max {
			t.Fatalf("after %d flood receipts the book tracks %d renters, limit %d", i+1, kept, max)
		}
	}
	c.Set(t0)
	cnt := b.Counters()
	if cnt[attest.CountEvictedProvider] < providers-max || cnt[attest.CountEvictedRenter] < renters-max {
		t.Fatalf("counters %v", cnt)
	}
	if st := b.Stats(first); st.Receipts != 0 || st.Score != attest.Prior {
		t.Fatalf("the first flood provider is still tracked: %+v", st)
	}
	if st := b.Stats(good.ID().String()); st != goodBefore {
		t.Fatalf("established provider changed: %+v, was %+v", st, goodBefore)
	}
	if st := b.Stats(slashed.ID().String()); st != slashedBefore || st.Slashes != 1 {
		t.Fatalf("slashed provider changed: %+v, was %+v", st, slashedBefore)
	}
}

// TestOwnReceiptsAreFirstHand: the book's owner trusts the leases it rented
// itself fully, however new it is, and they lift the provider; the same
// receipt in a stranger's book is a newcomer's, which cannot.
func TestOwnReceiptsAreFirstHand(t *testing.T) {
	prov, me := signtest.Pair(t)
	sr := signed(t, prov, me, receipt("mine", prov, me, t0))
	own := attest.NewBook(attest.BookOptions{Now: func() time.Time { return t0 }, Self: me.ID().String()})
	other := attest.NewBook(attest.BookOptions{Now: func() time.Time { return t0 }})
	mustAdd(t, own, sr)
	mustAdd(t, other, sr)
	o, s := own.Stats(prov.ID().String()), other.Stats(prov.ID().String())
	if math.Abs(o.Weight-1) > 1e-9 || math.Abs(s.Weight-attest.DefaultNewcomerWeight) > 1e-9 {
		t.Fatalf("weights: own book %v (want 1), stranger's %v (want %v)", o.Weight, s.Weight, attest.DefaultNewcomerWeight)
	}
	if !(o.Score > attest.Prior && math.Abs(s.Score-attest.Prior) < 1e-12) {
		t.Fatalf("scores: own book %v, stranger's %v", o.Score, s.Score)
	}
}

// TestRepeatedHandBacksCountAgainstStanding: a provider that stops the
// same job early again and again (wins its attempts, hands them back)
// scores as if it had failed them, past the first; one that was preempted
// once on each of as many different jobs keeps its standing.
func TestRepeatedHandBacksCountAgainstStanding(t *testing.T) {
	b, c := newBook(t0)
	churner, honest := signtest.Pair(t)
	history(t, b, c, churner, "s", 5, t0, terms.RunSucceeded, 1)
	history(t, b, c, honest, "s", 5, t0, terms.RunSucceeded, 1)
	renter := signtest.New(t)
	establish(t, b, c, renter)
	for i := range 3 {
		end := t0.Add(-time.Duration(i+1) * time.Hour)
		r := receipt(fmt.Sprintf("churn-%d", i), churner, renter, end)
		r.JobID, r.Outcome = "job-churned", terms.RunPreempted
		mustAdd(t, b, signed(t, churner, renter, r))
		r = receipt(fmt.Sprintf("once-%d", i), honest, renter, end)
		r.Outcome = terms.RunPreempted // one preemption of each of three jobs
		mustAdd(t, b, signed(t, honest, renter, r))
	}
	ch, ho := b.Stats(churner.ID().String()), b.Stats(honest.ID().String())
	if ch.Preempted != 1 || ch.Churned != 2 || ch.Failed != 2 || ho.Preempted != 3 || ho.Churned != 0 || ho.Failed != 0 {
		t.Fatalf("churner %+v, honest %+v", ch, ho)
	}
	if !(ch.Score < ho.Score-0.02) {
		t.Fatalf("churner scores %v, honest provider %v", ch.Score, ho.Score)
	}
}
