package lease

import (
	"bytes"
	"encoding/json"
	"github.com/libp2p/go-libp2p/core/peer"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/attest/sign"
	"github.com/gpumesh/gpumesh/attest/sign/signtest"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/jobmachine"
	"github.com/gpumesh/gpumesh/node/wire"
)

// The lease protocol's fuzz targets sign what they are given, as a hostile
// provider (or renter) signs whatever it likes, and feed it to the same
// decoding and checks the handlers run.

var fuzzNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func oneLine(t *testing.T, err error) {
	t.Helper()
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error is not one line: %q", err)
	}
}

// fuzzLease is a pending two-GPU lease an hour from fuzzNow.
func fuzzLease(renter, prov *sign.Signer) terms.Lease {
	return terms.Lease{ID: "lease-1", JobID: "job-1", Attempt: 1, Renter: renter.ID().String(), Provider: prov.ID().String(),
		Price: 2, Start: fuzzNow.Add(time.Hour), End: fuzzNow.Add(2 * time.Hour), GPUCount: 2, State: terms.RunPending,
		Devices: []int{2, 3}}
}

// FuzzLeaseEvent: a provider's signed report on a lease
// (wire.ProtoLeaseEvent), as HandleLeaseEvent opens and checks it. A move
// the renter takes keeps the lease's length and terms, starts it earlier
// but not in the past, on as many distinct devices as it has GPUs (or
// none named); a report it takes has its times within the lease and its
// outputs consistent. An accepted event reads back the same from the wire.
func FuzzLeaseEvent(f *testing.F) {
	renter, prov := signtest.Seeded(f, "renter"), signtest.Seeded(f, "provider")
	l := fuzzLease(renter, prov)
	code := 0
	for _, ev := range []wire.LeaseEvent{
		{LeaseID: l.ID, JobID: l.JobID, Provider: prov.ID().String(), Run: terms.RunPending, Time: fuzzNow,
			Moved: &wire.LeaseMove{Start: fuzzNow.Add(time.Minute), Devices: []int{0, 1}}},
		{LeaseID: l.ID, JobID: l.JobID, Provider: prov.ID().String(), Run: terms.RunPending, Time: fuzzNow,
			Moved: &wire.LeaseMove{Start: fuzzNow.Add(time.Minute)}},
		{LeaseID: l.ID, JobID: l.JobID, Provider: prov.ID().String(), Run: terms.RunPending, Time: fuzzNow,
			Moved: &wire.LeaseMove{Start: fuzzNow.Add(time.Minute), Devices: []int{1, 1}}},
		{LeaseID: l.ID, JobID: l.JobID, Provider: prov.ID().String(), Run: terms.RunSucceeded, ExitCode: &code,
			Started: l.Start, Ended: l.Start.Add(time.Minute), Time: fuzzNow, OutputCount: 1,
			Outputs: []terms.OutputFile{{Path: "r.txt", Size: 7, SHA256: strings.Repeat("ab", 32)}}},
		{LeaseID: l.ID, JobID: l.JobID, Provider: prov.ID().String(), Run: terms.RunFailed, Fault: terms.FaultJob, Time: fuzzNow},
	} {
		if ev.OutputCount > 0 {
			ev.OutputsHash = terms.ManifestHash(ev.Outputs)
		}
		b, _ := json.Marshal(ev)
		f.Add(b)
	}
	for _, s := range []string{"", "{}", "null", `{"moved":{}}`, `{"run":"pending","moved":{"start":"2026-03-01T11:00:00Z"}}`,
		`{"lease_id":"a\nb","run":"running","moved":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var ev wire.LeaseEvent
		if err := sign.OpenFrom(signtest.RawBytes(t, prov, sign.DomainLeaseEvent, payload), sign.DomainLeaseEvent, prov.ID(), &ev); err != nil {
			oneLine(t, err)
			return
		}
		now := fuzzNow.Add(time.Hour + 30*time.Minute) // within the lease
		if ev.Moved != nil {
			now = fuzzNow
			m, err := leaseMove(l, terms.RunPending, time.Time{}, ev, now)
			if err != nil {
				oneLine(t, err)
				return
			}
			seen := map[int]bool{}
			for _, d := range m.Devices {
				if d < 0 || seen[d] {
					t.Fatalf("moved onto devices %v", m.Devices)
				}
				seen[d] = true
			}
			switch {
			case m.End.Sub(m.Start) != l.End.Sub(l.Start):
				t.Fatalf("move changed the lease's length to %v", m.End.Sub(m.Start))
			case !m.Start.Before(l.Start) || m.Start.Before(now.Add(-terms.MoveSkew)):
				t.Fatalf("moved to %s", m.Start)
			case len(m.Devices) != 0 && len(m.Devices) != l.GPUCount:
				t.Fatalf("moved %d gpus onto %d devices", l.GPUCount, len(m.Devices))
			case m.ID != l.ID || m.Price != l.Price || m.Renter != l.Renter || m.GPUCount != l.GPUCount:
				t.Fatalf("move changed the lease's terms: %+v", m)
			}
		} else {
			if err := EventTimesValid(ev, l, now); err != nil {
				oneLine(t, err)
				return
			}
			if err := ev.CheckOutputs(); err != nil {
				oneLine(t, err)
				return
			}
			if !ev.Started.IsZero() && !ev.Ended.IsZero() && ev.Ended.Before(ev.Started) {
				t.Fatalf("took a report ending at %s before its start %s", ev.Ended, ev.Started)
			}
		}
		env, err := sign.Seal(prov, sign.DomainLeaseEvent, ev)
		if err != nil {
			t.Fatalf("an accepted event does not seal again: %v", err)
		}
		again, _ := env.Marshal()
		var ev2 wire.LeaseEvent
		if err := sign.OpenFrom(again, sign.DomainLeaseEvent, prov.ID(), &ev2); err != nil {
			t.Fatalf("a re-sealed event is refused: %v", err)
		}
		a, _ := json.Marshal(ev)
		b, _ := json.Marshal(ev2)
		if !bytes.Equal(a, b) {
			t.Fatalf("event changed in a round trip:\n%s\n%s", a, b)
		}
	})
}

// FuzzCheckpointNotice: a provider's signed checkpoint of a running lease
// (wire.ProtoCheckpoint), as HandleCheckpoint opens and checks it against
// the job's record. One the renter keeps is one a requeued attempt can
// restore (terms.Job.Validate takes it in Restore), newer than the one
// held, and reads back the same from the wire.
func FuzzCheckpointNotice(f *testing.F) {
	renter, prov := signtest.Seeded(f, "renter"), signtest.Seeded(f, "provider")
	l := fuzzLease(renter, prov)
	l.State = terms.RunRunning
	held := terms.Checkpoint{JobID: l.JobID, LeaseID: l.ID, Attempt: 1, Seq: 1, Artifact: strings.Repeat("cd", 32), Bytes: 10,
		Work: time.Minute, Reason: terms.CheckpointPeriodic, Provider: prov.ID().String(), TakenAt: fuzzNow}
	job := terms.Job{ID: l.JobID, Owner: renter.ID().String(), Tier: terms.Silver, MaxPrice: 2, GPUCount: 2, Duration: time.Hour,
		Run: terms.RunSpec{Command: []string{"train"}}}
	if err := job.Validate(); err != nil {
		f.Fatal(err)
	}
	for _, c := range []terms.Checkpoint{held, {JobID: l.JobID, LeaseID: l.ID, Attempt: 1, Seq: 2, Artifact: strings.Repeat("ef", 32),
		Bytes: 1 << 20, Work: 2 * time.Minute, Reason: terms.CheckpointStopped, Provider: prov.ID().String(), TakenAt: fuzzNow}} {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	for _, s := range []string{"", "{}", "null", `{"seq":-1}`, `{"bytes":9223372036854775807}`, `{"lease_id":"a\nb"}`,
		`{"lease_id":"lease-1","job_id":"a\nb","provider":"` + prov.ID().String() + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var c terms.Checkpoint
		if err := sign.OpenFrom(signtest.RawBytes(t, prov, sign.DomainCheckpoint, payload), sign.DomainCheckpoint, prov.ID(), &c); err != nil {
			oneLine(t, err)
			return
		}
		lease := l
		v := &jobState{Record: jobmachine.Record{Job: job, Lease: &lease, Run: terms.RunRunning}, jobFacts: jobFacts{Checkpoints: []terms.Checkpoint{held}}}
		dup, err := checkpointFits(v, c, peer.ID(prov.ID()), fuzzNow)
		if err != nil {
			oneLine(t, err)
			return
		}
		if dup {
			if c.Seq != held.Seq || c.Artifact != held.Artifact {
				t.Fatalf("took %+v for the one held", c)
			}
			return
		}
		if c.Seq <= held.Seq {
			t.Fatalf("kept checkpoint %d after %d", c.Seq, held.Seq)
		}
		next := job
		next.Attempt, next.Restore = 2, []terms.Checkpoint{c}
		if err := next.Validate(); err != nil {
			t.Fatalf("kept a checkpoint the next attempt cannot restore: %v", err)
		}
		env, err := sign.Seal(prov, sign.DomainCheckpoint, c)
		if err != nil {
			t.Fatalf("a kept checkpoint does not seal again: %v", err)
		}
		again, _ := env.Marshal()
		var c2 terms.Checkpoint
		if err := sign.OpenFrom(again, sign.DomainCheckpoint, prov.ID(), &c2); err != nil {
			t.Fatalf("a re-sealed checkpoint is refused: %v", err)
		}
		a, _ := json.Marshal(c)
		b, _ := json.Marshal(c2)
		if !bytes.Equal(a, b) {
			t.Fatalf("checkpoint changed in a round trip:\n%s\n%s", a, b)
		}
	})
}

// FuzzOpenCancel: a renter's signed cancel (or release) of a lease
// (wire.ProtoCancel). What openCancel accepts names a lease id that is
// safe as a path and seals again to the same request; relayed by another
// peer, it is refused.
func FuzzOpenCancel(f *testing.F) {
	renter, prov := signtest.Seeded(f, "renter"), signtest.Seeded(f, "provider")
	for _, s := range []string{`{"lease_id":"lease-1","job_id":"job-1"}`, `{"lease_id":"../../x"}`, "", "{}", "null"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		data := signtest.RawBytes(t, renter, sign.DomainLeaseCancel, payload)
		req, err := openCancel(data, peer.ID(renter.ID()))
		if err != nil {
			oneLine(t, err)
			return
		}
		if err := terms.ValidID(req.LeaseID); err != nil {
			t.Fatalf("accepted lease id %q: %v", req.LeaseID, err)
		}
		if _, err := openCancel(data, peer.ID(prov.ID())); err == nil {
			t.Fatal("a cancel relayed by another peer was accepted")
		}
		env, err := sign.Seal(renter, sign.DomainLeaseCancel, req)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := env.Marshal()
		req2, err := openCancel(again, peer.ID(renter.ID()))
		if err != nil || req2 != req {
			t.Fatalf("re-sealed cancel: %+v, %v", req2, err)
		}
	})
}
