package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

// invocation is what a stubbed command's action saw.
type invocation struct {
	path string            // e.g. "job status"
	args []string          // positional arguments
	set  map[string]string // flags set (by name) and their values
}

// stubbedApp is the CLI with every action replaced by one recording what
// it was called with, so command lines are checked against the real
// command and flag tables without a daemon.
func stubbedApp(got *[]invocation) *cli.App {
	var unknown bool
	app := newApp(io.Discard, io.Discard, &unknown)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			path := strings.TrimSpace(prefix + " " + cmd.Name)
			if cmd.Action != nil {
				cmd.Action = func(c *cli.Context) error {
					inv := invocation{path: path, args: c.Args().Slice(), set: map[string]string{}}
					for _, cc := range c.Lineage() {
						var flags []cli.Flag
						if cc.Command != nil {
							flags = cc.Command.Flags
						} else if cc.App != nil {
							flags = cc.App.Flags
						}
						for _, f := range flags {
							n := f.Names()[0]
							if cc.IsSet(n) {
								if _, dup := inv.set[n]; !dup {
									inv.set[n] = cc.String(n)
								}
							}
						}
					}
					*got = append(*got, inv)
					return nil
				}
			}
			walk(path, cmd.Subcommands)
		}
	}
	walk("", app.Commands)
	return app
}

// runStubbed parses args (without the program name) as run does and
// returns the one invocation it made.
func runStubbed(t *testing.T, args ...string) invocation {
	t.Helper()
	var got []invocation
	app := stubbedApp(&got)
	if err := app.Run(flagsFirst(app, append([]string{"gpumesh"}, args...))); err != nil {
		t.Fatalf("gpumesh %s: %v", strings.Join(args, " "), err)
	}
	if len(got) != 1 {
		t.Fatalf("gpumesh %s: %d actions ran, want 1", strings.Join(args, " "), len(got))
	}
	return got[0]
}

// leafCommands lists every command with an action, by path.
func leafCommands() map[string]*cli.Command {
	var unknown bool
	app := newApp(io.Discard, io.Discard, &unknown)
	out := map[string]*cli.Command{}
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			if cmd.Hidden {
				continue // the daemon's own helpers (gpu-scrub), not commands for people
			}
			path := append(append([]string{}, prefix...), cmd.Name)
			if cmd.Action != nil {
				out[strings.Join(path, " ")] = cmd
			}
			walk(path, cmd.Subcommands)
		}
	}
	walk(nil, app.Commands)
	return out
}

// sampleValue is a valid value for flag f, or "" for a switch.
func sampleValue(f cli.Flag) string {
	switch f.(type) {
	case *cli.BoolFlag:
		return ""
	case *cli.IntFlag, *cli.Uint64Flag, *cli.Int64Flag, *cli.UintFlag:
		return "7"
	case *cli.Float64Flag:
		return "1.5"
	case *cli.DurationFlag:
		return "90s"
	case *cli.GenericFlag:
		return "K=v"
	}
	return "val-ue"
}

func flagTokens(f cli.Flag) []string {
	name := f.Names()[0]
	dash := "--"
	if len(name) == 1 {
		dash = "-"
	}
	if v := sampleValue(f); v != "" {
		return []string{dash + name, v}
	}
	return []string{dash + name}
}

// TestFlagsAnywhereEveryCommand: every flag of every command means the
// same after the command's arguments as before them.
func TestFlagsAnywhereEveryCommand(t *testing.T) {
	checked := 0
	for path, cmd := range leafCommands() {
		for _, f := range cmd.Flags {
			name := f.Names()[0]
			words := strings.Fields(path)
			before := append(append(append([]string{}, words...), flagTokens(f)...), "ARG1", "ARG2")
			after := append(append(append([]string{}, words...), "ARG1", "ARG2"), flagTokens(f)...)
			between := append(append(append(append([]string{}, words...), "ARG1"), flagTokens(f)...), "ARG2")
			want := runStubbed(t, before...)
			if want.path != path || !reflect.DeepEqual(want.args, []string{"ARG1", "ARG2"}) || want.set[name] == "" && sampleValue(f) != "" {
				t.Fatalf("gpumesh %s: ran %q with args %q, flags %v", strings.Join(before, " "), want.path, want.args, want.set)
			}
			if _, ok := want.set[name]; !ok {
				t.Fatalf("gpumesh %s: --%s not set", strings.Join(before, " "), name)
			}
			for _, args := range [][]string{after, between} {
				if got := runStubbed(t, args...); !reflect.DeepEqual(got, want) {
					t.Errorf("gpumesh %s\n got %+v\nwant %+v (as gpumesh %s)", strings.Join(args, " "), got, want, strings.Join(before, " "))
				}
			}
			checked++
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d flags", checked)
	}
}

func TestFlagsAnywhere(t *testing.T) {
	cases := []struct {
		args []string
		want invocation
	}{
		{[]string{"job", "status", "j1", "--json"}, invocation{"job status", []string{"j1"}, map[string]string{"json": "true"}}},
		{[]string{"artifact", "add", "data", "--json", "--public"}, invocation{"artifact add", []string{"data"}, map[string]string{"json": "true", "public": "true"}}},
		{[]string{"job", "logs", "j1", "-f"}, invocation{"job logs", []string{"j1"}, map[string]string{"follow": "true"}}},
		{[]string{"job", "fetch", "j1", "--max-size", "1GiB", "out", "--force"}, invocation{"job fetch", []string{"j1", "out"}, map[string]string{"max-size": "1GiB", "force": "true"}}},
		// Global flags after the command.
		{[]string{"job", "list", "-d", "/tmp/x", "--json"}, invocation{"job list", []string{}, map[string]string{"data-dir": "/tmp/x", "json": "true"}}},
		{[]string{"status", "--data-dir=/tmp/y"}, invocation{"status", []string{}, map[string]string{"data-dir": "/tmp/y"}}},
		// A value that looks like a flag is the flag's value.
		{[]string{"ledger", "list", "--limit", "-1"}, invocation{"ledger list", []string{}, map[string]string{"limit": "-1"}}},
		// -- ends the flags: what follows belongs to the job.
		{[]string{"job", "post", "--max-price", "1", "--", "python3", "train.py", "--lr", "3", "--json"},
			invocation{"job post", []string{"python3", "train.py", "--lr", "3", "--json"}, map[string]string{"max-price": "1"}}},
		{[]string{"job", "post", "--max-price", "1", "--", "python3", "--max-price", "5"},
			invocation{"job post", []string{"python3", "--max-price", "5"}, map[string]string{"max-price": "1"}}},
		{[]string{"serve", "post", "--port", "8000", "--", "python3", "serve.py", "--port", "9"},
			invocation{"serve post", []string{"python3", "serve.py", "--port", "9"}, map[string]string{"port": "8000"}}},
		{[]string{"ledger", "show", "3", "--json"}, invocation{"ledger show", []string{"3"}, map[string]string{"json": "true"}}},
		{[]string{"verify", "12D3KooWp", "--device", "0", "--json"}, invocation{"verify", []string{"12D3KooWp"}, map[string]string{"device": "0", "json": "true"}}},
		{[]string{"artifact", "share", "a1", "--json", "12D3KooWp"}, invocation{"artifact share", []string{"a1", "12D3KooWp"}, map[string]string{"json": "true"}}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			got := runStubbed(t, c.args...)
			if len(got.args) == 0 {
				got.args = []string{}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestFlagsAnywhereErrors: misuse still fails with one clear line.
func TestFlagsAnywhereErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		want string
		args []string
	}{
		{"flag provided but not defined: -frob", []string{"job", "status", "j1", "--frob"}},
		{`unexpected argument "b"`, []string{"job", "status", "a", "--json", "b"}},
		{"flag needs an argument: -max-size", []string{"job", "fetch", "j1", "out", "--max-size"}},
		{"flag needs an argument: -d", []string{"job", "status", "j1", "-d"}},
		{"unknown command", []string{"frob", "--json"}},
		{"invalid value", []string{"providers", "--count", "many"}},
		{"no command: put it after --", []string{"job", "post", "--max-price", "1", "--duration", "1h", "--"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			oneLineError(t, c.want, append([]string{"-d", dir}, c.args...)...)
		})
	}
}

// TestFlagsAnywhereAgainstFakeDaemon runs the command lines end
// to end: `job status ID --json` prints JSON, `artifact add PATH --json`
// too, and `job post ... -- python3 train.py --lr 3` posts the job's own
// flags as its command.
func TestFlagsAnywhereAgainstFakeDaemon(t *testing.T) {
	var posted terms.Job
	var added api.ArtifactAddRequest
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		replyJSON(w, 200, leasedView(r.PathValue("id"), terms.RunRunning))
	})
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req api.PostJobRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		posted = req.Job
		replyJSON(w, 200, leasedView("j-posted", terms.RunPending))
	})
	mux.HandleFunc("POST /v1/artifacts", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&added)
		replyJSON(w, 200, api.ArtifactInfo{ID: "art-1", Name: "data"})
	})
	dir := fakeDaemon(t, mux)

	code, out, errOut := runCLI(t, "job", "status", "j7", "--json", "-d", dir)
	var v api.JobView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Job.ID != "j7" {
		t.Fatalf("job status j7 --json: code %d\nout %s\nerr %s", code, out, errOut)
	}

	code, out, errOut = runCLI(t, "-d", dir, "artifact", "add", t.TempDir(), "--json", "--public")
	var in api.ArtifactInfo
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || in.ID != "art-1" || !added.Public {
		t.Fatalf("artifact add PATH --json --public: code %d, request %+v\nout %s\nerr %s", code, added, out, errOut)
	}

	code, out, errOut = runCLI(t, "-d", dir, "job", "post", "--max-price", "1.2", "--duration", "2h", "--json",
		"--", "python3", "train.py", "--lr", "3", "--json")
	if code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("job post: code %d\nout %s\nerr %s", code, out, errOut)
	}
	if want := []string{"python3", "train.py", "--lr", "3", "--json"}; !reflect.DeepEqual(posted.Run.Command, want) ||
		posted.MaxPrice != 1.2 || fmt.Sprint(posted.Duration) != "2h0m0s" {
		t.Fatalf("posted %+v, command %q", posted, posted.Run.Command)
	}
}
