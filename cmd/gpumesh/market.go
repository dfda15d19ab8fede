package main

import "github.com/urfave/cli/v2"

func marketCommands() []*cli.Command { return nil }
