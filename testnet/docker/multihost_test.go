package docker

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// image is what build-image.sh builds and every container runs;
// $GPUMESH_TEST_IMAGE overrides it (e.g. to test another checkout side by
// side).
var image = cmp.Or(os.Getenv("GPUMESH_TEST_IMAGE"), "gpumesh-node:test")

const (
	// labelKey marks every container and network of one test run (the value
	// is the run's random id), so that cleanup finds exactly those.
	labelKey = "io.gpumesh.multihost-test"
	// ttl is the providers' advertise_ttl: how long a capability record of
	// a provider that went away stays discoverable.
	// It is renewed every third of it, counted from the end of the previous
	// renewal, so it must exceed 1.5 times the longest advertise: with 4s a
	// healthy provider blinks out of discovery whenever a peer dies.
	ttl = 10 * time.Second
	// gone bounds how long after a provider is killed discovery may still
	// list it: its record's TTL plus the time a lookup takes to give up.
	gone = ttl + 20*time.Second
	// partitionGone is gone for a provider cut off the network: its
	// connections are not closed but go silent, and the DHT only gives up
	// on them after its RPC timeouts (10s) and the muxer's keepalive (~40s).
	partitionGone = ttl + 50*time.Second
	// rejoin bounds how long a provider whose network came back may take to
	// be discoverable again. It re-advertises at least every 2s, so this
	// leaves ample time to re-dial its bootstrap peer.
	rejoin = 30 * time.Second
	// cmdTimeout bounds any single docker command.
	cmdTimeout = 60 * time.Second
)

var (
	// skipReason is why the tests skip (docker unreachable), or empty.
	skipReason string
	// setupErr is the image build's failure, if any.
	setupErr error
)

func TestMain(m *testing.M) {
	skipReason = dockerUnreachable()
	if skipReason == "" {
		setupErr = buildImage()
	}
	os.Exit(m.Run())
}

// dockerUnreachable says why the Docker CLI or daemon cannot be used, or
// returns "" when both answer.
func dockerUnreachable() string {
	if _, err := exec.LookPath("docker"); err != nil {
		return "docker CLI not found in PATH"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Version}}").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("docker daemon unreachable (%v): %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

// buildImage runs build-image.sh (a no-op import when nothing changed).
func buildImage() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "build-image.sh", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("build-image.sh %s: %w\n%s", image, err, out)
	}
	return nil
}

func requireDocker(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skipf("multi-host docker test skipped: %s", skipReason)
	}
	if setupErr != nil {
		t.Fatalf("building the test image: %v", setupErr)
	}
}

// cluster is one test run's containers on its own internal network.
type cluster struct {
	t       *testing.T
	run     string // random run id: label value and name suffix
	network string
	subnet  string // the network's /24 prefix, e.g. "10.213.7."
	dir     string // host directory holding the nodes' config dirs
	nodes   []*daemon
}

// daemon is one container running `gpumesh daemon`.
type daemon struct {
	name      string // container name
	id        string // libp2p peer id
	ip        string // address on the cluster network at start
	startedAt time.Time
}

func (d *daemon) String() string { return d.name }

func newCluster(t *testing.T) *cluster {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	run := hex.EncodeToString(b)
	c := &cluster{t: t, run: run, network: "gpumesh-test-" + run, dir: t.TempDir()}
	// Registered after TempDir, so it runs before the dir is removed.
	t.Cleanup(c.cleanup)
	// --internal: no route out of the host; traffic stays among these
	// containers. An explicit subnet lets the partition test hand a node a
	// new address when it comes back; a random one rarely collides with
	// another network, and a collision is simply retried.
	var err error
	for range 8 {
		if _, err = rand.Read(b[:2]); err != nil {
			t.Fatal(err)
		}
		c.subnet = fmt.Sprintf("10.%d.%d.", 200+int(b[0])%50, b[1])
		_, err = docker(t.Context(), "network", "create", "--internal", "--subnet", c.subnet+"0/24",
			"--label", labelKey+"="+run, c.network)
		if err == nil {
			return c
		}
	}
	t.Fatalf("creating the test network: %v", err)
	return nil
}

// docker runs the docker CLI and returns its trimmed stdout; the error
// carries stderr.
func docker(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s%s", strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()), outputTail(stdout.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func outputTail(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return "\nstdout: " + s
}

func (c *cluster) must(args ...string) string {
	c.t.Helper()
	out, err := docker(c.t.Context(), args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// gpumesh runs the CLI inside d against its daemon.
func (c *cluster) gpumesh(d *daemon, args ...string) (string, error) {
	return docker(c.t.Context(), append([]string{"exec", d.name, "gpumesh", "-d", "/data"}, args...)...)
}

// cleanup removes every container and network labelled with this run, and
// on failure first logs the daemons' last lines.
func (c *cluster) cleanup() {
	ctx := context.Background()
	filter := "label=" + labelKey + "=" + c.run
	if c.t.Failed() {
		for _, d := range c.nodes {
			out, _ := exec.Command("docker", "logs", "--tail", "40", d.name).CombinedOutput()
			c.t.Logf("--- last log lines of %s (peer %s, started %s):\n%s", d.name, d.id,
				d.startedAt.Format(time.TimeOnly), out)
		}
	}
	if ids, err := docker(ctx, "ps", "-aq", "--filter", filter); err != nil {
		c.t.Errorf("cleanup: %v", err)
	} else if ids != "" {
		if _, err := docker(ctx, append([]string{"rm", "-f", "-v"}, strings.Fields(ids)...)...); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
	if ids, err := docker(ctx, "network", "ls", "-q", "--filter", filter); err != nil {
		c.t.Errorf("cleanup: %v", err)
	} else if ids != "" {
		if _, err := docker(ctx, append([]string{"network", "rm"}, strings.Fields(ids)...)...); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
}

// start writes config to a host dir, bind-mounts it read-only and runs the
// daemon in a new container (data dir /data inside it), then waits until
// its control API answers.
func (c *cluster) start(name, config string) *daemon {
	c.t.Helper()
	cfgDir := filepath.Join(c.dir, name)
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(config), 0o644); err != nil {
		c.t.Fatal(err)
	}
	d := &daemon{name: c.network + "-" + name}
	c.must("run", "-d", "--name", d.name, "--hostname", name,
		"--label", labelKey+"="+c.run, "--network", c.network,
		"--memory", "512m", "--pids-limit", "512",
		"-v", cfgDir+":/etc/gpumesh:ro",
		image, "gpumesh", "-d", "/data", "daemon", "--config", "/etc/gpumesh/config.yaml")
	d.startedAt = time.Now()
	c.nodes = append(c.nodes, d)
	var st api.StatusInfo
	var lastErr error
	// A daemon in a real container starting up: nothing here is notified.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := c.gpumesh(d, "status", "--json")
		if err == nil {
			if err = json.Unmarshal([]byte(out), &st); err == nil && st.PeerID != "" {
				lastErr = nil
				break
			}
			err = fmt.Errorf("status --json: %v: %q", err, out)
		}
		lastErr = err
	}
	if lastErr != nil {
		c.t.Fatalf("%s did not come up: %v", d, lastErr)
	}
	d.id = st.PeerID
	d.ip = c.must("inspect", "-f", fmt.Sprintf("{{(index .NetworkSettings.Networks %q).IPAddress}}", c.network), d.name)
	if d.ip == "" {
		c.t.Fatalf("%s has no address on %s", d, c.network)
	}
	c.t.Logf("started %s: peer %s at %s", d, d.id, d.ip)
	return d
}

const renterConfig = `region: eu-west
listen: [/ip4/0.0.0.0/tcp/4001]
log_level: info
`

// gpu is one line of a provider's declared inventory.
type gpu struct {
	model string
	vram  int
	count int
}

func providerConfig(region, bootstrap string, floor float64, g gpu) string {
	var b strings.Builder
	fmt.Fprintf(&b, "region: %s\nlisten: [/ip4/0.0.0.0/tcp/4001]\nlog_level: info\nbootstrap: [%s]\n", region, bootstrap)
	fmt.Fprintf(&b, "provider:\n  enabled: true\n  advertise_ttl: %s\n  heartbeat_interval: 1s\n  preempt_grace: 2s\n", ttl)
	b.WriteString("  executor: process\n  gpu_source: declared\n  gpus:\n")
	for range g.count {
		fmt.Fprintf(&b, "    - {model: %s, vram_gb: %d}\n", g.model, g.vram)
	}
	fmt.Fprintf(&b, "  policy:\n    price_floor: %g\n    accept_preemptible: true\n", floor)
	return b.String()
}

// providers asks renter's daemon, through the DHT, for the providers that
// match the CLI query flags, and returns their sorted peer ids.
func (c *cluster) providers(renter *daemon, query ...string) ([]string, error) {
	out, err := c.gpumesh(renter, append([]string{"providers", "--json"}, query...)...)
	if err != nil {
		return nil, err
	}
	var caps []terms.Capability
	if err := json.Unmarshal([]byte(out), &caps); err != nil {
		return nil, fmt.Errorf("providers --json: %w: %q", err, out)
	}
	ids := make([]string, 0, len(caps))
	for _, cp := range caps {
		if !cp.ExpiresAt.After(cp.IssuedAt) {
			return nil, fmt.Errorf("providers --json listed %s with an empty validity (%s..%s)", cp.Peer, cp.IssuedAt, cp.ExpiresAt)
		}
		ids = append(ids, cp.Peer)
	}
	slices.Sort(ids)
	return ids, nil
}

func (c *cluster) ids(ds ...*daemon) []string {
	ids := make([]string, 0, len(ds))
	for _, d := range ds {
		ids = append(ids, d.id)
	}
	slices.Sort(ids)
	return ids
}

// names renders peer ids as container names, for readable failures.
func (c *cluster) names(ids []string) string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		name := "unknown peer " + id
		for _, d := range c.nodes {
			if d.id == id {
				name = d.name
			}
		}
		out = append(out, name)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// poll is what awaitProviders saw.
type poll struct {
	took    time.Duration // until the answer was exactly the wanted set
	answers int           // successful answers
	// missing are the answers that lacked a provider that was up all along.
	missing []string
	slowest time.Duration // longest single query
}

// awaitProviders polls the query until it returns exactly want, failing
// after within. It records every answer that lacks one of keep (providers
// that are up all along) for the caller to judge.
func (c *cluster) awaitProviders(t *testing.T, renter *daemon, query []string, want, keep []*daemon, within time.Duration) (poll, error) {
	t.Helper()
	start := time.Now()
	wantIDs := c.ids(want...)
	var p poll
	var last []string
	var lastErr error
	for {
		asked := time.Now()
		got, err := c.providers(renter, query...)
		p.slowest = max(p.slowest, time.Since(asked))
		if err == nil {
			p.answers++
			for _, k := range keep {
				if !slices.Contains(got, k.id) {
					p.missing = append(p.missing, fmt.Sprintf("at +%s %s was missing (answer %s, query took %s)",
						asked.Sub(start).Round(time.Millisecond), k, c.names(got), time.Since(asked).Round(time.Millisecond)))
				}
			}
			if slices.Equal(got, wantIDs) {
				p.took = time.Since(start)
				return p, nil
			}
		}
		last, lastErr = got, err
		if time.Since(start) > within {
			p.took = time.Since(start)
			return p, fmt.Errorf("providers %v: want %s within %s, last answer %s (err %v)",
				query, c.names(wantIDs), within, c.names(last), lastErr)
		}
		select {
		case <-t.Context().Done():
			return p, t.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// awaitAlone polls d's own view (status) until it has no connected peer.
func (c *cluster) awaitAlone(t *testing.T, d *daemon, within time.Duration) error {
	t.Helper()
	start := time.Now()
	for {
		var s api.StatusInfo
		out, err := c.gpumesh(d, "status", "--json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &s)
		}
		if err == nil && s.Peers == 0 {
			t.Logf("%s alone (no connected peer) %s after it dropped out of discovery", d, time.Since(start).Round(time.Second))
			return nil
		}
		if time.Since(start) > within {
			return fmt.Errorf("%s still sees %d peer(s) %s after its network was cut (err %v)", d, s.Peers, within, err)
		}
		select {
		case <-t.Context().Done():
			return t.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// postJob posts a one-GPU job for model running `sh -c script` from
// renter, waits for it and requires it to have succeeded.
func (c *cluster) postJob(t *testing.T, renter *daemon, model, script string) api.JobView {
	t.Helper()
	out, err := c.gpumesh(renter, "job", "post", "--gpu", model, "--max-price", "5", "--duration", "5m",
		"--wait", "--json", "--", "sh", "-c", script)
	if err != nil {
		t.Fatalf("job post: %v", err)
	}
	var v api.JobView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("job post --json: %v: %q", err, out)
	}
	if v.Run != terms.RunSucceeded || v.ExitCode == nil || *v.ExitCode != 0 {
		t.Fatalf("job %s: run %q exit %v detail %q, want succeeded with exit 0", v.Job.ID, v.Run, v.ExitCode, v.Detail)
	}
	return v
}

// TestMultiHost runs a renter (the bootstrap peer) and three providers in
// four containers on a private network and drives them with the CLI.
func TestMultiHost(t *testing.T) {
	requireDocker(t)
	c := newCluster(t)

	renter := c.start("renter", renterConfig)
	boot := fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", renter.ip, renter.id)
	h100 := c.start("h100", providerConfig("eu-west", boot, 2.0, gpu{"H100", 80, 2}))
	a100 := c.start("a100", providerConfig("eu-central", boot, 1.2, gpu{"A100", 40, 1}))
	rtx := c.start("rtx", providerConfig("us-east", boot, 0.45, gpu{"RTX4090", 24, 1}))
	all := []*daemon{h100, a100, rtx}

	if !t.Run("discovery", func(t *testing.T) {
		p, err := c.awaitProviders(t, renter, nil, all, nil, 45*time.Second)
		if err != nil {
			t.Fatalf("initial discovery: %v", err)
		}
		t.Logf("all 3 providers discoverable %s after the last one started", p.took.Round(time.Millisecond))
		for _, tc := range []struct {
			query []string
			want  []*daemon
		}{
			{[]string{"--gpu", "H100"}, []*daemon{h100}},
			{[]string{"--gpu", "A100"}, []*daemon{a100}},
			{[]string{"--gpu", "RTX4090"}, []*daemon{rtx}},
			{[]string{"--region", "eu"}, []*daemon{h100, a100}},
			{[]string{"--region", "us-east"}, []*daemon{rtx}},
			{[]string{"--min-vram", "40"}, []*daemon{h100, a100}},
			{[]string{"--gpu", "H100", "--count", "2"}, []*daemon{h100}},
			{[]string{"--gpu", "H100", "--count", "3"}, nil},
			{[]string{"--gpu", "RTX4090", "--region", "eu"}, nil},
		} {
			t.Run(strings.Join(tc.query, " "), func(t *testing.T) {
				// Everything is advertised by now: the first answer must be right.
				got, err := c.providers(renter, tc.query...)
				if err != nil {
					t.Errorf("providers %v: %v", tc.query, err)
					return
				}
				if want := c.ids(tc.want...); !slices.Equal(got, want) {
					t.Errorf("providers %v = %s, want %s", tc.query, c.names(got), c.names(want))
				}
			})
		}
	}) {
		t.Fatal("discovery failed; the remaining scenarios depend on it")
	}

	t.Run("job", func(t *testing.T) {
		v := c.postJob(t, renter, "H100", "echo 42")
		if v.Winner != h100.id || v.Lease == nil || v.Lease.Provider != h100.id {
			t.Errorf("job %s won by %s, want the only H100 provider %s", v.Job.ID, c.names([]string{v.Winner}), h100)
		}
		for _, b := range v.Bids {
			if b.Bid.Provider != h100.id {
				t.Errorf("job %s for an H100 got a bid from %s", v.Job.ID, c.names([]string{b.Bid.Provider}))
			}
		}
		logs, err := c.gpumesh(renter, "job", "logs", v.Job.ID)
		if err != nil {
			t.Fatalf("job logs: %v", err)
		}
		if strings.TrimSpace(logs) != "42" {
			t.Errorf("job logs %s = %q, want \"42\"", v.Job.ID, logs)
		}
		out, err := c.gpumesh(renter, "job", "status", "--json", v.Job.ID)
		if err != nil {
			t.Fatalf("job status: %v", err)
		}
		var st api.JobView
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("job status --json: %v: %q", err, out)
		}
		if st.Job.ID != v.Job.ID || st.Run != terms.RunSucceeded {
			t.Errorf("job status %s: id %s run %q, want succeeded", v.Job.ID, st.Job.ID, st.Run)
		}
	})

	t.Run("node_loss", func(t *testing.T) {
		c.must("kill", rtx.name)
		p, err := c.awaitProviders(t, renter, nil, []*daemon{h100, a100}, []*daemon{h100, a100}, gone)
		for _, m := range p.missing {
			t.Errorf("while %s was being forgotten, a provider that stayed up vanished from discovery: %s", rtx, m)
		}
		if err != nil {
			t.Fatalf("after killing %s: %v", rtx, err)
		}
		t.Logf("killed %s dropped out of discovery after %s (ttl %s, %d answers, slowest query %s)",
			rtx, p.took.Round(time.Millisecond), ttl, p.answers, p.slowest.Round(time.Millisecond))
		for range 3 {
			got, err := c.providers(renter)
			if want := c.ids(h100, a100); err != nil || !slices.Equal(got, want) {
				t.Errorf("providers after %s was forgotten = %s (err %v), want %s", rtx, c.names(got), err, c.names(want))
			}
		}
		if got, err := c.providers(renter, "--region", "us"); err != nil || len(got) != 0 {
			t.Errorf("providers --region us after killing the only us provider: %s (err %v), want none", c.names(got), err)
		}
	})

	t.Run("partition", func(t *testing.T) {
		c.must("network", "disconnect", c.network, a100.name)
		p, err := c.awaitProviders(t, renter, nil, []*daemon{h100}, []*daemon{h100}, partitionGone)
		if err != nil {
			t.Fatalf("after disconnecting %s: %v", a100, err)
		}
		t.Logf("partitioned %s dropped out of discovery after %s (ttl %s, %d answers, slowest query %s)",
			a100, p.took.Round(time.Millisecond), ttl, p.answers, p.slowest.Round(time.Millisecond))
		// Logged rather than failed: while a peer is silently unreachable
		// (connection open, no answers), DHT queries through it stall until
		// kad-dht's 10s RPC timeout and the muxer's keepalive (~40s) give
		// up on it. Discovery bounds the provider search (8s), reads each
		// record lookup's answers as they come (the provider's own answer
		// is enough; a lookup that waited for the silent peer's, GetValue's
		// way, hid every healthy provider for ~45s here and kept the
		// partitioned one listed 49s), and falls back to the last verified
		// record; the bound above (partitionGone) still requires healthy
		// providers back within that window.
		for _, m := range p.missing {
			t.Logf("during the partition of %s, healthy provider hidden: %s", a100, m)
		}

		// The case under test is a node that lost its peers: it comes back
		// once it knows it is alone (its connections' keepalives gave up,
		// ~40 s after the cut; discovery dropped it well before that).
		if err := c.awaitAlone(t, a100, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		// A new address: the others only know the old one, so only a100's
		// own re-dial of its bootstrap peer can bring it back.
		newIP := c.subnet + "200"
		c.must("network", "connect", "--ip", newIP, c.network, a100.name)
		reconnected := time.Now()
		p, err = c.awaitProviders(t, renter, nil, []*daemon{h100, a100}, []*daemon{h100}, rejoin)
		// Same weakness, logged: in the ~25s after a100 reappears on a new
		// address, the renter's answers have been seen to come back empty
		// after the 8s provider-search bound.
		for _, m := range p.missing {
			t.Logf("after %s's network came back, healthy provider hidden: %s", a100, m)
		}
		if err != nil {
			var s api.StatusInfo
			if out, serr := c.gpumesh(a100, "status", "--json"); serr == nil {
				_ = json.Unmarshal([]byte(out), &s)
			}
			t.Fatalf("%s did not rejoin within %s of its network coming back (%s after it started): %v\n"+
				"its own view: %d connected peer(s). A node left without peers must re-dial its bootstrap peers; "+
				"kad-dht alone retries only every 2 minutes",
				a100, rejoin, reconnected.Sub(a100.startedAt).Round(time.Second), err, s.Peers)
		}
		t.Logf("reconnected %s (new address %s) rediscovered after %s", a100, newIP, p.took.Round(time.Millisecond))
		// Settled: the next answers must all be the two survivors.
		for range 3 {
			got, err := c.providers(renter)
			if want := c.ids(h100, a100); err != nil || !slices.Equal(got, want) {
				t.Errorf("providers after %s rejoined = %s (err %v), want %s", a100, c.names(got), err, c.names(want))
			}
			// Not synchronisation: the answers are sampled a second
			// apart to check that the settled view stays settled.
			time.Sleep(time.Second)
		}
		// The rejoined provider must be usable, not just listed: a job that
		// only it can serve runs there.
		v := c.postJob(t, renter, "A100", "echo rejoined")
		if v.Winner != a100.id {
			t.Errorf("A100 job %s won by %s, want %s", v.Job.ID, c.names([]string{v.Winner}), a100)
		}
		// Not asserted: go-libp2p caches interface addresses for a minute,
		// so the record may still list the addresses a100 had before.
		if out, err := c.gpumesh(renter, "providers", "--gpu", "A100", "--json"); err == nil {
			var caps []terms.Capability
			if json.Unmarshal([]byte(out), &caps) == nil && len(caps) == 1 &&
				!slices.ContainsFunc(caps[0].Addrs, func(a string) bool { return strings.HasPrefix(a, "/ip4/"+newIP+"/") }) {
				t.Logf("note: %s's record, %s after reconnecting, lists %v, not yet its new address %s",
					a100, time.Since(reconnected).Round(time.Second), caps[0].Addrs, newIP)
			}
		}
	})
}
