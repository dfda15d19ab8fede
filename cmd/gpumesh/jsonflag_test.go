package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestJSONEverywhere: every command that prints a listing or a status
// takes --json; only these print none or print raw data.
func TestJSONEverywhere(t *testing.T) {
	noJSON := map[string]string{
		"daemon":           "runs the daemon; logs only",
		"provider init":    "writes a config file, interactively",
		"job logs":         "prints the job's own output",
		"job exec":         "prints the command's own output",
		"job port-forward": "carries a port's bytes; prints only where it listens",
	}
	for path, cmd := range leafCommands() {
		has := false
		for _, f := range cmd.Flags {
			has = has || f.Names()[0] == "json"
		}
		if _, exempt := noJSON[path]; has == exempt {
			t.Errorf("gpumesh %s: --json defined %v, exempt %v", path, has, exempt)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	code, out, errOut := runCLI(t, "-d", t.TempDir(), "version", "--json")
	var v struct{ CLI, Daemon string }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.CLI == "" || v.Daemon != "" {
		t.Fatalf("version --json without a daemon: code %d, out %q, err %q", code, out, errOut)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, map[string]string{"version": "9.9.9"})
	})
	dir := fakeDaemon(t, mux)
	code, out, errOut = runCLI(t, "version", "--json", "-d", dir)
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Daemon != "9.9.9" {
		t.Fatalf("version --json: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "version", "-d", dir)
	if code != 0 || !strings.Contains(out, "daemon  9.9.9") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
}
