package ledger

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gpumesh/gpumesh/ledger/record"
)

// CSVHeader is the header row of ExportCSV; its columns are stable.
var CSVHeader = []string{
	"seq", "time", "kind", "direction", "amount", "counterparty",
	"lease_id", "job_id", "prev_hash", "hash", "data",
}

// ExportJSON writes the entries matching f to w as a JSON array, one compact
// entry per line, in seq order. Data is written byte for byte as stored, so
// each decoded entry's ComputeHash equals its Hash. It streams: the ledger
// is not held in memory.
func (db *DB) ExportJSON(w io.Writer, f record.Filter) error {
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString("["); err != nil {
		return fmt.Errorf("ledger: export json: %w", err)
	}
	first := true
	err := db.scan(f, func(e *record.Entry) error {
		b, err := encodeEntry(e)
		if err != nil {
			return err
		}
		sep := ",\n"
		if first {
			sep, first = "\n", false
		}
		bw.WriteString(sep)
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("ledger: export json: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !first {
		bw.WriteString("\n")
	}
	bw.WriteString("]\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("ledger: export json: %w", err)
	}
	return nil
}

// ExportCSV writes the entries matching f to w as CSV with the CSVHeader
// row, in seq order. Time is RFC 3339 with nanoseconds in UTC, amount is the
// shortest decimal that round-trips, data is the compact JSON evidence.
func (db *DB) ExportCSV(w io.Writer, f record.Filter) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return fmt.Errorf("ledger: export csv: %w", err)
	}
	err := db.scan(f, func(e *record.Entry) error {
		return cw.Write([]string{
			strconv.FormatUint(e.Seq, 10),
			e.Time.UTC().Format(time.RFC3339Nano),
			string(e.Kind),
			string(e.Direction),
			strconv.FormatFloat(e.Amount, 'f', -1, 64),
			e.Counterparty,
			e.LeaseID,
			e.JobID,
			e.PrevHash,
			e.Hash,
			string(e.Data),
		})
	})
	if err != nil {
		return err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("ledger: export csv: %w", err)
	}
	return nil
}
