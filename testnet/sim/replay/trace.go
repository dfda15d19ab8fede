package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// TraceJob is one row of a GPU-cluster job trace.
type TraceJob struct {
	ID string `json:"id"`
	// Submit and Duration are in seconds; Submit is relative to the start of
	// the trace.
	Submit   int64 `json:"submit"`
	Duration int64 `json:"duration"`
	GPUs     int   `json:"gpus"`
}

// traceColumns is the header every trace must carry, in this order.
var traceColumns = []string{"job_id", "submission_time", "duration", "num_gpu"}

// LoadTrace reads a job trace in the ITP / ElasticFlow CSV format: a header
// "job_id,submission_time,duration,num_gpu" followed by one job per row, times
// in seconds from the start of the trace. Every malformed row is an error that
// names its line; no row is skipped silently. Rows need not be sorted.
func LoadTrace(r io.Reader) ([]TraceJob, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("trace: empty input, want header " + strings.Join(traceColumns, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("trace: line 1: %w", err)
	}
	if len(head) != len(traceColumns) {
		return nil, fmt.Errorf("trace: line 1: header has %d columns, want %s", len(head), strings.Join(traceColumns, ","))
	}
	for i, c := range traceColumns {
		if strings.TrimSpace(strings.TrimPrefix(head[i], "\ufeff")) != c {
			return nil, fmt.Errorf("trace: line 1: column %d is %q, want %q", i+1, head[i], c)
		}
	}
	var jobs []TraceJob
	seen := make(map[string]int)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if len(rec) != len(traceColumns) {
			return nil, fmt.Errorf("trace: line %d: %d fields, want %d", line, len(rec), len(traceColumns))
		}
		j := TraceJob{ID: strings.TrimSpace(rec[0])}
		if j.ID == "" {
			return nil, fmt.Errorf("trace: line %d: empty job_id", line)
		}
		if prev, dup := seen[j.ID]; dup {
			return nil, fmt.Errorf("trace: line %d: duplicate job_id %q (first on line %d)", line, j.ID, prev)
		}
		seen[j.ID] = line
		if j.Submit, err = parseSeconds(rec[1]); err != nil {
			return nil, fmt.Errorf("trace: line %d: submission_time: %w", line, err)
		}
		if j.Duration, err = parseSeconds(rec[2]); err != nil {
			return nil, fmt.Errorf("trace: line %d: duration: %w", line, err)
		}
		if j.Duration == 0 {
			return nil, fmt.Errorf("trace: line %d: duration: must be positive", line)
		}
		n, err := strconv.Atoi(strings.TrimSpace(rec[3]))
		if err != nil {
			return nil, fmt.Errorf("trace: line %d: num_gpu: %q is not an integer", line, rec[3])
		}
		if n < 1 || n > maxTraceGPUs {
			return nil, fmt.Errorf("trace: line %d: num_gpu: %d out of range 1..%d", line, n, maxTraceGPUs)
		}
		j.GPUs = n
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, errors.New("trace: no jobs after the header")
	}
	return jobs, nil
}

// maxTraceGPUs bounds num_gpu so that a corrupt row cannot ask for absurd
// allocations.
const maxTraceGPUs = 4096

// maxTraceSeconds bounds times to ~100 years so that sums cannot overflow.
const maxTraceSeconds = 100 * 365 * 86400

func parseSeconds(s string) (int64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != f {
			return 0, fmt.Errorf("%q is not a number of seconds", s)
		}
		if f < 0 || f > maxTraceSeconds {
			return 0, fmt.Errorf("%s out of range 0..%d", s, maxTraceSeconds)
		}
		return int64(f + 0.5), nil
	}
	if v < 0 || v > maxTraceSeconds {
		return 0, fmt.Errorf("%d out of range 0..%d", v, maxTraceSeconds)
	}
	return v, nil
}

// LoadTraceFile reads a trace file with LoadTrace; errors name the file.
func LoadTraceFile(path string) ([]TraceJob, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	jobs, err := LoadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}
