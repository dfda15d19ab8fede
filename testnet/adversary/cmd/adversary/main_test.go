package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/testnet/adversary"
)

// TestRunMalformed runs the command's malformed attack against a provider
// daemon by its multiaddr, as `adversary --target <addr> malformed` does.
func TestRunMalformed(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Region = "eu-west"
	cfg.Provider.Enabled = true
	cfg.Provider.GPUs = []terms.GPU{{Model: "H100", VRAMGB: 80}}
	cfg.Provider.GPUSource = "declared"
	cfg.Provider.Executor = "process"
	d, err := node.Start(context.Background(), node.Options{DataDir: t.TempDir(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, err := run(context.Background(), "malformed", d.Addrs()[0], nil, 30*time.Second, slog.New(slog.DiscardHandler), opts{region: "eu"})
	if err != nil {
		t.Fatalf("malformed attack: %v", err)
	}
	m := out.(map[string]any)
	frames := m["frames"].([]adversary.Outcome)
	if len(frames) != 7*len(adversary.Protocols) {
		t.Fatalf("%d frames sent, want %d", len(frames), 7*len(adversary.Protocols))
	}
	for _, o := range frames {
		if !o.Refused {
			t.Errorf("%s %s accepted: %s", o.Proto, o.Case, o.Answer)
		}
	}
	if _, err := run(context.Background(), "nonsense", d.Addrs()[0], nil, time.Second, slog.New(slog.DiscardHandler), opts{}); err == nil {
		t.Error("an unknown attack ran")
	}
}
