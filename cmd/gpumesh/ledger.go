package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/gpumesh/gpumesh/ledger/record"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/urfave/cli/v2"
)

func ledgerFilterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "kind", Usage: "entry kind: " + record.KindNames()},
		&cli.StringFlag{Name: "counterparty", Usage: "counterparty peer ID"},
		&cli.StringFlag{Name: "lease", Usage: "lease ID"},
		&cli.IntFlag{Name: "limit", Usage: "at most this many entries (0 = all)"},
	}
}

// ledgerFilter turns the filter flags into the ledger filter of `ledger
// list` and `ledger export`.
func ledgerFilter(c *cli.Context) (record.Filter, error) {
	var f record.Filter
	if k := c.String("kind"); k != "" {
		if !record.KnownKind(record.Kind(k)) {
			return f, fmt.Errorf("unknown --kind %q (%s)", k, record.KindNames())
		}
		f.Kind = record.Kind(k)
	}
	f.Counterparty, f.LeaseID = c.String("counterparty"), c.String("lease")
	if f.Limit = c.Int("limit"); f.Limit < 0 {
		return f, fmt.Errorf("--limit must be >= 0, got %d", f.Limit)
	}
	return f, nil
}

func ledgerCommand() *cli.Command {
	return &cli.Command{
		Name:  "ledger",
		Usage: "the local tamper-evident ledger of receipts, payments and credits",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list ledger entries",
				Flags:  append(ledgerFilterFlags(), jsonFlag()),
				Action: ledgerListAction,
			},
			{
				Name:      "show",
				Usage:     "show one ledger entry",
				ArgsUsage: "SEQ",
				Flags:     []cli.Flag{jsonFlag()},
				Action:    ledgerShowAction,
			},
			{
				Name:   "verify",
				Usage:  "verify the whole hash chain; fails naming the first bad entry",
				Flags:  []cli.Flag{jsonFlag()},
				Action: ledgerVerifyAction,
			},
			{
				Name:   "balances",
				Usage:  "money position per counterparty",
				Flags:  []cli.Flag{jsonFlag()},
				Action: ledgerBalancesAction,
			},
			{
				Name:  "export",
				Usage: "export entries as JSON or CSV to stdout",
				Flags: append(ledgerFilterFlags(),
					&cli.BoolFlag{Name: "json", Usage: "export JSON"},
					&cli.BoolFlag{Name: "csv", Usage: "export CSV"}),
				Action: ledgerExportAction,
			},
		},
	}
}

func ledgerListAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	f, err := ledgerFilter(c)
	if err != nil {
		return err
	}
	es, err := client(c).Ledger(c.Context, f)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, es)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tDIRECTION\tAMOUNT\tCOUNTERPARTY\tLEASE\tJOB")
	for _, e := range es {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t$%.4f\t%s\t%s\t%s\n", e.Seq, fmtTime(e.Time), e.Kind, orDash(string(e.Direction)), e.Amount,
			orDash(e.Counterparty), orDash(e.LeaseID), orDash(e.JobID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "%d entry(ies)\n", len(es))
	return nil
}

func ledgerShowAction(c *cli.Context) error {
	s, err := jobArg(c, "ledger SEQ")
	if err != nil {
		return err
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return fmt.Errorf("invalid ledger SEQ %q: want a positive integer", s)
	}
	e, err := client(c).LedgerEntry(c.Context, seq)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, e)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "seq:          %d\n", e.Seq)
	fmt.Fprintf(w, "time:         %s\n", fmtTime(e.Time))
	fmt.Fprintf(w, "kind:         %s\n", e.Kind)
	fmt.Fprintf(w, "direction:    %s\n", orDash(string(e.Direction)))
	fmt.Fprintf(w, "amount:       $%.6f\n", e.Amount)
	fmt.Fprintf(w, "counterparty: %s\n", orDash(e.Counterparty))
	fmt.Fprintf(w, "lease:        %s\n", orDash(e.LeaseID))
	fmt.Fprintf(w, "job:          %s\n", orDash(e.JobID))
	fmt.Fprintf(w, "prev hash:    %s\n", e.PrevHash)
	fmt.Fprintf(w, "hash:         %s\n", e.Hash)
	if len(e.Data) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, e.Data, "              ", "  ") != nil {
			buf.Reset()
			buf.Write(e.Data)
		}
		fmt.Fprintf(w, "data:         %s\n", buf.String())
	}
	return nil
}

func ledgerVerifyAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	rep, err := client(c).LedgerVerify(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	fmt.Fprintf(c.App.Writer, "ledger ok: %d entries, head %s\n", rep.Entries, orDash(rep.HeadHash))
	return nil
}

func ledgerBalancesAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	bs, err := client(c).LedgerBalances(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, bs)
	}
	peers := make([]string, 0, len(bs))
	for p := range bs {
		peers = append(peers, p)
	}
	sort.Strings(peers)
	tw := tabwriter.NewWriter(c.App.Writer, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNTERPARTY\tOWED\tEARNED\tCREDITS\tNET")
	var total record.Balance
	for _, p := range peers {
		b := bs[p]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", orDash(p), usd(b.Owed), usd(b.Earned), usd(b.Credits), usd(b.Net))
		total.Owed += b.Owed
		total.Earned += b.Earned
		total.Credits += b.Credits
		total.Net += b.Net
	}
	if len(peers) > 1 {
		fmt.Fprintf(tw, "TOTAL\t%s\t%s\t%s\t%s\n", usd(total.Owed), usd(total.Earned), usd(total.Credits), usd(total.Net))
	}
	return tw.Flush()
}

func ledgerExportAction(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	if c.Bool("json") == c.Bool("csv") {
		return errors.New("choose exactly one of --json or --csv")
	}
	f, err := ledgerFilter(c)
	if err != nil {
		return err
	}
	format := api.ExportCSV
	if c.Bool("json") {
		format = api.ExportJSON
	}
	body, err := client(c).LedgerExport(c.Context, f, format)
	if err != nil {
		return err
	}
	defer body.Close()
	if _, err := io.Copy(c.App.Writer, body); err != nil {
		return fmt.Errorf("ledger export: %w", err)
	}
	return nil
}
