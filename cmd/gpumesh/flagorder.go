package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst reorders a command line (program name first) so that flags
// may be given anywhere, as with docker or kubectl: urfave/cli v2 stops
// reading a command's flags at its first positional argument, so
// `gpumesh job status ID --json` would see "--json" as a second argument.
//
// It resolves the command path (app, command, subcommand...) and moves
// every flag token, with its value when the flag takes one (known from the
// command's flag definitions), before the positional arguments of the
// command that defines it: a command's own flags first, then those of its
// parents (so `gpumesh job list -d DIR` works too). `--` ends the flags:
// it and everything after it stay in place, after the positionals before
// it, so `job post ... -- python3 train.py --lr 3` hands `--lr 3` to the
// job. A flag that needs a value but ends the flags ends the line, after
// its command, so the parser says it needs one. A flag no command on the path defines stays with the command it
// was given to, so the parser reports it as before. The line is left as
// it is when it asks for shell completion, and from a command that parses
// no flags or an argument that names no subcommand on.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 || args[len(args)-1] == "--generate-bash-completion" {
		return args
	}
	type level struct {
		name  string // the command's name as given; "" for the app
		flags []cli.Flag
		subs  []*cli.Command
		moved []string // flag tokens, in their given order
	}
	appFlags := append([]cli.Flag{}, app.Flags...)
	levels := []*level{{flags: appFlags, subs: app.Commands}}
	var positionals, tail []string
	rest := args[1:]

	// lookup finds the level defining flag name, the innermost first.
	lookup := func(name string) (int, cli.Flag) {
		for i := len(levels) - 1; i >= 0; i-- {
			for _, f := range levels[i].flags {
				for _, n := range f.Names() {
					if n == name {
						return i, f
					}
				}
			}
		}
		return len(levels) - 1, nil
	}

scan:
	for i := 0; i < len(rest); i++ {
		tok := rest[i]
		cur := levels[len(levels)-1]
		switch {
		case tok == "--":
			tail = rest[i:]
			break scan
		case len(tok) > 1 && tok[0] == '-':
			name, _, hasValue := strings.Cut(strings.TrimLeft(tok, "-"), "=")
			at, f := lookup(name)
			if !hasValue && takesValue(f) && (i+1 == len(rest) || rest[i+1] == "--") {
				// No value: end the line with it, so the parser says
				// the flag needs one rather than taking an argument.
				levels = levels[:at+1]
				levels[at].moved = append(levels[at].moved, tok)
				positionals, tail = nil, nil
				break scan
			}
			levels[at].moved = append(levels[at].moved, tok)
			if !hasValue && takesValue(f) {
				i++
				levels[at].moved = append(levels[at].moved, rest[i])
			}
		case len(positionals) == 0 && len(cur.subs) > 0:
			sub := findCommand(cur.subs, tok)
			if sub == nil {
				// Not a subcommand (an unknown command, or `help`):
				// leave the rest as given.
				tail = rest[i:]
				break scan
			}
			if sub.SkipFlagParsing {
				levels = append(levels, &level{name: tok})
				tail = rest[i+1:]
				break scan
			}
			levels = append(levels, &level{name: tok, flags: sub.Flags, subs: sub.Subcommands})
		default:
			positionals = append(positionals, tok)
		}
	}

	out := []string{args[0]}
	for i, l := range levels {
		if i > 0 {
			out = append(out, l.name)
		}
		out = append(out, l.moved...)
	}
	out = append(out, positionals...)
	return append(out, tail...)
}

// takesValue reports whether flag f reads the next token as its value;
// flags nobody defines (and the implicit --help and --version) are taken
// as switches.
func takesValue(f cli.Flag) bool {
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.TakesValue()
	}
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
