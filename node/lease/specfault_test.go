package lease

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/lease/lifecycle"
	"github.com/gpumesh/gpumesh/runtime"
)

// TestPostRefusesEnvTheRuntimeSets: a job whose environment sets a name
// every runtime sets itself (HOME) is refused when it is posted, with a
// one-line error naming the variable; it is never offered, so no provider
// runs it and none is blamed for it.
func TestPostRefusesEnvTheRuntimeSets(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, p := h.renter(), h.provider(provSpec{model: "A100", price: 1})
	for _, name := range []string{"HOME", "GPUMESH_OUTPUTS", "CUDA_VISIBLE_DEVICES"} {
		j := job(terms.Silver, 2, time.Minute, "run", "20", "0")
		j.ID = "env-" + strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		j.Run.Env = map[string]string{"FOO": "bar", name: "/tmp"}
		_, err := r.tracker.Post(j)
		var re *RequestError
		if !errors.As(err, &re) || re.Missing {
			t.Fatalf("post with env %s: %v, want a bad request", name, err)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "env "+name+" is set by the runtime") {
			t.Fatalf("post with env %s: error %q, want one line naming the variable", name, msg)
		}
		if _, err := r.tracker.View(j.ID); err == nil {
			t.Fatalf("job %s with env %s was kept", j.ID, name)
		}
	}
	if ids := p.exec.startedJobs(); len(ids) > 0 {
		t.Fatalf("provider started %v", ids)
	}
	// The same variable under a name the runtime leaves to the job posts.
	j := job(terms.Silver, 2, time.Minute, "run", "20", "0")
	j.Run.Env = map[string]string{"MY_HOME": "/tmp"}
	r.post(j)
}

// TestCommandMissingOnHostIsTheJobsFault: a job whose command the host does
// not have (by name on PATH, or by absolute path) fails at start through its
// own fault: it is not requeued, its provider is not excluded, and the
// provider's reputation does not move.
func TestCommandMissingOnHostIsTheJobsFault(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"gpumesh-no-such-command", "x"}, {"/nonexistent/gpumesh/bin", "x"}} {
		t.Run(cmd[0], func(t *testing.T) {
			h := newHarness(t)
			r := h.renter()
			provs := map[string]*node{}
			for _, price := range []float64{1, 1.5} {
				p := h.provider(provSpec{model: "A100", price: price, exec: realProcessExec(t)})
				provs[p.id()] = p
			}
			v := r.post(job(terms.Silver, 2, time.Minute, cmd...))
			p := provs[v.Winner]
			before := r.book.Stats(p.id()).Score
			v = r.waitJob(v.Job.ID, "settled", settled)
			if v.Run != terms.RunFailed || v.Fault != terms.FaultJob || v.Receipt.Fault != terms.FaultJob {
				t.Fatalf("missing command: run %s fault %q receipt fault %q (%s)", v.Run, v.Fault, v.Receipt.Fault, v.Detail)
			}
			if v.State != terms.JobFinished || len(v.History) != 0 || v.Job.Attempt != 0 || len(v.Job.Exclude) != 0 {
				t.Fatalf("missing command requeued: state %s, %d earlier attempts, attempt %d, excluded %v",
					v.State, len(v.History), v.Job.Attempt, v.Job.Exclude)
			}
			if st := r.book.Stats(p.id()); st.Failed != 0 || st.JobFaults != 1 || math.Abs(st.Score-before) > 1e-12 {
				t.Fatalf("provider's record after the job's fault: %+v (score was %.6f)", st, before)
			}
		})
	}
}

// TestRuntimeSpecFaultsClassify: the supervisor calls the job's fault what
// the real process executor refuses because of the job's spec (a reserved
// variable, a missing command), and the provider's fault what it refuses
// because of what the provider filled in (a deadline already passed).
func TestRuntimeSpecFaultsClassify(t *testing.T) {
	t.Parallel()
	e := realProcessExec(t)
	base := runtime.Spec{ID: "spec-fault", Command: []string{"/bin/true"}, Deadline: time.Now().Add(time.Minute)}
	cases := []struct {
		name  string
		edit  func(*runtime.Spec)
		fault terms.Fault
	}{
		{"reserved env", func(s *runtime.Spec) { s.Env = map[string]string{"HOME": "/tmp"} }, terms.FaultJob},
		{"command not on PATH", func(s *runtime.Spec) { s.Command = []string{"gpumesh-no-such-command"} }, terms.FaultJob},
		{"no such file", func(s *runtime.Spec) { s.Command = []string{"/nonexistent/gpumesh/bin"} }, terms.FaultJob},
		{"not executable", func(s *runtime.Spec) { s.Command = []string{"/etc/passwd"} }, terms.FaultJob},
		{"deadline passed", func(s *runtime.Spec) { s.Deadline = time.Now().Add(-time.Second) }, terms.FaultProvider},
	}
	for _, c := range cases {
		s := base
		c.edit(&s)
		h, err := e.Start(t.Context(), s, nil, nil)
		if err == nil {
			h.Stop(0)
			h.Cleanup()
			t.Fatalf("%s: started", c.name)
		}
		run, detail, fault := lifecycle.Classify(exitOf(runtime.Result{ExitCode: -1, Err: err}), nil)
		if run != terms.RunFailed || fault != c.fault {
			t.Fatalf("%s: %s fault %q (%s), want fault %q", c.name, run, fault, detail, c.fault)
		}
	}
}
