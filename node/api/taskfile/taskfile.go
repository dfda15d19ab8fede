// Package taskfile reads job files: the terms.Job-shaped YAML that
// `gpumesh job post --file` always took, and task files in the shape AI
// teams already write for SkyPilot-like launchers (name, resources with
// accelerators "H100:8", setup, run, envs, inputs, outputs, checkpoint and
// the market's SLA fields). It is the one place that turns either into an
// terms.Job: the CLI calls it directly, and the daemon calls it for the
// task text a client sends (POST /v1/jobs with "task", or
// /v1/tasks/convert), so the Python client and the CLI share the rule.
//
// A task file with a service: section (readiness_probe, replicas or
// replica_policy, as SkyServe has them, and resources.ports) is a service:
// ParseService and ConvertService turn it, or the api.ServiceSpec-shaped
// YAML of `gpumesh serve post --file`, into an api.ServiceSpec, for the CLI
// and for POST /v1/services with "task" alike.
//
// Errors name the file and the line of the field at fault
// ("train.yaml:7: resources.accelerators: count must be a whole number ≥ 1
// or a fraction of one GPU (0.125, 0.25 or 0.5), got "H100:0.3"").
package taskfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"gopkg.in/yaml.v3"
)

// MaxSize bounds a job or service file.
const MaxSize = 256 << 10

// File is a parsed job file.
type File struct {
	// Name is the file's name in messages.
	Name string
	// Task: the file is a task file (else it is terms.Job-shaped).
	Task bool
	// Job is what the file says, before defaults (a service's replica
	// job).
	Job terms.Job
	// Service is a service file's service, but its replica job (which is
	// Job; see ServiceSpec); nil for a job file.
	Service *api.ServiceSpec
	// Set holds the terms.Job yaml keys the file gave a value
	// ("max_price", "gpu_count", "run.command", ...), so that defaults and
	// command-line flags apply only to what it left out.
	Set map[string]bool
	// pos is where each terms.Job field came from.
	pos map[string]position
}

// position is the file key a job field came from and its line.
type position struct {
	key  string
	line int
}

// Parse reads a job file of either shape (see IsTask). now is the origin
// of a relative deadline ("deadline: 30m"). It checks the file's syntax and
// field types, not the job (see Convert).
func Parse(name string, b []byte, now time.Time) (*File, error) {
	root, err := parseRoot(name, b, "a job file is a mapping of fields (name:, resources:, run: ...)")
	if err != nil {
		return nil, err
	}
	f := &File{Name: name, Set: map[string]bool{}, pos: map[string]position{}}
	if isTask(root) {
		f.Task = true
		if err := f.parseTask(root, now, false); err != nil {
			return nil, err
		}
		return f, nil
	}
	if err := f.parseJob(b, root); err != nil {
		return nil, err
	}
	return f, nil
}

// parseRoot is a file's top mapping; notMapping says what it should be.
func parseRoot(name string, b []byte, notMapping string) (*yaml.Node, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%s: %d bytes; a job or service file holds at most %d", name, len(b), MaxSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", name, YAMLMessage(err))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		return nil, fmt.Errorf("%s is empty", name)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: %s, got %s", name, root.Line, notMapping, kindName(root))
	}
	return root, nil
}

// IsTask reports whether b looks like a task file rather than an
// terms.Job-shaped one: its run is a string (a shell script), or it has
// a field only task files have (resources, setup, envs, name, inputs,
// outputs, checkpoint, service).
func IsTask(b []byte) bool {
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	return isTask(doc.Content[0])
}

var taskOnly = []string{"resources", "setup", "envs", "name", "inputs", "outputs", "checkpoint", "service"}

func isTask(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i].Value, root.Content[i+1]
		if slices.Contains(taskOnly, k) || k == "run" && v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			return true
		}
	}
	return false
}

// parseJob decodes an terms.Job-shaped file, rejecting unknown fields.
func (f *File) parseJob(b []byte, root *yaml.Node) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f.Job); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %s", f.Name, YAMLMessage(err))
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		f.Set[k.Value] = true
		f.pos[k.Value] = position{k.Value, k.Line}
		if k.Value == "run" && v.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(v.Content); j += 2 {
				rk := "run." + v.Content[j].Value
				f.Set[rk] = true
				f.pos[rk] = position{rk, v.Content[j].Line}
			}
		}
	}
	return nil
}

// Defaults fills what the file left out as `gpumesh job post` does: tier
// silver, one GPU, preemptible for bronze only; for a service, as `gpumesh
// serve post` does: tier gold, one GPU a replica, one replica.
func (f *File) Defaults() {
	if f.Service != nil {
		if !f.Set["tier"] {
			f.Job.Tier = terms.Gold
		}
		if !f.Set["gpu_count"] {
			f.Job.GPUCount = 1
		}
		if f.Service.Replicas == 0 && len(f.Service.Regions) == 0 {
			f.Service.Replicas = 1 // with regions the daemon's: regions × per region
		}
		return
	}
	if !f.Set["tier"] {
		f.Job.Tier = terms.Silver
	}
	if !f.Set["gpu_count"] {
		f.Job.GPUCount = 1
	}
	if !f.Set["preemptible"] {
		f.Job.Preemptible = f.Job.Tier == terms.Bronze
	}
}

// Explain is a field error of terms.Job.Validate about the file's job,
// on one line naming the file, the line and the file's own key for the
// field ("train.yaml:4: max_price: must be a positive number, got 0").
func (f *File) Explain(fe *terms.FieldError) string {
	if p, ok := f.pos[fe.Field]; ok {
		return fmt.Sprintf("%s:%d: %s: %s", f.Name, p.line, p.key, fe.Problem)
	}
	base, _, _ := strings.Cut(fe.Field, "[")
	if p, ok := f.pos[base]; ok {
		return fmt.Sprintf("%s:%d: %s: %s", f.Name, p.line, p.key, fe.Problem)
	}
	return fmt.Sprintf("%s: %s", f.Name, fe.Error())
}

// Check validates the file's job (after Defaults and whatever the caller
// changed), explaining each problem by the file's lines, all on one line.
func (f *File) Check() error {
	if err := f.checkMissing(); err != nil {
		return err
	}
	return f.explainAll(f.Job.Validate())
}

// checkMissing says which of the fields a job file must set it left out.
func (f *File) checkMissing() error {
	var missing []string
	if !f.Set["max_price"] && f.Job.MaxPrice == 0 {
		missing = append(missing, "max_price (the most you pay per GPU-hour, USD)")
	}
	if !f.Set["duration"] && f.Job.Duration == 0 {
		missing = append(missing, "duration (how long the job needs the GPUs, e.g. 2h)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: missing %s", f.Name, strings.Join(missing, " and "))
	}
	return nil
}

// explainAll is err, a job's validation error, on one line, each field
// problem explained by the file's lines (nil for nil).
func (f *File) explainAll(err error) error {
	if err == nil {
		return nil
	}
	fes := terms.FieldErrors(err)
	if len(fes) == 0 {
		return fmt.Errorf("%s: %v", f.Name, err)
	}
	msgs := make([]string, len(fes))
	for i, fe := range fes {
		msgs[i] = f.Explain(fe)
	}
	slices.Sort(msgs) // Validate's map walks are in random order
	return errors.New(strings.Join(msgs, "; "))
}

// Convert reads a job file of either shape and returns its job, with
// `gpumesh job post`'s defaults, created at now and valid.
func Convert(name string, b []byte, now time.Time) (terms.Job, error) {
	f, err := Read(name, b, now)
	if err != nil {
		return terms.Job{}, err
	}
	if err := f.explainAll(f.Job.Validate()); err != nil {
		return terms.Job{}, err
	}
	return f.Job, nil
}

// Read reads a job file of either shape, with `gpumesh job post`'s
// defaults and created at now, and checks that it sets the fields a job
// file must (max_price, duration), but does not validate its job: for a
// caller that posts it to what validates a job where it enters the daemon
// (the control API's post, node/lease.Tracker), whose errors ExplainPost
// explains by the file's lines.
func Read(name string, b []byte, now time.Time) (*File, error) {
	f, err := Parse(name, b, now)
	if err != nil {
		return nil, err
	}
	f.Defaults()
	f.Job.CreatedAt = now
	if err := f.checkMissing(); err != nil {
		return nil, err
	}
	return f, nil
}

// ExplainPost is err, the error of posting the file's job, with a
// validation error's field problems explained by the file's lines, on one
// line, as a bad request; any other error is returned as it is.
func (f *File) ExplainPost(err error) error {
	if len(terms.FieldErrors(err)) == 0 {
		return err
	}
	return api.BadRequest("%v", f.explainAll(err))
}

// ---- task files ----

// Task file fields, in the order the help lists them.
var (
	taskFields = []string{"name", "resources", "setup", "run", "envs", "inputs", "outputs", "checkpoint",
		"num_nodes", "nodes", "tier", "max_price", "duration", "deadline", "max_attempts", "verified", "preemptible", "min_reliability",
		"workload", "datasets", "bid_window", "no_persist", "retain", "service"}
	resourceFields = []string{"accelerators", "isolation", "region", "near", "max_rtt", "min_vram_gb", "image", "image_id", "image_artifact", "memory_mb", "use_spot"}
	// unsupported are SkyPilot fields with no meaning here, and why.
	unsupported = map[string]string{
		"workdir":       "upload it with `gpumesh artifact add DIR` and name it under inputs:",
		"file_mounts":   "upload each with `gpumesh artifact add PATH` and name it under inputs:",
		"config":        "there is no launcher config: the daemon's config is its own",
		"cloud":         "there are no clouds: providers bid; constrain resources.region instead",
		"zone":          "constrain resources.region instead",
		"infra":         "there are no clouds: providers bid; constrain resources.region instead",
		"cpus":          "providers are chosen by their GPUs",
		"memory":        "host memory is not a bid criterion; resources.memory_mb caps the job's memory",
		"disk_size":     "not a bid criterion",
		"disk_tier":     "not a bid criterion",
		"instance_type": "there are no instance types: ask for accelerators",
		"ports":         "a job has no ports: a service (a task file with a service: section) is posted with `gpumesh serve post`",
		"any_of":        "list several models in accelerators (same count) instead",
		"ordered":       "list several models in accelerators (same count) instead",
		"job_recovery":  "set max_attempts (and checkpoint.every) instead",
	}
)

// tp decodes one task file.
type tp struct {
	f    *File
	errs []string
	now  time.Time
	// svc is the service a service file describes (nil: a job file).
	svc *api.ServiceSpec
	// svcNode is its service: section, once seen.
	svcNode *yaml.Node
}

func (p *tp) bad(n *yaml.Node, key, format string, a ...any) {
	p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s: %s", p.f.Name, n.Line, key, fmt.Sprintf(format, a...)))
}

// at records that job field came from key at n's line and was set.
func (p *tp) at(field, key string, n *yaml.Node) {
	p.f.Set[field] = true
	p.f.pos[field] = position{key, n.Line}
}

// parseTask decodes a task file; service: the file is read as a service
// (ParseService), which a job file is not.
func (f *File) parseTask(root *yaml.Node, now time.Time, service bool) error {
	p := &tp{f: f, now: now}
	if service {
		p.svc = &api.ServiceSpec{}
	}
	for i := 0; i+1 < len(root.Content) && !service; i += 2 {
		// A service posted as a job: that is the one thing to say.
		if kn := root.Content[i]; kn.Value == "service" {
			return fmt.Errorf("%s:%d: service: the file describes a service: post it with `gpumesh serve post %s` (the Python client: serve)", f.Name, kn.Line, f.Name)
		}
	}
	var setup, run string
	var runNode *yaml.Node
	runOK := false
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, v := root.Content[i], root.Content[i+1]
		k := kn.Value
		if seen[k] {
			p.bad(kn, k, "given twice")
			continue
		}
		seen[k] = true
		if why, ok := notForServices[k]; ok && p.svc != nil {
			p.bad(kn, k, "not for a service: %s", why)
			continue
		}
		switch k {
		case "name":
			if s, ok := p.str(v, k); ok && s != "" && p.svc != nil {
				// A service's name is its id: one service of a name at a
				// time, and serve status NAME finds it.
				if err := terms.ValidID(s); err != nil {
					p.bad(v, k, "%q must be 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", s, terms.MaxIDLen)
				} else {
					p.svc.ID = s
				}
			} else if ok && s != "" {
				if err := terms.ValidID(s); err != nil || len(s) > terms.MaxIDLen-25 {
					p.bad(v, k, "%q must be 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", s, terms.MaxIDLen-25)
				} else {
					// Unique per post: the name, then 96 random bits.
					f.Job.ID = terms.NewID(s)
					p.at("id", k, v)
				}
			}
		case "resources":
			p.resources(v)
		case "setup":
			setup, _ = p.script(v, k)
		case "run":
			run, runOK = p.script(v, k)
			runNode = v
		case "envs":
			f.Job.Run.Env = p.stringMap(v, k, func(n *yaml.Node, name string) bool {
				if name == "" || strings.ContainsAny(name, "= \t\n") {
					p.bad(n, k, "%q is not an environment variable name", name)
					return false
				}
				return true
			})
			p.at("run.env", k, v)
		case "inputs":
			f.Job.Run.Inputs = p.stringMap(v, k, func(n *yaml.Node, name string) bool {
				if !terms.ValidArtifactID(n.Value) {
					p.bad(n, k+"."+name, "%q is not an artifact id (64 hex digits, as `gpumesh artifact add` prints)", n.Value)
					return false
				}
				return true
			})
			p.at("run.inputs", k, v)
		case "outputs":
			if s, ok := p.str(v, k); ok {
				f.Job.Run.Outputs = s
				p.at("run.outputs", k, v)
			}
		case "checkpoint":
			p.checkpoint(v)
		case "tier":
			if s, ok := p.str(v, k); ok {
				t, err := terms.ParseTier(s)
				if err != nil {
					p.bad(v, k, "must be gold, silver or bronze, got %q", s)
				}
				f.Job.Tier = t
				p.at("tier", k, v)
			}
		case "max_price":
			if x, ok := p.float(v, k, "a price in USD per GPU-hour, e.g. 2.5"); ok {
				f.Job.MaxPrice = x
				p.at("max_price", k, v)
			}
		case "min_reliability":
			if x, ok := p.float(v, k, "a number in [0, 1]"); ok {
				f.Job.MinReliability = x
				p.at("min_reliability", k, v)
			}
		case "duration":
			if d, ok := p.duration(v, k); ok {
				f.Job.Duration = d
				p.at("duration", k, v)
			}
		case "bid_window":
			if d, ok := p.duration(v, k); ok {
				f.Job.BidWindow = d
				p.at("bid_window", k, v)
			}
		case "deadline":
			if s, ok := p.str(v, k); ok {
				d, err := deadline(s, now)
				if err != nil {
					p.bad(v, k, "%v", err)
				}
				f.Job.Deadline = d
				p.at("deadline", k, v)
			}
		case "max_attempts":
			if n, ok := p.int(v, k); ok {
				f.Job.MaxAttempts = n
				p.at("max_attempts", k, v)
			}
		case "verified":
			if b, ok := p.bool(v, k); ok {
				f.Job.Verified = b
				p.at("verified", k, v)
			}
		case "preemptible":
			if b, ok := p.bool(v, k); ok {
				f.Job.Preemptible = b
				p.at("preemptible", k, v)
			}
		case "no_persist":
			if b, ok := p.bool(v, k); ok {
				f.Job.NoPersist = b
				p.at("no_persist", k, v)
			}
		case "retain":
			if d, ok := p.duration(v, k); ok {
				f.Job.Retain = d
				p.at("retain", k, v)
			}
		case "workload":
			if s, ok := p.str(v, k); ok {
				f.Job.Workload = s
				p.at("workload", k, v)
			}
		case "datasets":
			f.Job.Datasets = p.strings(v, k)
			p.at("datasets", k, v)
		case "num_nodes", "nodes":
			// More than one node is a gang: that many providers, each
			// with the accelerators asked for, placed all or nothing.
			if n, ok := p.int(v, k); ok {
				if n < 1 || n > terms.MaxNodes {
					p.bad(kn, k, "must be in [1, %d], got %d", terms.MaxNodes, n)
				}
				f.Job.Nodes = n
				p.at("nodes", k, v)
			}
		case "service": // only in a service file (see above)
			p.svcNode = kn
			p.service(v)
		default:
			if why, ok := unsupported[k]; ok {
				p.bad(kn, k, "not supported by gpumesh: %s", why)
			} else {
				p.bad(kn, k, "unknown field (task fields: %s)", strings.Join(taskFields, ", "))
			}
		}
	}
	if runNode == nil {
		if len(p.errs) == 0 {
			p.errs = append(p.errs, fmt.Sprintf("%s: missing run (the shell script the job runs)", f.Name))
		}
	} else if !runOK {
		// already reported
	} else if strings.TrimSpace(run) == "" {
		p.bad(runNode, "run", "is empty: give the shell script the job runs")
	} else {
		f.Job.Run.Command = Command(setup, run)
		p.at("run.command", "run", runNode)
	}
	if p.svc != nil {
		p.serviceChecks()
		f.Service = p.svc
	}
	if len(p.errs) > 0 {
		return errors.New(strings.Join(p.errs, "; "))
	}
	return nil
}

// runner runs a task's setup (when given) then its run, each a shell
// script: with bash where the host or image has it (as SkyPilot does),
// else sh. Setup stops at its first failing command (-e), and a failed
// setup ends the job with its status before run starts; run's status is
// the job's. $1 is setup, $2 run.
const runner = `s=sh; command -v bash >/dev/null 2>&1 && s=bash
if [ -n "$1" ]; then "$s" -ec "$1" setup || { rc=$?; echo "gpumesh: setup failed (exit status $rc); run not started" >&2; exit $rc; }; fi
exec "$s" -c "$2" run`

// Command is the job command that runs a task's setup and run scripts.
func Command(setup, run string) []string {
	return []string{"/bin/sh", "-c", runner, "gpumesh-task", setup, run}
}

// TaskScripts returns the setup and run scripts of a command Command made
// (ok false for any other command), for displaying a task's job.
func TaskScripts(cmd []string) (setup, run string, ok bool) {
	if len(cmd) != 6 || cmd[2] != runner || cmd[3] != "gpumesh-task" {
		return "", "", false
	}
	return cmd[4], cmd[5], true
}

func (p *tp) resources(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, "resources", "must be a mapping (accelerators:, region: ...), got %s", kindName(n))
		return
	}
	j := &p.f.Job
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := "resources." + kn.Value
		switch kn.Value {
		case "accelerators":
			p.accelerators(v, k)
		case "isolation":
			if s, ok := p.str(v, k); ok {
				j.Isolation = s
				p.at("isolation", k, v)
			}
		case "region":
			if s, ok := p.str(v, k); ok {
				j.Region = s
				p.at("region", k, v)
			}
		case "near":
			if s, ok := p.str(v, k); ok {
				j.Near = s
				p.at("near", k, v)
			}
		case "max_rtt":
			if d, ok := p.duration(v, k); ok {
				j.MaxRTT = d
				p.at("max_rtt", k, v)
			}
		case "min_vram_gb":
			if x, ok := p.int(v, k); ok {
				j.MinVRAMGB = x
				p.at("min_vram_gb", k, v)
			}
		case "image", "image_id":
			if s, ok := p.str(v, k); ok {
				// SkyPilot spells a container image "docker:REF".
				j.Run.Image = strings.TrimPrefix(s, "docker:")
				p.at("run.image", k, v)
			}
		case "image_artifact":
			if s, ok := p.str(v, k); ok {
				j.Run.ImageArtifact = s
				p.at("run.image_artifact", k, v)
			}
		case "memory_mb":
			if x, ok := p.int(v, k); ok {
				j.Run.MemoryMB = x
				p.at("run.memory_mb", k, v)
			}
		case "use_spot":
			if b, ok := p.bool(v, k); ok {
				j.Preemptible = b
				p.at("preemptible", k, v)
			}
		case "ports":
			if p.svc == nil {
				p.bad(kn, k, "not supported by gpumesh: %s", unsupported["ports"])
				continue
			}
			p.ports(v, k)
		default:
			if why, ok := unsupported[kn.Value]; ok {
				p.bad(kn, k, "not supported by gpumesh: %s", why)
			} else {
				p.bad(kn, k, "unknown field (resources fields: %s)", strings.Join(resourceFields, ", "))
			}
		}
	}
}

// accelerators reads "H100:8", "H100" (one), "L4:0.25" (a quarter of
// one: terms.ParseGPUs), a list of such (any of the models, all with the
// same count) or a mapping {H100: 8, A100: 8}.
func (p *tp) accelerators(n *yaml.Node, key string) {
	type acc struct {
		model    string
		count    int
		fraction float64
		n        *yaml.Node
	}
	var accs []acc
	one := func(v *yaml.Node) {
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			p.bad(v, key, `must be "MODEL:COUNT" (e.g. "H100:8"), got %s`, kindName(v))
			return
		}
		model, cnt, hasCount := strings.Cut(v.Value, ":")
		model = strings.TrimSpace(model)
		c, f := 1, 0.0
		if hasCount {
			var err error
			if c, f, err = terms.ParseGPUs(cnt); err != nil {
				p.bad(v, key, "%s, got %q", countRule, v.Value)
				return
			}
		}
		if model == "" {
			p.bad(v, key, `must be "MODEL:COUNT" (e.g. "H100:8"), got %q`, v.Value)
			return
		}
		accs = append(accs, acc{model, c, f, v})
	}
	switch n.Kind {
	case yaml.ScalarNode:
		one(n)
	case yaml.SequenceNode:
		for _, v := range n.Content {
			one(v)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			c, f := 1, 0.0
			if v.Tag != "!!null" {
				var err error
				if c, f, err = terms.ParseGPUs(v.Value); v.Kind != yaml.ScalarNode || err != nil {
					p.bad(v, key+"."+k.Value, "%s, got %q", countRule, v.Value)
					continue
				}
			}
			if strings.TrimSpace(k.Value) == "" {
				p.bad(k, key, "empty model name")
				continue
			}
			accs = append(accs, acc{strings.TrimSpace(k.Value), c, f, k})
		}
	default:
		p.bad(n, key, `must be "MODEL:COUNT" (e.g. "H100:8"), got %s`, kindName(n))
		return
	}
	if len(accs) == 0 {
		if n.Kind != yaml.ScalarNode {
			p.bad(n, key, `names no accelerator (e.g. "H100:8")`)
		}
		return
	}
	j := &p.f.Job
	j.GPUModels = nil
	for _, a := range accs {
		if a.count != accs[0].count || a.fraction != accs[0].fraction {
			p.bad(a.n, key, "every model needs the same count (a job leases COUNT GPUs of any one listed model), got %s:%s and %s:%s",
				accs[0].model, countText(accs[0].count, accs[0].fraction), a.model, countText(a.count, a.fraction))
			return
		}
		j.GPUModels = append(j.GPUModels, a.model)
	}
	j.GPUCount, j.GPUFraction = accs[0].count, accs[0].fraction
	p.at("gpu_count", key, n)
	p.at("gpu_fraction", key, n)
	p.at("gpu_models", key, n)
}

// countRule is what an accelerator count may be (terms.ParseGPUs).
const countRule = "count must be a whole number ≥ 1 or a fraction of one GPU (0.125, 0.25 or 0.5)"

// countText is an accelerator count as a task file writes it: "8", "0.25".
func countText(count int, fraction float64) string {
	if fraction > 0 {
		return strconv.FormatFloat(fraction, 'g', -1, 64)
	}
	return strconv.Itoa(count)
}

func (p *tp) checkpoint(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, "checkpoint", "must be a mapping (every: 10m), got %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		if kn.Value != "every" {
			p.bad(kn, "checkpoint."+kn.Value, "unknown field (checkpoint fields: every; the job saves $GPUMESH_CHECKPOINT_DIR)")
			continue
		}
		if d, ok := p.duration(v, "checkpoint.every"); ok {
			p.f.Job.CheckpointEvery = d
			p.at("checkpoint_every", "checkpoint.every", v)
		}
	}
}

// ---- scalar decoding, each error naming the line ----

func (p *tp) scalar(n *yaml.Node, key, want string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.bad(n, key, "must be %s, got %s", want, kindName(n))
		return false
	}
	return true
}

func (p *tp) str(n *yaml.Node, key string) (string, bool) {
	if !p.scalar(n, key, "a string") {
		return "", false
	}
	return strings.TrimSpace(n.Value), true
}

// script is a shell script: a string (a block scalar, typically).
func (p *tp) script(n *yaml.Node, key string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.bad(n, key, "must be a shell script (a string; use `%s: |` for several lines), got %s", key, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (p *tp) float(n *yaml.Node, key, want string) (float64, bool) {
	if !p.scalar(n, key, want) {
		return 0, false
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		p.bad(n, key, "must be %s, got %q", want, n.Value)
		return 0, false
	}
	return x, true
}

func (p *tp) int(n *yaml.Node, key string) (int, bool) {
	if !p.scalar(n, key, "a whole number") {
		return 0, false
	}
	x, err := strconv.Atoi(strings.TrimSpace(n.Value))
	if err != nil {
		p.bad(n, key, "must be a whole number, got %q", n.Value)
		return 0, false
	}
	return x, true
}

func (p *tp) bool(n *yaml.Node, key string) (bool, bool) {
	if !p.scalar(n, key, "true or false") {
		return false, false
	}
	var b bool
	if n.Decode(&b) != nil {
		p.bad(n, key, "must be true or false, got %q", n.Value)
		return false, false
	}
	return b, true
}

// duration is a Go duration string ("10m", "1h30m"); a bare number is
// refused (seconds? minutes?).
func (p *tp) duration(n *yaml.Node, key string) (time.Duration, bool) {
	if !p.scalar(n, key, "a duration such as 10m or 2h") {
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil || d <= 0 {
		p.bad(n, key, "must be a positive duration such as 10m or 2h, got %q", n.Value)
		return 0, false
	}
	return d, true
}

func (p *tp) strings(n *yaml.Node, key string) []string {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return []string{strings.TrimSpace(n.Value)}
	}
	if n.Kind != yaml.SequenceNode {
		p.bad(n, key, "must be a list of strings, got %s", kindName(n))
		return nil
	}
	var out []string
	for _, v := range n.Content {
		if s, ok := p.str(v, key); ok {
			out = append(out, s)
		}
	}
	return out
}

// stringMap reads a mapping of names to scalar values (numbers and
// booleans as written); check vets each entry.
func (p *tp) stringMap(n *yaml.Node, key string, check func(v *yaml.Node, name string) bool) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.bad(n, key, "must be a mapping of NAME: VALUE, got %s", kindName(n))
		return nil
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := key + "." + kn.Value
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			p.bad(v, k, "has no value (give one: %s: VALUE)", kn.Value)
			continue
		}
		if _, dup := out[kn.Value]; dup {
			p.bad(kn, k, "given twice")
			continue
		}
		if check(v, kn.Value) {
			out[kn.Value] = v.Value
		}
	}
	return out
}

// deadline is an RFC3339 time or a positive duration from now.
func deadline(s string, now time.Time) (time.Time, error) {
	t, ok := ParseDeadline(s, now)
	if !ok {
		return time.Time{}, fmt.Errorf("must be an RFC3339 time or a positive duration from now (e.g. 30m), got %q", s)
	}
	return t, nil
}

// ParseDeadline reads a job's deadline: an RFC3339 time, or a positive
// duration from now; false when s is neither. Task files and job post's
// --deadline both read it so.
func ParseDeadline(s string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, false
	}
	return now.Add(d), true
}

func kindName(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case n.Tag == "!!null":
		return "nothing"
	}
	return strconv.Quote(n.Value)
}

// YAMLMessage is a YAML decoding error on one line, each problem with its
// line ("line 3: field foo not found in type terms.Job").
func YAMLMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		parts := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			parts[i] = strings.TrimSpace(e)
		}
		return strings.Join(parts, "; ")
	}
	return strings.TrimPrefix(strings.Join(strings.Fields(err.Error()), " "), "yaml: ")
}
