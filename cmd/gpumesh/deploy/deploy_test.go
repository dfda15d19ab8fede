package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/cmd/gpumesh/gpumeshtest"
)

// gpumeshBin is the CLI these tests install and run (with cgo, as
// shipped): gpumeshtest.Binary's, once for all of them.
var gpumeshBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpumesh-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gpumeshBin, err = gpumeshtest.Binary(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func goBuild(out string, env []string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-o", out, "..")
	cmd.Env = append(append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations", "GOFLAGS=-buildvcs=false"), env...)
	return cmd.CombinedOutput()
}

// tree lists every path under root with its mode and size (and a link's
// target), for comparing two installs.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(&b, "%s %s %d", rel, fi.Mode(), fi.Size())
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestInstallScript: install.sh under a prefix puts the binary, the data dir
// and the unit (paths substituted, enabled by a wants link) in place, and a
// second run changes nothing.
func TestInstallScript(t *testing.T) {
	t.Parallel()
	prefix := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("sh", append([]string{"install.sh"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("install.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	args := []string{"--prefix", prefix, "--binary", gpumeshBin, "--no-user", "--data-dir", "/srv/gpumesh"}
	first := run(args...)
	for _, want := range []string{"installed " + prefix + "/usr/local/bin/gpumesh", "installed " + prefix + "/etc/systemd/system/gpumesh.service"} {
		if !strings.Contains(first, want) {
			t.Errorf("first run does not say %q:\n%s", want, first)
		}
	}
	before := tree(t, prefix)
	second := run(args...)
	if strings.Contains(second, "installed") {
		t.Errorf("second run reinstalled:\n%s", second)
	}
	if after := tree(t, prefix); after != before {
		t.Fatalf("a second run changed the install:\n%s\nvs\n%s", before, after)
	}
	unit, err := os.ReadFile(filepath.Join(prefix, "etc/systemd/system/gpumesh.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/gpumesh -d /srv/gpumesh daemon", "User=gpumesh", "ReadWritePaths=/srv/gpumesh", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if strings.Contains(string(unit), "@") {
		t.Errorf("unit has unsubstituted placeholders:\n%s", unit)
	}
	if target, err := os.Readlink(filepath.Join(prefix, "etc/systemd/system/multi-user.target.wants/gpumesh.service")); err != nil || target != "/etc/systemd/system/gpumesh.service" {
		t.Errorf("not enabled: %q %v", target, err)
	}
	fi, err := os.Stat(filepath.Join(prefix, "srv/gpumesh"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v", fi, err)
	}
	if out, err := exec.Command(filepath.Join(prefix, "usr/local/bin/gpumesh"), "--version").CombinedOutput(); err != nil {
		t.Fatalf("installed binary: %v %s", err, out)
	}
	// --no-systemd installs no unit.
	bare := t.TempDir()
	run("--prefix", bare, "--binary", gpumeshBin, "--no-user", "--no-systemd")
	if _, err := os.Stat(filepath.Join(bare, "etc/systemd")); !os.IsNotExist(err) {
		t.Errorf("--no-systemd installed a unit: %v", err)
	}
	for _, bad := range [][]string{{"--frobnicate"}, {"--data-dir", "relative"}, {"--binary", "/nonexistent"}, {"--user", "Bad User"}} {
		out, err := exec.Command("sh", append([]string{"install.sh", "--prefix", t.TempDir(), "--no-user"}, bad...)...).CombinedOutput()
		if err == nil || !strings.HasPrefix(string(out), "install.sh: ") {
			t.Errorf("install.sh %v: %v %q", bad, err, out)
		}
	}
}

// TestNoCgoBuild: CGO_ENABLED=0 (how darwin and cross builds are made)
// compiles, runs as a renter, and refuses provider mode with no declared
// GPUs, saying why.
func TestNoCgoBuild(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "gpumesh")
	if out, err := goBuild(bin, []string{"CGO_ENABLED=0"}); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "provider.yaml")
	if err := os.WriteFile(cfg, []byte("listen: [/ip4/127.0.0.1/tcp/0]\nprovider:\n  enabled: true\n  policy: {price_floor: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-d", t.TempDir(), "daemon", "-c", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no GPU to sell") || !strings.Contains(string(out), "built without cgo") {
		t.Fatalf("provider without NVML support or declared GPUs: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, bin, "-d", t.TempDir(), "doctor", "--role", "renter", "--json").CombinedOutput()
	if !strings.Contains(string(out), `"role": "renter"`) {
		t.Fatalf("doctor on a no-cgo build: %v\n%s", err, out)
	}
}

// dockerOrSkip skips when Docker is unreachable.
func dockerOrSkip(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker CLI not found")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("docker daemon unreachable: %v %s", err, out)
	}
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("busybox not found (Debian package busybox-static)")
	}
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dockerErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %v: %s %s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// importRootfs makes a minimal image without any registry, as
// testnet/docker/build-image.sh does: busybox as /bin/sh and the tools, the
// shared libraries the gpumesh binary links against, and under /dist the
// binary and this directory's install files, not installed.
func importRootfs(t *testing.T, tag string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "usr/bin", "usr/local/bin", "etc", "tmp", "data", "root", "dist/deploy", "proc", "sys", "dev", "run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	busybox, _ := exec.LookPath("busybox")
	copyFile(t, busybox, filepath.Join(root, "bin/busybox"), 0o755)
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			_ = os.Symlink("busybox", filepath.Join(root, "bin", a))
		}
	}
	copyFile(t, gpumeshBin, filepath.Join(root, "dist/gpumesh"), 0o755)
	for _, f := range []string{"install.sh", "gpumesh.service"} {
		copyFile(t, f, filepath.Join(root, "dist/deploy", f), 0o755)
	}
	ldd, _ := exec.Command("ldd", gpumeshBin).Output()
	for _, line := range strings.Split(string(ldd), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				copyFile(t, f, filepath.Join(root, f), 0o755)
			}
		}
	}
	for name, body := range map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":         "root:x:0:\nnogroup:x:65534:\n",
		"etc/nsswitch.conf": "hosts: files dns\n",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tarCmd := exec.Command("tar", "--owner=0", "--group=0", "--numeric-owner", "-C", root, "-c", ".")
	imp := exec.Command("docker", "import", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "-", tag)
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	var impOut bytes.Buffer
	imp.Stdout, imp.Stderr = &impOut, &impOut
	if err := tarCmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := imp.Run(); err != nil {
		t.Fatalf("docker import: %v %s", err, impOut.String())
	}
	if err := tarCmd.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = dockerErr("image", "rm", "-f", tag) })
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

func runID(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// waitFor polls f until it returns true, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not reached within %s; last: %s", what, within, last)
		}
		time.Sleep(500 * time.Millisecond) // real containers and daemons, over docker and HTTP: nothing here is notified
	}
}

// TestFreshContainerProvider is the operator's path end to end: in a fresh
// container, install.sh (twice: idempotent), `gpumesh provider init --yes`
// as the service user and the daemon started without systemd make a
// provider that a renter in another container on a private network
// discovers and leases.
func TestFreshContainerProvider(t *testing.T) {
	t.Parallel()
	dockerOrSkip(t)
	run := runID(t)
	image := "gpumesh-deploy-test:" + run
	importRootfs(t, image)
	network := "gpumesh-deploy-" + run
	docker(t, "network", "create", "--internal", network)
	renter, provider := "gpumesh-renter-"+run, "gpumesh-provider-"+run
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{renter, provider} {
				out, _ := dockerErr("logs", "--tail", "30", c)
				t.Logf("%s logs:\n%s", c, out)
			}
		}
		_, _ = dockerErr("rm", "-f", renter, provider)
		_, _ = dockerErr("network", "rm", network)
	})
	docker(t, "run", "-d", "--name", renter, "--network", network, image,
		"/dist/gpumesh", "-d", "/data", "daemon", "--listen", "/ip4/0.0.0.0/tcp/4001")
	var st struct {
		PeerID string `json:"peer_id"`
	}
	waitFor(t, 60*time.Second, "renter daemon up", func() (bool, string) {
		out, err := dockerErr("exec", renter, "/dist/gpumesh", "-d", "/data", "status", "--json")
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.PeerID != "", out
	})
	ip := docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", renter)
	boot := fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", ip, st.PeerID)

	script := `set -e
sh /dist/deploy/install.sh --binary /dist/gpumesh --no-systemd
sh /dist/deploy/install.sh --binary /dist/gpumesh --no-systemd > /tmp/second-install.log
su -s /bin/sh gpumesh -c 'gpumesh -d /var/lib/gpumesh provider init --yes --gpu "RTX 4090:24" --region eu-west --listen /ip4/0.0.0.0/tcp/4001 --bootstrap ` + boot + `'
exec su -s /bin/sh gpumesh -c 'exec gpumesh -d /var/lib/gpumesh daemon'`
	docker(t, "run", "-d", "--name", provider, "--network", network, image, "sh", "-c", script)
	var pst struct {
		PeerID   string `json:"peer_id"`
		Provider bool   `json:"provider"`
	}
	waitFor(t, 90*time.Second, "provider daemon up", func() (bool, string) {
		out, err := dockerErr("exec", provider, "gpumesh", "-d", "/var/lib/gpumesh", "status", "--json")
		return err == nil && json.Unmarshal([]byte(out), &pst) == nil && pst.Provider, out
	})
	// Installed as the service user, privately; the rerun changed nothing.
	if out := docker(t, "exec", provider, "stat", "-c", "%U %a", "/var/lib/gpumesh", "/var/lib/gpumesh/config.yaml", "/var/lib/gpumesh/identity.key"); out != "gpumesh 700\ngpumesh 600\ngpumesh 600" {
		t.Errorf("data dir ownership and modes:\n%s", out)
	}
	if out := docker(t, "exec", provider, "cat", "/tmp/second-install.log"); strings.Contains(out, "installed") || strings.Contains(out, "created") {
		t.Errorf("second install.sh run changed things:\n%s", out)
	}
	// The daemon runs as the service user, not root.
	ps := docker(t, "exec", provider, "ps", "-o", "user,args")
	asUser := false
	for _, line := range strings.Split(ps, "\n") {
		f := strings.Fields(line)
		asUser = asUser || (len(f) >= 4 && f[0] == "gpumesh" && f[1] == "gpumesh" && strings.Join(f[2:], " ") == "-d /var/lib/gpumesh daemon")
	}
	if !asUser {
		t.Errorf("no daemon running as gpumesh:\n%s", ps)
	}

	waitFor(t, 90*time.Second, "renter discovers the provider", func() (bool, string) {
		out, err := dockerErr("exec", renter, "/dist/gpumesh", "-d", "/data", "providers", "--gpu", "RTX 4090", "--json")
		return err == nil && strings.Contains(out, pst.PeerID), out
	})
	// The provider hears calls on its topics once the gossip mesh formed;
	// a post before that is unplaceable, so retry a few times.
	var view struct {
		State string `json:"state"`
		Lease *struct {
			Provider string `json:"provider"`
		} `json:"lease"`
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	waitFor(t, 90*time.Second, "a job leased from the provider", func() (bool, string) {
		out, _ := dockerErr("exec", renter, "/dist/gpumesh", "-d", "/data", "job", "post", "--json",
			"--max-price", "1", "--duration", "1m", "--gpu", "RTX 4090", "--bid-window", "3s", "--", "sh", "-c", "echo hello from the provider")
		ok := json.Unmarshal([]byte(out), &view) == nil && view.Lease != nil && view.Lease.Provider == pst.PeerID &&
			(view.State == "leased" || view.State == "finished")
		return ok, out
	})
	// Report how the job ended (the lease is the acceptance criterion).
	var final string
	waitFor(t, 60*time.Second, "the job finished", func() (bool, string) {
		out, _ := dockerErr("exec", renter, "/dist/gpumesh", "-d", "/data", "job", "status", "--json", view.Job.ID)
		final = out
		return strings.Contains(out, `"state": "finished"`), out
	})
	if !strings.Contains(final, `"run": "succeeded"`) {
		t.Errorf("the job did not succeed:\n%s", final)
	}
}

// TestDockerfile builds the Dockerfile without a registry: both stages'
// bases are a locally imported busybox rootfs and the context carries a
// prebuilt binary at dist/gpumesh, which the build stage installs instead of
// compiling (the compile branch needs the golang image from a registry and
// is not exercised here). The image's entrypoint is the daemon's CLI.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	dockerOrSkip(t)
	run := runID(t)
	base := "gpumesh-deploy-base:" + run
	importRootfs(t, base)
	ctxDir := t.TempDir()
	copyFile(t, "Dockerfile", filepath.Join(ctxDir, "Dockerfile"), 0o644)
	copyFile(t, gpumeshBin, filepath.Join(ctxDir, "dist", "gpumesh"), 0o755)
	image := "gpumesh-deploy-image:" + run
	t.Cleanup(func() { _, _ = dockerErr("image", "rm", "-f", image) })
	docker(t, "build", "-q", "--build-arg", "GO_IMAGE="+base, "--build-arg", "BASE_IMAGE="+base, "-t", image, ctxDir)
	if out := docker(t, "run", "--rm", image, "--version"); !strings.HasPrefix(out, "gpumesh version") {
		t.Fatalf("gpumesh --version in the image: %q", out)
	}
	// The default command runs the daemon on /data: it comes up as a
	// renter. A second container of the image joins it on a private
	// network, as a testnet node would.
	network := "gpumesh-deploy-image-" + run
	name, peer := network+"-a", network+"-b"
	t.Cleanup(func() {
		_, _ = dockerErr("rm", "-f", name, peer)
		_, _ = dockerErr("network", "rm", network)
	})
	docker(t, "network", "create", "--internal", network)
	docker(t, "run", "-d", "--name", name, "--network", network, image)
	var st struct {
		PeerID string `json:"peer_id"`
		Peers  int    `json:"peers"`
	}
	waitFor(t, 60*time.Second, "the image's daemon answers", func() (bool, string) {
		out, err := dockerErr("exec", name, "gpumesh", "-d", "/data", "status", "--json")
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.PeerID != "", out
	})
	first := st.PeerID
	ip := docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
	docker(t, "run", "-d", "--name", peer, "--network", network, image,
		"-d", "/data", "daemon", "--listen", "/ip4/0.0.0.0/tcp/4001", "--bootstrap", fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", ip, first))
	waitFor(t, 60*time.Second, "the second container joins the first", func() (bool, string) {
		out, err := dockerErr("exec", peer, "gpumesh", "-d", "/data", "peers", "--json")
		return err == nil && strings.Contains(out, first), out
	})
}
