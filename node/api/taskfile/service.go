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

// A service file is a task file with a service: section, in SkyServe's
// shape where gpumesh has the concept, with gpumesh's own keys (those of
// serve post's flags) beside them:
//
//	resources:
//	  accelerators: L4:1
//	  ports: 8000                  # the port the server listens on ($PORT)
//	run: python3 -m http.server $PORT
//	service:
//	  readiness_probe: /healthz    # or {path, initial_delay_seconds, timeout_seconds}
//	  replicas: 2                  # or replica_policy: {min_replicas, max_replicas}
//	  target_p95: 300ms
//	  lease: 1h
//	  regions: [eu, us]            # replicas spread over regions (serve post --regions)
//	  replicas_per_region: 1
//	  scale_to_zero: true          # no replica while idle for idle_after (default 5m)
//	  idle_after: 10m
//	max_price: 2.5
//	num_nodes: 2                   # each replica a gang of 2 providers (serve post --nodes)
//
// The replica job is the task's job, less what a service decides for each
// replica itself (notForServices).

var (
	serviceFields = []string{"readiness_probe", "replicas", "replica_policy", "target_p95", "target_concurrency",
		"scale_down_after", "probe_interval", "lease", "public", "regions", "replicas_per_region",
		"scale_to_zero", "idle_after"}
	probeFields  = []string{"path", "initial_delay_seconds", "timeout_seconds"}
	policyFields = []string{"min_replicas", "max_replicas", "downscale_delay_seconds"}
	publicFields = []string{"addr", "hosts", "tls_cert", "tls_key", "max_body", "rate", "burst"}
	// notForServices are task fields a service sets for each replica
	// itself, and why.
	notForServices = map[string]string{
		"duration":     "a service runs until stopped; give the length of each replica's lease as service.lease",
		"deadline":     "each replica must start within half of its start timeout (service.readiness_probe.initial_delay_seconds)",
		"max_attempts": "the service replaces a lost replica itself, on another provider",
		"checkpoint":   "a replica is never resumed: the service starts a fresh one",
	}
	// serviceUnsupported are SkyServe service fields with no meaning here,
	// and why.
	serviceUnsupported = map[string]string{
		"target_qps_per_replica":          "the autoscaler keeps outstanding requests per replica under service.target_concurrency and p95 latency under service.target_p95",
		"upscale_delay_seconds":           "a replica is added as soon as load is high, one at a time",
		"post_data":                       "the readiness probe is a GET",
		"headers":                         "the readiness probe sends no headers",
		"base_ondemand_fallback_replicas": "there is no spot here: replicas are never preemptible",
		"dynamic_ondemand_fallback":       "there is no spot here: replicas are never preemptible",
		"load_balancing_policy":           "the gateway routes to the replica with the fewest outstanding requests",
		"tls":                             "give the public endpoint's certificate as service.public.tls_cert and tls_key",
		"ports":                           "give the replica's port as resources.ports",
	}
)

// ParseService reads a service file: a task file with a service: section,
// or the api.ServiceSpec-shaped YAML (its replica job under job:) of
// `gpumesh serve post --file`, whose unknown fields are refused. It checks
// the file's syntax, field types and the service section's own rules, not
// the replica job (see ConvertService, CheckReplica).
func ParseService(name string, b []byte, now time.Time) (*File, error) {
	root, err := parseRoot(name, b, "a service file is a mapping of fields (name:, resources:, run:, service: ...)")
	if err != nil {
		return nil, err
	}
	f := &File{Name: name, Set: map[string]bool{}, pos: map[string]position{}}
	if !isTask(root) {
		var spec api.ServiceSpec
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&spec); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %s", name, YAMLMessage(err))
		}
		f.Job, spec.Job = spec.Job, terms.Job{}
		f.Service = &spec
		return f, nil
	}
	f.Task = true
	if err := f.parseTask(root, now, true); err != nil {
		return nil, err
	}
	return f, nil
}

// ServiceSpec is the file's service, its replica job f.Job (nil-safe only
// for a service file).
func (f *File) ServiceSpec() api.ServiceSpec {
	s := *f.Service
	s.Job = f.Job
	if s.Public != nil {
		p := *s.Public
		s.Public = &p
	}
	return s
}

// ConvertService reads a service file and returns its service, with
// `gpumesh serve post`'s defaults, its replica job valid (CheckReplica);
// the daemon checks the rest (the replica bounds, the public endpoint's
// address).
func ConvertService(name string, b []byte, now time.Time) (api.ServiceSpec, error) {
	f, err := ParseService(name, b, now)
	if err != nil {
		return api.ServiceSpec{}, err
	}
	f.Defaults()
	var missing []string
	if f.Job.MaxPrice == 0 && !f.Set["max_price"] {
		missing = append(missing, "max_price (the most you pay per GPU-hour, USD)")
	}
	if f.Job.Run.ServicePort == 0 {
		missing = append(missing, "resources.ports (the port the server listens on, e.g. 8000)")
	}
	if len(missing) > 0 {
		return api.ServiceSpec{}, fmt.Errorf("%s: missing %s", f.Name, strings.Join(missing, " and "))
	}
	if err := CheckReplica(f.Job); err != nil {
		if !f.Task {
			var msgs []string
			for _, fe := range terms.FieldErrors(err) {
				msgs = append(msgs, "job."+fe.Error())
			}
			slices.Sort(msgs)
			return api.ServiceSpec{}, fmt.Errorf("%s: %s", f.Name, strings.Join(msgs, "; "))
		}
		return api.ServiceSpec{}, f.explainAll(err)
	}
	return f.ServiceSpec(), nil
}

// CheckReplica is terms.Job.Validate of a service's replica job, as the
// daemon checks each replica's: the id, creation time and start deadline
// are the service's to set, and a lease length left out is the daemon's
// default. Its problems are *terms.FieldError (File.Explain).
func CheckReplica(j terms.Job) error {
	j.ID, j.CreatedAt, j.Deadline = "", time.Time{}, time.Time{}
	err := j.Validate()
	if err == nil || j.Duration != 0 {
		return err
	}
	var keep []error
	for _, fe := range terms.FieldErrors(err) {
		if fe.Field != "duration" {
			keep = append(keep, fe)
		}
	}
	return errors.Join(keep...)
}

// service decodes the service: section.
func (p *tp) service(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, "service", "must be a mapping (readiness_probe:, replicas: ...), got %s", kindName(n))
		return
	}
	s := p.svc
	var replicas, policy *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := "service." + kn.Value
		switch kn.Value {
		case "readiness_probe":
			p.probe(v, k)
		case "replicas":
			if x, ok := p.atLeast1(v, k); ok {
				s.Replicas = x // the daemon's max_replicas defaults to it
			}
			replicas = kn
		case "replica_policy":
			p.policy(v, k)
			policy = kn
		case "target_p95":
			if d, ok := p.duration(v, k); ok {
				s.TargetP95 = d
			}
		case "target_concurrency":
			if x, ok := p.atLeast1(v, k); ok {
				s.TargetConcurrency = x
			}
		case "scale_down_after":
			if d, ok := p.duration(v, k); ok {
				if s.ScaleDownAfter != 0 {
					p.bad(kn, k, "given twice (as replica_policy.downscale_delay_seconds too)")
				}
				s.ScaleDownAfter = d
			}
		case "probe_interval":
			if d, ok := p.duration(v, k); ok {
				s.ProbeInterval = d
			}
		case "lease":
			if d, ok := p.duration(v, k); ok {
				p.f.Job.Duration = d
				p.at("duration", k, v)
			}
		case "regions":
			for _, r := range p.strings(v, k) {
				if why := terms.RegionProblem(r); why != "" {
					p.bad(v, k, "%s", why)
					continue
				}
				s.Regions = append(s.Regions, r)
			}
		case "scale_to_zero":
			if b, ok := p.bool(v, k); ok {
				s.ScaleToZero = b
			}
		case "idle_after":
			if d, ok := p.duration(v, k); ok {
				s.IdleAfter = d
			}
		case "replicas_per_region":
			if x, ok := p.atLeast1(v, k); ok {
				s.ReplicasPerRegion = x
			}
		case "public":
			p.public(v, k)
		default:
			if why, ok := serviceUnsupported[kn.Value]; ok {
				p.bad(kn, k, "not supported by gpumesh: %s", why)
			} else {
				p.bad(kn, k, "unknown field (service fields: %s)", strings.Join(serviceFields, ", "))
			}
		}
	}
	if replicas != nil && policy != nil {
		p.bad(policy, "service.replica_policy", "give replicas (a fixed count) or replica_policy (bounds), not both")
	}
}

// probe reads readiness_probe: a path, or {path, initial_delay_seconds,
// timeout_seconds}. The initial delay is how long a new replica may take
// to pass it (ServiceSpec.StartTimeout): a replica that has not by then is
// replaced.
func (p *tp) probe(n *yaml.Node, key string) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		p.probePath(n, key)
		return
	}
	if n.Kind != yaml.MappingNode {
		p.bad(n, key, "must be a path (e.g. /health) or a mapping (path:, initial_delay_seconds:, timeout_seconds:), got %s", kindName(n))
		return
	}
	hasPath := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := key + "." + kn.Value
		switch kn.Value {
		case "path":
			p.probePath(v, k)
			hasPath = true
		case "initial_delay_seconds":
			if d, ok := p.seconds(v, k); ok {
				p.svc.StartTimeout = d
			}
		case "timeout_seconds":
			if d, ok := p.seconds(v, k); ok {
				p.svc.ProbeTimeout = d
			}
		default:
			if why, ok := serviceUnsupported[kn.Value]; ok {
				p.bad(kn, k, "not supported by gpumesh: %s", why)
			} else {
				p.bad(kn, k, "unknown field (readiness_probe fields: %s)", strings.Join(probeFields, ", "))
			}
		}
	}
	if !hasPath {
		p.bad(n, key, "has no path (the HTTP path a ready replica answers, e.g. /health)")
	}
}

func (p *tp) probePath(n *yaml.Node, key string) {
	if s, ok := p.str(n, key); ok {
		if !strings.HasPrefix(s, "/") {
			p.bad(n, key, "must be an HTTP path starting with /, got %q", s)
			return
		}
		p.svc.Health = s
	}
}

// policy reads replica_policy: the autoscaler's bounds.
func (p *tp) policy(n *yaml.Node, key string) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, key, "must be a mapping (min_replicas:, max_replicas:), got %s", kindName(n))
		return
	}
	s := p.svc
	var maxNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := key + "." + kn.Value
		switch kn.Value {
		case "min_replicas":
			if !p.scalar(v, k, "a whole number ≥ 1") {
				continue
			}
			if x, err := strconv.Atoi(strings.TrimSpace(v.Value)); err == nil && x == 0 {
				p.bad(v, k, "must be at least 1 (the replicas a running service has; to run none while idle: service.scale_to_zero)")
			} else if x, ok := p.atLeast1(v, k); ok {
				s.Replicas = x
			}
		case "max_replicas":
			if x, ok := p.atLeast1(v, k); ok {
				s.MaxReplicas = x
				maxNode = v
			}
		case "downscale_delay_seconds":
			if d, ok := p.seconds(v, k); ok {
				if s.ScaleDownAfter != 0 {
					p.bad(kn, k, "given twice (as service.scale_down_after too)")
				}
				s.ScaleDownAfter = d
			}
		default:
			if why, ok := serviceUnsupported[kn.Value]; ok {
				p.bad(kn, k, "not supported by gpumesh: %s", why)
			} else {
				p.bad(kn, k, "unknown field (replica_policy fields: %s)", strings.Join(policyFields, ", "))
			}
		}
	}
	if s.Replicas == 0 {
		p.bad(n, key, "has no min_replicas (the replicas always running)")
	}
	if maxNode != nil && s.Replicas > 0 && s.MaxReplicas < s.Replicas {
		p.bad(maxNode, key+".max_replicas", "must be at least min_replicas (%d), got %d", s.Replicas, s.MaxReplicas)
	}
}

// public reads the public endpoint (serve post --public and its flags),
// its keys those of api.PublicSpec.
func (p *tp) public(n *yaml.Node, key string) {
	if n.Kind != yaml.MappingNode {
		p.bad(n, key, "must be a mapping (addr:, hosts:, tls_cert: ...), got %s", kindName(n))
		return
	}
	pub := &api.PublicSpec{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := key + "." + kn.Value
		switch kn.Value {
		case "addr":
			if s, ok := p.str(v, k); ok {
				pub.Addr = s
			}
		case "hosts":
			pub.Hosts = p.strings(v, k)
		case "tls_cert":
			if s, ok := p.str(v, k); ok {
				pub.TLSCert = s
			}
		case "tls_key":
			if s, ok := p.str(v, k); ok {
				pub.TLSKey = s
			}
		case "max_body":
			if !p.scalar(v, k, "a size such as 1MiB") {
				continue
			}
			x, err := ParseSize(v.Value)
			if err != nil {
				p.bad(v, k, "%v", err)
				continue
			}
			pub.MaxBody = x
		case "rate":
			if x, ok := p.float(v, k, "requests per second, e.g. 5"); ok {
				if x <= 0 {
					p.bad(v, k, "must be positive (leave it out for no limit), got %q", v.Value)
				}
				pub.Rate = x
			}
		case "burst":
			if x, ok := p.atLeast1(v, k); ok {
				pub.Burst = x
			}
		default:
			p.bad(kn, k, "unknown field (public fields: %s)", strings.Join(publicFields, ", "))
		}
	}
	if pub.Addr == "" {
		p.bad(n, key, "has no addr (the address to serve on, e.g. 0.0.0.0:8443)")
	}
	p.svc.Public = pub
}

// ports reads resources.ports: the one port the replica's server listens
// on ("8000", 8000 or [8000]).
func (p *tp) ports(n *yaml.Node, key string) {
	v := n
	if n.Kind == yaml.SequenceNode {
		if len(n.Content) != 1 {
			p.bad(n, key, "a service has one port (the server's), got %d", len(n.Content))
			return
		}
		v = n.Content[0]
	}
	if !p.scalar(v, key, "a port number, e.g. 8000") {
		return
	}
	x, err := strconv.Atoi(strings.TrimSpace(v.Value))
	if err != nil || x < 1 || x > 65535 {
		p.bad(v, key, "must be a port number in [1, 65535], got %q", v.Value)
		return
	}
	p.f.Job.Run.ServicePort = x
	p.at("run.service_port", key, v)
}

// serviceChecks are a service file's rules across fields, once it is read.
func (p *tp) serviceChecks() {
	if p.svcNode == nil {
		p.errs = append(p.errs, fmt.Sprintf("%s: missing service (readiness_probe:, replicas: ...); a task file without one is a job: gpumesh job post %s", p.f.Name, p.f.Name))
	}
	if p.f.Job.Preemptible {
		if pos, ok := p.f.pos["preemptible"]; ok {
			p.errs = append(p.errs, fmt.Sprintf("%s:%d: %s: must be false: a service is always on (its replicas are never preempted)", p.f.Name, pos.line, pos.key))
		}
	}
}

// atLeast1 is a whole number ≥ 1.
func (p *tp) atLeast1(n *yaml.Node, key string) (int, bool) {
	x, ok := p.int(n, key)
	if ok && x < 1 {
		p.bad(n, key, "must be a whole number ≥ 1, got %d", x)
		return 0, false
	}
	return x, ok
}

// seconds is a whole number of seconds ≥ 1 (SkyServe's unit), or a
// duration such as 10m.
func (p *tp) seconds(n *yaml.Node, key string) (time.Duration, bool) {
	if !p.scalar(n, key, "a number of seconds") {
		return 0, false
	}
	s := strings.TrimSpace(n.Value)
	if x, err := strconv.ParseFloat(s, 64); err == nil {
		if x < 1 || x > math.MaxInt32 || x != math.Trunc(x) {
			p.bad(n, key, "must be a whole number of seconds ≥ 1, got %q", n.Value)
			return 0, false
		}
		return time.Duration(x) * time.Second, true
	}
	return p.duration(n, key)
}

// ParseSize reads a byte count: a number with an optional KiB, MiB, GiB or
// TiB (or KB, MB, GB, TB: powers of 1000) suffix. Service files and the
// CLI's size flags read it so.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: want a positive number of bytes, optionally with KiB, MiB, GiB or TiB", s)
	}
	return n * mult, nil
}
