package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// TraceJob is one row of a GPU-cluster job trace: a job on Nodes machines
// with GPUs whole GPUs each, or on a Fraction of one GPU.
type TraceJob struct {
	ID string `json:"id"`
	// Submit and Duration are in seconds; Submit is relative to the start of
	// the trace.
	Submit   int64 `json:"submit"`
	Duration int64 `json:"duration"`
	// GPUs is the whole GPUs on each of the job's machines (1 for a
	// fractional job).
	GPUs int `json:"gpus"`
	// Fraction, when above 0, is the share of one GPU the job asks for
	// (below 1; GPUs and Nodes are then 1).
	Fraction float64 `json:"fraction,omitempty"`
	// Nodes is how many machines the job spans at once, each with GPUs
	// (0 counts as 1).
	Nodes int `json:"nodes,omitempty"`
}

// nodes is the job's machine count, at least 1.
func (t TraceJob) nodes() int { return max(1, t.Nodes) }

// askedGPUs is how many GPUs the job asks for in all: Nodes × GPUs, or its
// fraction of one.
func (t TraceJob) askedGPUs() float64 {
	if t.Fraction > 0 {
		return t.Fraction
	}
	return float64(t.nodes() * t.GPUs)
}

// Trace formats ReadTrace reads, told apart by their header.
var (
	// traceColumns is the bundled format (the ITP / ElasticFlow traces),
	// with an optional fifth column num_nodes.
	traceColumns = []string{"job_id", "submission_time", "duration", "num_gpu"}
	nodesColumn  = "num_nodes"
	// alibabaColumns are the columns of Alibaba's cluster-trace-gpu-v2023
	// pod lists (openb_pod_list_*.csv) the replay reads; the file has
	// others, in any order.
	alibabaColumns = []string{"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"}
)

// MachineGPUs is how many GPUs one machine of the ITP clusters holds: a
// row of the bundled format without num_nodes that asks for more, in a
// multiple of it, spans num_gpu/MachineGPUs machines of MachineGPUs GPUs
// (the traces' 16-, 32- and 64-GPU jobs ran on 2, 4 and 8 machines).
const MachineGPUs = 8

// ReadTrace reads a job trace in one of two CSV formats, told apart by the
// header:
//
//   - the bundled format (the ITP / ElasticFlow traces):
//     "job_id,submission_time,duration,num_gpu[,num_nodes]", times in
//     seconds from the start of the trace. num_gpu is whole GPUs (1 or
//     more) or a fraction of one GPU (0 < num_gpu < 1, e.g. 0.25); with
//     num_nodes it is per machine and the job spans num_nodes machines at
//     once (a fraction only on one machine); without, a num_gpu above
//     MachineGPUs and a multiple of it spans num_gpu/MachineGPUs machines.
//   - Alibaba's cluster-trace-gpu-v2023 pod lists (header
//     "name,cpu_milli,memory_mib,num_gpu,gpu_milli,...,creation_time,
//     deletion_time,scheduled_time"): a pod with num_gpu 1 and gpu_milli
//     below 1000 asks for gpu_milli/1000 of one GPU; it is submitted at
//     creation_time and runs from scheduled_time (creation_time when it
//     was never scheduled: it was wanted for that long) to deletion_time.
//     Pods without GPUs (num_gpu 0) and pods deleted the second they were
//     scheduled are not GPU work and are left out (ReadTrace counts them).
//
// Every malformed row is an error that names its line; no other row is
// skipped. Rows need not be sorted. It returns the jobs and how many rows
// it left out as no GPU work (only the Alibaba format has such rows).
func ReadTrace(r io.Reader) (jobs []TraceJob, skipped int, err error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, 0, errors.New("trace: empty input, want header " + strings.Join(traceColumns, ","))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("trace: line 1: %w", err)
	}
	for i := range head {
		head[i] = strings.TrimSpace(strings.TrimPrefix(head[i], "\ufeff"))
	}
	var row func(rec []string, line int) (TraceJob, bool, error)
	if col := alibabaIndex(head); col != nil {
		row = func(rec []string, line int) (TraceJob, bool, error) { return alibabaRow(rec, col) }
	} else {
		withNodes, err := bundledHeader(head)
		if err != nil {
			return nil, 0, err
		}
		row = func(rec []string, line int) (TraceJob, bool, error) { return bundledRow(rec, withNodes) }
	}
	width := len(head)
	seen := make(map[string]int)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, 0, fmt.Errorf("trace: %w", err)
		}
		if len(rec) != width {
			return nil, 0, fmt.Errorf("trace: line %d: %d fields, want %d", line, len(rec), width)
		}
		j, keep, err := row(rec, line)
		if err != nil {
			return nil, 0, fmt.Errorf("trace: line %d: %w", line, err)
		}
		if !keep {
			skipped++
			continue
		}
		if j.ID == "" {
			return nil, 0, fmt.Errorf("trace: line %d: empty job id", line)
		}
		if prev, dup := seen[j.ID]; dup {
			return nil, 0, fmt.Errorf("trace: line %d: duplicate job id %q (first on line %d)", line, j.ID, prev)
		}
		seen[j.ID] = line
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, skipped, errors.New("trace: no GPU jobs after the header")
	}
	return jobs, skipped, nil
}

// bundledHeader checks the bundled format's header and says whether it has
// the num_nodes column.
func bundledHeader(head []string) (bool, error) {
	want := strings.Join(traceColumns, ",") + "[," + nodesColumn + "]"
	if len(head) != len(traceColumns) && len(head) != len(traceColumns)+1 {
		return false, fmt.Errorf("trace: line 1: header has %d columns, want %s (or Alibaba's cluster-trace-gpu-v2023 pod list)", len(head), want)
	}
	for i, c := range traceColumns {
		if head[i] != c {
			return false, fmt.Errorf("trace: line 1: column %d is %q, want %q (header %s)", i+1, head[i], c, want)
		}
	}
	if len(head) > len(traceColumns) && head[len(traceColumns)] != nodesColumn {
		return false, fmt.Errorf("trace: line 1: column %d is %q, want %q", len(head), head[len(traceColumns)], nodesColumn)
	}
	return len(head) > len(traceColumns), nil
}

// bundledRow parses a row of the bundled format.
func bundledRow(rec []string, withNodes bool) (TraceJob, bool, error) {
	j := TraceJob{ID: strings.TrimSpace(rec[0]), Nodes: 1}
	var err error
	if j.Submit, err = parseSeconds(rec[1]); err != nil {
		return j, false, fmt.Errorf("submission_time: %w", err)
	}
	if j.Duration, err = parseSeconds(rec[2]); err != nil {
		return j, false, fmt.Errorf("duration: %w", err)
	}
	if j.Duration == 0 {
		return j, false, errors.New("duration: must be positive")
	}
	s := strings.TrimSpace(rec[3])
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > maxTraceGPUs {
			return j, false, fmt.Errorf("num_gpu: %d out of range 1..%d", n, maxTraceGPUs)
		}
		j.GPUs = n
	} else if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1 {
		j.GPUs, j.Fraction = 1, f
	} else {
		return j, false, fmt.Errorf("num_gpu: %q is neither whole GPUs (1 or more) nor a fraction of one (between 0 and 1)", rec[3])
	}
	if withNodes {
		n, err := strconv.Atoi(strings.TrimSpace(rec[4]))
		if err != nil || n < 1 || n > maxTraceGPUs {
			return j, false, fmt.Errorf("num_nodes: %q is not a machine count in 1..%d", rec[4], maxTraceGPUs)
		}
		if n > 1 && j.Fraction > 0 {
			return j, false, fmt.Errorf("num_nodes: %d machines with a fraction of a GPU (%v): a fraction is of one GPU on one machine", n, j.Fraction)
		}
		j.Nodes = n
	} else if j.GPUs > MachineGPUs && j.GPUs%MachineGPUs == 0 {
		j.Nodes, j.GPUs = j.GPUs/MachineGPUs, MachineGPUs
	}
	if j.Nodes*j.GPUs > maxTraceGPUs {
		return j, false, fmt.Errorf("num_nodes × num_gpu: %d GPUs out of range 1..%d", j.Nodes*j.GPUs, maxTraceGPUs)
	}
	return j, true, nil
}

// alibabaIndex maps the Alibaba pod list's columns the replay reads to
// their positions, or returns nil when head is not such a header.
func alibabaIndex(head []string) map[string]int {
	idx := map[string]int{}
	for i, c := range head {
		idx[c] = i
	}
	for _, c := range alibabaColumns {
		if _, ok := idx[c]; !ok {
			return nil
		}
	}
	return idx
}

// alibabaRow parses a row of an Alibaba cluster-trace-gpu-v2023 pod list;
// it reports false for a row that is no GPU work.
func alibabaRow(rec []string, col map[string]int) (TraceJob, bool, error) {
	f := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
	j := TraceJob{ID: f("name"), Nodes: 1}
	n, err := strconv.Atoi(f("num_gpu"))
	if err != nil || n < 0 || n > maxTraceGPUs {
		return j, false, fmt.Errorf("num_gpu: %q is not a GPU count in 0..%d", f("num_gpu"), maxTraceGPUs)
	}
	milli, err := strconv.Atoi(f("gpu_milli"))
	if err != nil || milli < 0 || milli > 1000 {
		return j, false, fmt.Errorf("gpu_milli: %q is not in 0..1000", f("gpu_milli"))
	}
	created, err := parseSeconds(f("creation_time"))
	if err != nil {
		return j, false, fmt.Errorf("creation_time: %w", err)
	}
	deleted, err := parseSeconds(f("deletion_time"))
	if err != nil {
		return j, false, fmt.Errorf("deletion_time: %w", err)
	}
	from := created
	if s := f("scheduled_time"); s != "" {
		if from, err = parseSeconds(s); err != nil {
			return j, false, fmt.Errorf("scheduled_time: %w", err)
		}
		if from < created {
			return j, false, fmt.Errorf("scheduled_time: %d before creation_time %d", from, created)
		}
	}
	if deleted < from {
		return j, false, fmt.Errorf("deletion_time: %d before the pod started (%d)", deleted, from)
	}
	if n == 0 || deleted == from {
		return j, false, nil // no GPU, or no time on one: not GPU work
	}
	j.Submit, j.Duration, j.GPUs = created, deleted-from, n
	if n == 1 && milli < 1000 {
		if milli == 0 {
			return j, false, errors.New("gpu_milli: 0 with num_gpu 1 (a GPU pod asks for some of its GPU)")
		}
		j.Fraction = float64(milli) / 1000
	}
	return j, true, nil
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
		if ferr != nil || math.IsNaN(f) {
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

// readTraceFile reads a trace file with ReadTrace; errors name the file.
func readTraceFile(path string) ([]TraceJob, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	jobs, skipped, err := ReadTrace(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, skipped, nil
}
