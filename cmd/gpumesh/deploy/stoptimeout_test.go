package deploy

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/config"
	"gopkg.in/yaml.v3"
)

// closeRoom is what a stop timeout must leave past the longest drain, for
// the daemon to close its ledger and leave the DHT.
const closeRoom = 30 * time.Second

// TestStopTimeoutsOutlastTheDrain: systemd's TimeoutStopSec, the
// DaemonSet's terminationGracePeriodSeconds and the docker stop timeout
// the Dockerfile documents each give a daemon with the default
// provider.drain_grace the whole drain (node.MaxDrainTime) and room to
// close: shorter, they kill it half way through the drain they started
// (they were 30 s, 40 s and docker's 10 s against a 2m15s drain). The
// image stops the daemon with SIGTERM, the signal that drains.
func TestStopTimeoutsOutlastTheDrain(t *testing.T) {
	need := node.MaxDrainTime(config.DefaultDrainGrace) + closeRoom
	check := func(where string, got time.Duration) {
		t.Helper()
		if got < need {
			t.Errorf("%s gives the daemon %s to stop; its drain takes up to %s (default drain_grace %s), and closing %s more",
				where, got, node.MaxDrainTime(config.DefaultDrainGrace), config.DefaultDrainGrace, closeRoom)
		}
	}

	unit, err := os.ReadFile("gpumesh.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("gpumesh.service sets no TimeoutStopSec (systemd's default is 90 s)")
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatalf("gpumesh.service: TimeoutStopSec=%s: %v", m[1], err)
	}
	check("gpumesh.service (TimeoutStopSec)", d)
	if !bytes.Contains(unit, []byte("\nKillSignal=SIGTERM\n")) {
		t.Error("gpumesh.service does not stop the daemon with SIGTERM")
	}

	b, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds daemonSet
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	check("daemonset.yaml (terminationGracePeriodSeconds)", time.Duration(ds.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second)

	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^STOPSIGNAL SIGTERM$`).Match(df) {
		t.Error("the Dockerfile sets no STOPSIGNAL SIGTERM")
	}
	runs := regexp.MustCompile(`docker run [^\n]*--stop-timeout (\d+)`).FindAllSubmatch(df, -1)
	stops := regexp.MustCompile(`docker stop -t (\d+)`).FindAllSubmatch(df, -1)
	if len(runs) == 0 || len(stops) == 0 {
		t.Fatal("the Dockerfile does not say how long docker must give the daemon to stop (docker run --stop-timeout N, docker stop -t N): docker's default is 10 s")
	}
	for _, m := range append(runs, stops...) {
		n, _ := strconv.Atoi(string(m[1]))
		check("the Dockerfile's "+string(m[0]), time.Duration(n)*time.Second)
	}
}
