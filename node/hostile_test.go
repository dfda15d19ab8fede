package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/artifact"
	"github.com/gpumesh/gpumesh/node/config"
)

// hostileScript is a tenant that attacks its provider and the other
// tenants, all at once, and then exits 0 having reported what it got:
//
//   - its outputs dir holds symlinks to the provider's data dir and
//     identity key ($HOSTILE_TARGET, the path an attacker would guess);
//   - with HOSTILE_ROOT set (the provider runs as root, so jobs have their
//     own uid and namespaces), at its start and every 2 s: it plants files
//     in /tmp and /run/lock for the next tenant, copies every
//     /proc/*/cmdline it can read into its outputs, removes the other
//     tenants' files it can see in /tmp, and kills -9 every
//     process it may signal (kill -9 -1), saying when;
//   - it forks 200 short-lived children (bounded: not a fork bomb);
//   - it floods its log with 24 MB (under the 64 MiB log cap, so the
//     renter's evidence check fetches all of it);
//   - it tries to become root (perl's setuid, the setuid mount binary);
//   - while its checkpoints are taken (every second) it swaps its
//     checkpoint dir, every 100 ms, between a symlink to the data dir, a
//     symlink to the key, a real dir holding symlinks (absolute, relative
//     and up the tree) next to a file of its own, and (as root) a hard
//     link attempt: without root the job runs as the daemon's user, which
//     may read the key anyway.
const hostileScript = `set +e
T="$HOSTILE_TARGET"; d="$GPUMESH_CHECKPOINT_DIR"; o="$GPUMESH_OUTPUTS"
mkdir -p "$o"; echo "the hostile tenant's outputs" > "$o/note"
ln -s "$T/identity.key" "$o/key"; ln -s "$T" "$o/data"; ln -s ../../../../../.. "$o/up"
# at the tenants: plants, /proc, kill -9 -1 (as root only: see the test)
tenants() {
  [ -n "$HOSTILE_ROOT" ] || return 0
  rm -f /tmp/mine-* 2>/dev/null
  echo "planted by the hostile tenant" > /tmp/planted; echo "planted" > /run/lock/planted
  cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\000' ' ' >> "$o/cmdlines"
  ls -d /proc/[0-9]* | wc -l >> "$o/procs"
  sleep 600 & victim=$!
  echo "kill -9 -1 at $(date +%s%N)"
  kill -9 -1
  wait $victim; echo "own child's status after kill -9 -1: $?"
}
tenants
i=0; while [ $i -lt 200 ]; do ( : ) & i=$((i+1)); done; wait
echo "forked $i children"
yes "hostile tenant flooding its log: 0123456789abcdef0123456789abcdef" | head -c 24000000
echo
perl -e '$< = 0; $> = 0; print "after setuid: uid $< euid $>\n"'
mkdir -p "$HOME/m"; mount -t tmpfs none "$HOME/m" 2>&1; echo "mount exit $?"
echo "id after the setuid attempts: $(id -u)"
k=0; while [ $k -lt 80 ]; do
  k=$((k+1))
  rm -rf "$d"
  case $((k % 4)) in
  0) ln -s "$T" "$d" ;;
  1) mkdir "$d"; echo "state $k" > "$d/state"; ln -s "$T/identity.key" "$d/identity.key"; ln -s "$T" "$d/data"; [ -n "$HOSTILE_ROOT" ] && ln "$T/identity.key" "$d/hard" 2>/dev/null ;;
  2) mkdir -p "$d/sub"; echo "state $k" > "$d/sub/state"; ln -s ../../../../../.. "$d/sub/up"; ln -s "$T/identity.key" "$d/sub/key" ;;
  3) ln -s "$T/identity.key" "$d" ;;
  esac
  [ $((k % 20)) = 0 ] && tenants
  sleep 0.1
done
echo "checkpoint swaps: $k"
echo "hostile tenant done"
`

// honestScript computes a known sum in 30 steps (a step every 200 ms, so
// it runs alongside the hostile tenant), keeps a file of its own in /tmp
// and checks it at the end, looks for the hostile tenant's plants in /tmp
// and /run/lock, and writes "sum=S tmp=ok|lost plants=none|seen" to its
// outputs. The marker (in its command line) is what the hostile tenant
// hunts for in /proc.
func honestScript(marker string, n int) string {
	return fmt.Sprintf(`# %s
echo "%s" > /tmp/mine-%s
s=0; i=0; while [ $i -lt 30 ]; do j=0; while [ $j -lt %d ]; do j=$((j+1)); s=$((s+j*j)); done; i=$((i+1)); echo "step $i"; sleep 0.2; done
tmp=lost; [ "$(cat /tmp/mine-%s)" = "%s" ] && tmp=ok
plants=none; [ -e /tmp/planted ] || [ -e /run/lock/planted ] && plants=seen
mkdir -p out; echo "sum=$s tmp=$tmp plants=$plants" > out/result
echo "%s done sum=$s"
`, marker, marker, marker, n, marker, marker, marker)
}

// honestSum is what honestScript(_, n) computes: 30 times 1²+…+n².
func honestSum(n int) int { return 30 * n * (n + 1) * (2*n + 1) / 6 }

// containsIn reports the first regular file under dir that holds needle.
func containsIn(t *testing.T, dir string, needle []byte) string {
	t.Helper()
	found := ""
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			found = p
		}
		return nil
	})
	return found
}

// TestHostileTenantAmongEight (issue 22, acceptance 3): a provider with 8
// GPUs runs 8 tenants' jobs at once, from 8 renter daemons; one tenant is
// hostile (hostileScript). The 7 honest jobs succeed alongside it with
// their outputs (a known sum, their /tmp intact, no plants seen) and logs,
// and settle; the hostile tenant's checkpoints and outputs, as its renter
// received them, hold no byte of the provider's identity key (nor, as
// root, any other tenant's command line); its run, if it failed, failed by
// its own fault; the provider's key is untouched, and the provider still
// answers its control API and runs a further job, whose /tmp and /run/lock
// hold none of the hostile tenant's plants.
//
// As root (jobs get their own uid, namespaces, hidepid /proc and private
// /tmp and /run/lock) the hostile tenant also plants files, reads /proc
// and kills -9 -1; without root these parts are left out (a job running
// as the daemon's user could kill the test itself), and logged.
func TestHostileTenantAmongEight(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	if !root {
		t.Log("not root: jobs run as the test's own user without namespaces, so the hostile tenant's /proc reading, " +
			"/tmp and /run/lock plants and kill -9 -1 are left out (they need per-job uids and namespaces, which need root)")
	}
	pc := fastConfig(providerConfig("eu-west", 1.0, a100, a100, a100, a100, a100, a100, a100, a100))
	// The hostile job runs kill -9 -1 as its uid, which reaches every
	// process of that uid on the host: its own pool keeps it off the jobs
	// of the other packages' tests running beside this one.
	pc.Provider.JobUIDBase = 230000
	cfgs := []config.Config{pc}
	for range 7 {
		cfgs = append(cfgs, renterConfig())
	}
	boot, ns := startNet(t, cfgs...)
	prov := ns[0]
	renters := append([]*testNode{boot}, ns[1:]...)
	for _, r := range renters {
		waitAdvertised(t, r, prov)
	}
	key, err := os.ReadFile(prov.paths.Key())
	if err != nil || len(key) < 32 {
		t.Fatalf("provider's identity key: %d bytes, %v", len(key), err)
	}

	// Renter 0 is the hostile tenant's; renters 1..7 post one honest job each.
	const hostileAt = 0
	jobs := make([]terms.Job, len(renters))
	markers := make([]string, len(renters))
	sizes := make([]int, len(renters))
	for i := range renters {
		if i == hostileAt {
			j := shJob(terms.Silver, 2, hostileScript)
			j.ID = terms.NewID("hostile")
			j.CheckpointEvery = time.Second
			j.Run.Outputs = "out"
			j.Run.Env = map[string]string{"HOSTILE_TARGET": prov.dir}
			if root {
				j.Run.Env["HOSTILE_ROOT"] = "1"
			}
			jobs[i] = j
			continue
		}
		markers[i] = fmt.Sprintf("honest-tenant-%d-%s", i, terms.NewID("secret"))
		sizes[i] = 50 + 10*i
		j := shJob(terms.Silver, 2, honestScript(markers[i], sizes[i]))
		j.ID = terms.NewID("honest")
		j.Run.Outputs = "out"
		jobs[i] = j
	}

	// All eight at once.
	var wg sync.WaitGroup
	postErr := make([]error, len(renters))
	for i, r := range renters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, postErr[i] = api.NewClient(r.dir).PostJob(ctx, jobs[i])
		}()
	}
	wg.Wait()
	for i, err := range postErr {
		if err != nil {
			t.Fatalf("renter %d: post: %v", i, err)
		}
	}

	// While the hostile job runs, take each checkpoint its renter keeps
	// (the renter keeps the newest few only) and look into it.
	hr := renters[hostileAt]
	hid := jobs[hostileAt].ID
	checked := map[string]bool{}
	// A checkpoint is fetched and pinned before the renter records it, so
	// each change of a record is the moment to look.
	var hv api.JobView
	waitRecords(t, hr, 45*time.Second, "hostile job ended and settled", func() bool {
		if hv, err = hr.market.tracker.View(hid); err != nil {
			t.Fatal(err)
		}
		for _, ck := range hv.Checkpoints {
			if checked[ck.Artifact] {
				continue
			}
			dir := filepath.Join(t.TempDir(), "ck")
			if err := hr.artifacts.Store().Export(ck.Artifact, dir, artifact.Local); err != nil {
				continue // dropped meanwhile
			}
			checked[ck.Artifact] = true
			if f := containsIn(t, dir, key); f != "" {
				t.Errorf("the hostile tenant's checkpoint %d (%s) holds the provider's identity key: %s", ck.Seq, ck.Artifact, f)
			}
		}
		return hv.Run.Terminal() && hv.Receipt != nil
	}, func() string { return fmt.Sprintf("run %s (%s), state %s", hv.Run, hv.Detail, hv.State) })
	if len(checked) == 0 {
		t.Errorf("the hostile tenant's renter kept no checkpoint: the attack on checkpoints did not engage (run %s, %s, fault %q; log:\n%s)",
			hv.Run, hv.Detail, hv.Fault, withoutFlood(leaseLog(prov, hv.Lease.ID)))
	}
	if hv.Run != terms.RunSucceeded && hv.Fault != terms.FaultJob {
		t.Errorf("hostile job ended %s (%s) at fault %q: only the job's own fault may end it", hv.Run, hv.Detail, hv.Fault)
	}
	hlog := leaseLog(prov, hv.Lease.ID)
	t.Logf("hostile job: %s (%s, fault %q), %d checkpoints looked into, log %d bytes; its log but the flood:\n%s",
		hv.Run, hv.Detail, hv.Fault, len(checked), len(hlog), withoutFlood(hlog))
	for _, want := range []string{"forked 200 children", "checkpoint swaps: 80", "hostile tenant done"} {
		if !strings.Contains(hlog, want) {
			t.Errorf("hostile log lacks %q: the attack did not run as written", want)
		}
	}
	var kills []time.Time
	for _, m := range regexp.MustCompile(`kill -9 -1 at (\d+)\n`).FindAllStringSubmatch(hlog, -1) {
		ns, _ := strconv.ParseInt(m[1], 10, 64)
		kills = append(kills, time.Unix(0, ns))
	}
	if root && len(kills) == 0 {
		t.Error("the hostile tenant never ran kill -9 -1")
	}
	if strings.Contains(hlog, "euid 0") || strings.Contains(hlog, "setuid attempts: 0\n") {
		t.Errorf("the hostile tenant became root:\n%s", withoutFlood(hlog))
	}
	if hv.OutputsArtifact != "" {
		dest := t.TempDir()
		if _, err := api.NewClient(hr.dir).GetArtifact(context.Background(), hv.OutputsArtifact,
			api.ArtifactGetRequest{Dest: dest, Peers: prov.Addrs()}, nil); err != nil {
			t.Fatalf("hostile outputs: %v", err)
		}
		if f := containsIn(t, dest, key); f != "" {
			t.Errorf("the hostile tenant's outputs hold the provider's identity key: %s", f)
		}
		for _, m := range markers {
			if m == "" {
				continue
			}
			if f := containsIn(t, dest, []byte(m)); f != "" {
				t.Errorf("the hostile tenant's outputs hold another tenant's command line (%s): %s", m, f)
			}
		}
		if root {
			b, _ := os.ReadFile(filepath.Join(dest, "procs"))
			t.Logf("hostile tenant saw %s processes in /proc at each look", strings.Join(strings.Fields(string(b)), ", "))
		}
	} else if hv.Run == terms.RunSucceeded {
		t.Error("hostile job succeeded with no outputs artifact")
	}
	// Everything its renter holds: no byte of the provider's key.
	if f := containsIn(t, hr.dir, key); f != "" {
		t.Errorf("the hostile tenant's renter holds the provider's identity key in %s", f)
	}

	// The seven honest tenants.
	for i, r := range renters {
		if i == hostileAt {
			continue
		}
		v := waitJob(t, r, jobs[i].ID, 30*time.Second, "honest job ended and settled", func(v api.JobView) bool {
			return v.Run.Terminal() && v.Receipt != nil
		})
		if v.Run != terms.RunSucceeded || v.Lease.Provider != prov.ID().String() || !strings.HasPrefix(v.Evidence, "log verified") {
			t.Errorf("honest job %d: %s (%s, fault %q) on %s, evidence %q", i, v.Run, v.Detail, v.Fault, v.Lease.Provider, v.Evidence)
			continue
		}
		// It ran alongside the hostile one, and (as root) through one of
		// its kill -9 -1 (and /proc reads, and plants).
		if !v.Started.Before(hv.Ended) || !hv.Started.Before(v.Ended) {
			t.Errorf("honest job %d ran %s–%s, the hostile one %s–%s: not at once", i,
				v.Started.Format(time.StampMilli), v.Ended.Format(time.StampMilli), hv.Started.Format(time.StampMilli), hv.Ended.Format(time.StampMilli))
		}
		if root && !slices.ContainsFunc(kills, func(k time.Time) bool { return k.After(v.Started) && k.Before(v.Ended) }) {
			t.Errorf("honest job %d ran %s–%s, through none of the hostile tenant's kill -9 -1 (%v)", i,
				v.Started.Format(time.StampMilli), v.Ended.Format(time.StampMilli), kills)
		}
		want := fmt.Sprintf("sum=%d tmp=ok plants=none\n", honestSum(sizes[i]))
		sum := sha256.Sum256([]byte(want))
		if len(v.Outputs) != 1 || v.Outputs[0].Path != "result" || v.Outputs[0].SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("honest job %d: outputs %+v, want one file result = %q", i, v.Outputs, want)
		}
		dest := t.TempDir()
		if _, err := api.NewClient(r.dir).GetArtifact(context.Background(), v.OutputsArtifact,
			api.ArtifactGetRequest{Dest: dest, Peers: prov.Addrs()}, nil); err != nil {
			t.Errorf("honest job %d: outputs: %v", i, err)
		} else if b, _ := os.ReadFile(filepath.Join(dest, "result")); string(b) != want {
			t.Errorf("honest job %d: result %q, want %q", i, b, want)
		}
		log := leaseLog(prov, v.Lease.ID)
		if !strings.Contains(log, "step 30\n") || !strings.Contains(log, fmt.Sprintf("%s done sum=%d\n", markers[i], honestSum(sizes[i]))) {
			t.Errorf("honest job %d: log\n%s", i, log)
		}
	}

	// The provider is up: it answers its control API and runs the next
	// tenant's job, which finds nothing the hostile one left.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := api.NewClient(prov.dir).Status(ctx); err != nil {
		t.Fatalf("provider status: %v", err)
	} else if st.PeerID != prov.ID().String() {
		t.Fatalf("provider status names %s", st.PeerID)
	}
	next := shJob(terms.Silver, 2, `ls -a /tmp /run/lock; if [ -e /tmp/planted ] || [ -e /run/lock/planted ]; then echo "plants seen"; exit 3; fi; echo "next tenant clean"`)
	nv := post(t, renters[1], next)
	if !leased(nv) {
		t.Fatalf("next job not leased: %s %v", nv.State, nv.Reasons)
	}
	nv = waitJob(t, renters[1], nv.Job.ID, 30*time.Second, "next job settled", func(v api.JobView) bool { return v.Run.Terminal() && v.Receipt != nil })
	if nv.Run != terms.RunSucceeded {
		t.Errorf("next tenant's job: %s (%s), log:\n%s", nv.Run, nv.Detail, leaseLog(prov, nv.Lease.ID))
	}
	if now, err := os.ReadFile(prov.paths.Key()); err != nil || !bytes.Equal(now, key) {
		t.Errorf("the provider's identity key changed (%v)", err)
	}
}

// withoutFlood is the hostile tenant's log less its flood lines.
func withoutFlood(log string) string {
	var b strings.Builder
	flood := 0
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if strings.HasPrefix(l, "hostile tenant flooding") {
			flood++
			continue
		}
		if flood > 0 {
			fmt.Fprintf(&b, "  [%d flood lines]\n", flood)
			flood = 0
		}
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
