package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// readmeCommands returns the command lines of the README's "Using it"
// block, where every line is a `gpumesh` command (see blockCommands).
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Using it\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Using it" section`)
	}
	s = s[i:]
	start := strings.Index(s, "\n```\n")
	end := strings.Index(s[start+5:], "\n```\n")
	if start < 0 || end < 0 {
		t.Fatal(`no code block in README's "Using it"`)
	}
	lines, bad := blockCommands(s[start+5 : start+5+end])
	if bad != "" {
		t.Fatalf("README Using it: line %q is not a gpumesh command", bad)
	}
	return lines
}

// blockCommands returns the `gpumesh` command lines of a code block, as
// written: continuations joined, comments dropped, "gpumesh " cut off. bad
// is the first line that is no gpumesh command (other blocks hold shell
// lines beside them: make, export...).
func blockCommands(block string) (lines []string, bad string) {
	cont := false
	for _, l := range strings.Split(block, "\n") {
		if c := strings.Index(l, "#"); c >= 0 {
			l = l[:c]
		}
		l = strings.TrimSpace(l)
		joined := strings.TrimSuffix(l, "\\")
		switch {
		case cont && lines != nil:
			lines[len(lines)-1] += " " + joined
		case strings.HasPrefix(l, "gpumesh "):
			lines = append(lines, strings.TrimPrefix(joined, "gpumesh "))
		case l != "" && !cont && bad == "":
			bad = l
		}
		cont = strings.HasSuffix(l, "\\") && (cont || strings.HasPrefix(l, "gpumesh "))
	}
	return lines, bad
}

// fence is a Markdown code block's opening line: its info string names
// the language.
var fence = regexp.MustCompile("(?m)^```([A-Za-z]*)\n")

// docCommands returns, per file, the `gpumesh` command lines of every
// command-line code block (no language, sh, bash, console, shell) of the
// README and docs/*.md: the quick starts' as much as the command
// reference's, so that no command shown anywhere escapes the check.
func docCommands(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for len(s) > 0 {
			m := fence.FindStringSubmatchIndex(s)
			if m == nil {
				break
			}
			lang := s[m[2]:m[3]]
			body := s[m[1]:]
			end := strings.Index(body, "\n```")
			if end < 0 {
				t.Fatalf("%s: a code block is not closed", f)
			}
			switch lang {
			case "", "sh", "bash", "console", "shell":
				lines, _ := blockCommands(body[:end])
				out[filepath.Base(f)] = append(out[filepath.Base(f)], lines...)
			}
			s = body[end+4:]
		}
	}
	return out
}

// shellFields splits s into words as a shell does: on blanks outside
// quotes, which are dropped ("RTX 4090:24" is one word).
func shellFields(s string) []string {
	var out []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// splitTop splits s on sep outside [brackets].
func splitTop(s string, sep byte) []string {
	var parts []string
	depth, from := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case sep:
			if depth == 0 {
				parts = append(parts, s[from:i])
				from = i + 1
			}
		}
	}
	return append(parts, s[from:])
}

var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// readmeInvocations expands one README line into command lines: each
// alternative (a|b) is one, relative to the first's command (`artifact ls
// | rm ID` is `artifact rm ID`); optional parts are included, with every
// alternative inside them; "..." is dropped, and a placeholder value of a
// numeric or duration flag is replaced by a valid one.
func readmeInvocations(t *testing.T, app *cli.App, line string) [][]string {
	t.Helper()
	var out [][]string
	var prevPath []string // the previous alternative's command path
	var prevFlags []string
	for _, alt := range splitTop(line, '|') {
		alt = strings.NewReplacer("[", " ", "]", " ", "...", " ").Replace(alt)
		var toks []string
		for _, tok := range shellFields(alt) {
			for _, p := range strings.Split(tok, "|") { // [--device UUID|INDEX], [--providers N | --provider PEER]
				if p != "" {
					toks = append(toks, p)
					break
				}
			}
		}
		if len(toks) == 0 {
			t.Fatalf("README: empty alternative in %q", line)
		}
		var args []string
		switch {
		case strings.HasPrefix(toks[0], "-"):
			// `export --json|--csv`: another flag of the previous command.
			args = append(append(append([]string{}, prevPath...), prevFlags...), toks...)
		case prevPath == nil:
			args = toks
		default:
			// A sibling of the previous command (`ledger list|show SEQ`),
			// else of one of its parents (`job status ID | job list`).
			for n := len(prevPath) - 1; n >= 0; n-- {
				if subcommands(app, prevPath[:n])[toks[0]] {
					args = append(append([]string{}, prevPath[:n]...), toks...)
					break
				}
			}
			if args == nil {
				t.Fatalf("README: %q in %q is no command of gpumesh %s", toks[0], line, strings.Join(prevPath, " "))
			}
		}
		args = fillPlaceholders(app, args)
		path := commandWords(app, args)
		if !strings.HasPrefix(toks[0], "-") {
			prevPath, prevFlags = path, nil
		}
		out = append(out, args)
	}
	return out
}

// subcommands names the subcommands of the command at path.
func subcommands(app *cli.App, path []string) map[string]bool {
	cmds := app.Commands
	for _, w := range path {
		c := findCommand(cmds, w)
		if c == nil {
			return nil
		}
		cmds = c.Subcommands
	}
	names := map[string]bool{}
	for _, c := range cmds {
		for _, n := range c.Names() {
			names[n] = true
		}
	}
	return names
}

// commandWords is the command path at the start of args.
func commandWords(app *cli.App, args []string) []string {
	var path []string
	cmds := app.Commands
	for _, a := range args {
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		path = append(path, a)
		cmds = c.Subcommands
	}
	return path
}

// fillPlaceholders replaces a placeholder (N, L) given to a numeric or
// duration flag of args' command by a valid value.
func fillPlaceholders(app *cli.App, args []string) []string {
	var flags []cli.Flag
	cmds := app.Commands
	for _, w := range commandWords(app, args) {
		c := findCommand(cmds, w)
		flags, cmds = c.Flags, c.Subcommands
	}
	out := append([]string{}, args...)
	for i := 0; i+1 < len(out); i++ {
		if !strings.HasPrefix(out[i], "-") || !placeholder.MatchString(out[i+1]) {
			continue
		}
		name := strings.TrimLeft(out[i], "-")
		for _, f := range flags {
			if f.Names()[0] != name {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Float64Flag, *cli.Uint64Flag:
				out[i+1] = "2"
			case *cli.DurationFlag:
				out[i+1] = "1m"
			}
		}
	}
	return out
}

// TestReadmeCommands parses every command line of the README's "Using
// it" against the CLI's command and flag tables (every action stubbed, so
// no daemon is needed): each names a command that exists and gives only
// flags it defines, with values of the right type.
func TestReadmeCommands(t *testing.T) {
	var unknown bool
	app := newApp(io.Discard, io.Discard, &unknown)
	lines := readmeCommands(t)
	if len(lines) < 20 {
		t.Fatalf("found only %d command lines in README's Using it: %q", len(lines), lines)
	}
	seen := map[string]bool{}
	for _, line := range lines {
		for _, args := range readmeInvocations(t, app, line) {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				inv := runStubbed(t, args...)
				if want := strings.Join(commandWords(app, args), " "); inv.path != want {
					t.Fatalf("ran gpumesh %s, want gpumesh %s", inv.path, want)
				}
				seen[inv.path] = true
			})
		}
	}
	// The README shows every command but the operator's own.
	for path := range leafCommands() {
		switch path {
		case "counters", "doctor", "provider init":
			continue
		}
		if !seen[path] {
			t.Errorf("README's Using it shows no `gpumesh %s`", path)
		}
	}
}

// TestDocsCommands parses, as TestReadmeCommands does, every gpumesh
// command line of every command-line code block of the README and
// docs/*.md (the quick starts, operating a node...).
func TestDocsCommands(t *testing.T) {
	var unknown bool
	app := newApp(io.Discard, io.Discard, &unknown)
	all := docCommands(t)
	if n := len(all["README.md"]); n < len(readmeCommands(t))+10 {
		t.Fatalf("found only %d command lines in README.md's code blocks", n)
	}
	for file, lines := range all {
		for _, line := range lines {
			for _, args := range readmeInvocations(t, app, line) {
				t.Run(file+": "+strings.Join(args, " "), func(t *testing.T) {
					inv := runStubbed(t, args...)
					if want := strings.Join(commandWords(app, args), " "); inv.path != want {
						t.Fatalf("ran gpumesh %s, want gpumesh %s", inv.path, want)
					}
				})
			}
		}
	}
}

// TestReadmeCommandsCatchMistakes: the README check fails for a command
// or flag the CLI does not have.
func TestReadmeCommandsCatchMistakes(t *testing.T) {
	var unknown bool
	app := newApp(io.Discard, io.Discard, &unknown)
	for _, line := range []string{"job frob ID", "job status ID --frob", "providers --count N --gpux H100"} {
		var got []invocation
		stub := stubbedApp(&got)
		err := stub.Run(flagsFirst(stub, append([]string{"gpumesh"}, readmeInvocations(t, app, line)[0]...)))
		if err == nil && len(got) == 1 {
			t.Errorf("README line %q parsed: %+v", line, got)
		}
	}
}
