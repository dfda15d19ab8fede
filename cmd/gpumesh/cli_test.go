package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMarketCLIWithoutDaemon(t *testing.T) {
	dir := t.TempDir()
	cmds := [][]string{
		{"job", "post", "--max-price", "2", "--duration", "1h", "--", "true"},
		{"job", "status", "j1"},
		{"job", "list"},
		{"job", "cancel", "j1"},
		{"job", "logs", "j1"},
		{"job", "logs", "--follow", "j1"},
		{"job", "fetch", "j1", filepath.Join(dir, "out")},
		{"bids", "j1"},
		{"provider", "stats"},
		{"reputation", "12D3KooWabc"},
		{"counters"},
		{"ledger", "list", "--kind", "receipt", "--limit", "3"},
		{"ledger", "show", "1"},
		{"ledger", "verify"},
		{"ledger", "balances", "--json"},
		{"ledger", "export", "--csv"},
	}
	for _, args := range cmds {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			oneLineError(t, "daemon is not running", append([]string{"-d", dir}, args...)...)
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("job fetch created its destination without a daemon: %v", err)
	}
}

func TestMarketCLIArgErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		want string
		args []string
	}{
		{"missing job ID (usage: gpumesh job status ID)", []string{"job", "status"}},
		{`unexpected argument "b" (usage: gpumesh job status ID)`, []string{"job", "status", "a", "b"}},
		{"missing job ID (usage: gpumesh job cancel ID)", []string{"job", "cancel"}},
		{"missing job ID (usage: gpumesh job logs ID)", []string{"job", "logs", "--follow"}},
		{"missing job ID (usage: gpumesh job fetch ID DIR)", []string{"job", "fetch"}},
		{"missing DIR (usage: gpumesh job fetch ID DIR)", []string{"job", "fetch", "j1"}},
		{`unexpected argument "z"`, []string{"job", "fetch", "j1", "d", "z"}},
		{"missing job ID (usage: gpumesh bids ID)", []string{"bids"}},
		{"missing peer ID (usage: gpumesh reputation PEER)", []string{"reputation"}},
		{"missing ledger SEQ (usage: gpumesh ledger show SEQ)", []string{"ledger", "show"}},
		{`invalid ledger SEQ "abc": want a positive integer`, []string{"ledger", "show", "abc"}},
		{`invalid ledger SEQ "0"`, []string{"ledger", "show", "0"}},
		{"unexpected argument \"x\" (see `gpumesh job list --help`)", []string{"job", "list", "x"}},
		{`unexpected argument "x"`, []string{"ledger", "verify", "x"}},
		{`unexpected argument "x"`, []string{"provider", "stats", "x"}},
		{`unknown --kind "bogus" (receipt, payment_owed, payment_earned, preemption_credit, succession, dispute)`, []string{"ledger", "list", "--kind", "bogus"}},
		{"--limit must be >= 0", []string{"ledger", "list", "--limit", "-1"}},
		{"choose exactly one of --json or --csv", []string{"ledger", "export"}},
		{"choose exactly one of --json or --csv", []string{"ledger", "export", "--json", "--csv"}},
		{"invalid --max-price: must be a positive number, got 0", []string{"job", "post", "--max-price", "0", "--duration", "1h", "--", "x"}},
		{`unknown tier "platinum" (gold, silver, bronze)`, []string{"job", "post", "--tier", "platinum", "--max-price", "1", "--duration", "1h", "--", "x"}},
		{"no command: put it after --", []string{"job", "post", "--max-price", "1", "--duration", "1h"}},
		{"flag provided but not defined: -frob", []string{"job", "post", "--frob"}},
		{"invalid --count", []string{"job", "post", "--count", "many", "--max-price", "1", "--duration", "1h", "--", "x"}},
		{"invalid --nodes: must be in [1, 64], got 0", []string{"job", "post", "--nodes", "0", "--max-price", "1", "--duration", "1h", "--", "x"}},
		{"invalid --nodes: must be in [1, 64], got 65", []string{"job", "post", "--nodes", "65", "--max-price", "1", "--duration", "1h", "--", "x"}},
		{"invalid --nodes: a gang's members take whole GPUs", []string{"job", "post", "--nodes", "2", "--count", "0.5", "--max-price", "1", "--duration", "1h", "--", "x"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			oneLineError(t, c.want, append([]string{"-d", dir}, c.args...)...)
		})
	}
}

func TestSimCommandMounted(t *testing.T) {
	code, out, errOut := runCLI(t, "sim", "--help")
	if code != 0 || !strings.Contains(out, "replay") {
		t.Fatalf("gpumesh sim --help: code %d, out %q, err %q", code, out, errOut)
	}
}
