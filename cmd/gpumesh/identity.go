package main

import (
	"fmt"
	"time"

	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/node/identity"
	"github.com/urfave/cli/v2"
)

func identityCommand() *cli.Command {
	return &cli.Command{
		Name:  "identity",
		Usage: "this node's identity key",
		Subcommands: []*cli.Command{
			{
				Name: "rotate",
				Usage: "replace the identity key with a new one the old one hands over to (daemon stopped); " +
					"peers move the old identity's reputation to the new one",
				Flags:  []cli.Flag{jsonFlag()},
				Action: identityRotateAction,
			},
		},
	}
}

// rotation is what `identity rotate --json` prints.
type rotation struct {
	Old    string    `json:"old"`
	New    string    `json:"new"`
	Issued time.Time `json:"issued"`
	OldKey string    `json:"old_key"`
}

func identityRotateAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	dir := c.String("data-dir")
	rec, err := identity.Rotate(dir, time.Now())
	if err != nil {
		return err
	}
	r := rotation{Old: rec.Old, New: rec.New, Issued: rec.Issued, OldKey: config.Paths{Dir: dir}.KeyRetired(rec.Issued)}
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "old identity: %s\n", r.Old)
	fmt.Fprintf(w, "new identity: %s\n", r.New)
	fmt.Fprintf(w, "issued:       %s\n", fmtTime(r.Issued))
	fmt.Fprintf(w, "old key kept: %s\n", r.OldKey)
	fmt.Fprintln(w, "the ledger records the succession; start the daemon to publish it")
	return nil
}
