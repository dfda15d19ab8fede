package taskfile

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
)

// The task part of a service file every case below shares.
const svcBase = "name: web\nresources:\n  accelerators: A100\n  ports: 8000\nrun: python3 -m http.server $PORT\nmax_price: 2\n"

// A service file in SkyServe's shape becomes the api.ServiceSpec serve
// post takes, with serve post's defaults.
func TestServiceFile(t *testing.T) {
	s, err := ConvertService("s.yaml", []byte(svcBase+`service:
  readiness_probe:
    path: /v1/models
    initial_delay_seconds: 600
    timeout_seconds: 15
  replica_policy:
    min_replicas: 2
    max_replicas: 5
    downscale_delay_seconds: 300
  target_p95: 300ms
  target_concurrency: 4
  probe_interval: 2s
  lease: 30m
  public:
    addr: 0.0.0.0:8443
    hosts: [api.example.com]
    tls_cert: /etc/gpumesh/cert.pem
    tls_key: /etc/gpumesh/key.pem
    max_body: 1MiB
    rate: 5
    burst: 10
envs: {HF_HOME: .hf}
tier: silver
`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := api.ServiceSpec{ID: "web", Replicas: 2, MaxReplicas: 5, Health: "/v1/models", TargetP95: 300 * time.Millisecond,
		TargetConcurrency: 4, ScaleDownAfter: 5 * time.Minute, ProbeInterval: 2 * time.Second, ProbeTimeout: 15 * time.Second,
		StartTimeout: 10 * time.Minute,
		Public: &api.PublicSpec{Addr: "0.0.0.0:8443", Hosts: []string{"api.example.com"}, TLSCert: "/etc/gpumesh/cert.pem",
			TLSKey: "/etc/gpumesh/key.pem", MaxBody: 1 << 20, Rate: 5, Burst: 10}}
	job := s.Job
	s.Job = terms.Job{}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("service\n got %+v\nwant %+v", s, want)
	}
	_, run, ok := TaskScripts(job.Run.Command)
	if job.Tier != terms.Silver || job.MaxPrice != 2 || job.GPUCount != 1 || job.GPUModels[0] != "A100" || job.Duration != 30*time.Minute ||
		job.Run.ServicePort != 8000 || job.Run.Env["HF_HOME"] != ".hf" || !ok || run != "python3 -m http.server $PORT" || job.ID != "" {
		t.Fatalf("replica job %+v", job)
	}

	// The short forms, and serve post's defaults: gold, one replica, the
	// daemon's lease length.
	s, err = ConvertService("s.yaml", []byte(svcBase+"service:\n  readiness_probe: /health\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Health != "/health" || s.Replicas != 1 || s.MaxReplicas != 0 || s.Job.Tier != terms.Gold || s.Job.Duration != 0 || s.Job.Preemptible {
		t.Fatalf("defaults: %+v", s)
	}
	s, err = ConvertService("s.yaml", []byte(strings.Replace(svcBase, "ports: 8000", "ports: [\"9000\"]", 1)+"service: {replicas: 3}\n"), now)
	if err != nil || s.Replicas != 3 || s.Job.Run.ServicePort != 9000 || s.Health != "" {
		t.Fatalf("replicas and a port list: %+v %v", s, err)
	}
	// Regions: the replica count is left to the daemon (regions × per
	// region).
	s, err = ConvertService("s.yaml", []byte(strings.Replace(svcBase, "resources:\n", "resources:\n  near: eu-west\n", 1)+"service:\n  regions: [eu, us-east]\n  replicas_per_region: 2\n"), now)
	if err != nil || strings.Join(s.Regions, ",") != "eu,us-east" || s.ReplicasPerRegion != 2 || s.Replicas != 0 || s.Job.Near != "eu-west" {
		t.Fatalf("regions: %+v %v", s, err)
	}
	s, err = ConvertService("s.yaml", []byte(svcBase+"service:\n  scale_to_zero: true\n  idle_after: 10m\n"), now)
	if err != nil || !s.ScaleToZero || s.IdleAfter != 10*time.Minute || s.Replicas != 1 {
		t.Fatalf("scale to zero: %+v %v", s, err)
	}
	// Gang replicas: each replica is num_nodes members of the task's
	// resources.
	s, err = ConvertService("s.yaml", []byte(strings.Replace(svcBase, "A100", "A100:4", 1)+"num_nodes: 2\nservice: {replicas: 2}\n"), now)
	if err != nil || s.Job.Nodes != 2 || s.Job.GPUCount != 4 || s.Replicas != 2 {
		t.Fatalf("gang replicas: %+v %v", s, err)
	}
}

// serve post --file's api.ServiceSpec-shaped YAML reads through the same
// entry point, its unknown fields refused.
func TestServiceSpecShapedFile(t *testing.T) {
	const spec = "replicas: 2\nhealth: /healthz\njob:\n  max_price: 2.5\n  run:\n    command: [python, serve.py]\n    service_port: 8000\n"
	s, err := ConvertService("svc.yaml", []byte(spec), now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Replicas != 2 || s.Health != "/healthz" || s.Job.MaxPrice != 2.5 || s.Job.Run.ServicePort != 8000 || s.Job.Tier != terms.Gold || s.Job.GPUCount != 1 {
		t.Fatalf("spec-shaped: %+v", s)
	}
	for _, c := range []struct{ text, want string }{
		{spec + "replicaz: 3\n", "svc.yaml: line 8: field replicaz not found in type api.ServiceSpec"},
		{strings.Replace(spec, "2.5", "-1", 1), "svc.yaml: job.max_price must be a positive number, got -1"},
		{strings.Replace(spec, "    service_port: 8000\n", "", 1), "svc.yaml: missing resources.ports"},
		{spec + "  nodes: -1\n", "svc.yaml: job.nodes must be in [1, 64], got -1"},
		{spec + "  nodes: 2\n  gpu_fraction: 0.5\n", "svc.yaml: job.nodes a gang's members take whole GPUs"},
	} {
		if _, err := ConvertService("svc.yaml", []byte(c.text), now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// Each bad field of a service file is named with its line, on one line;
// so is a service posted as a job, and a job posted as a service.
func TestServiceErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
	}{
		{"probe without slash", svcBase + "service:\n  readiness_probe: health\n", `s.yaml:8: service.readiness_probe: must be an HTTP path starting with /, got "health"`},
		{"probe without path", svcBase + "service:\n  readiness_probe:\n    timeout_seconds: 5\n", "s.yaml:9: service.readiness_probe: has no path"},
		{"probe post data", svcBase + "service:\n  readiness_probe:\n    path: /\n    post_data: {a: 1}\n", "s.yaml:10: service.readiness_probe.post_data: not supported by gpumesh: the readiness probe is a GET"},
		{"fractional delay", svcBase + "service:\n  readiness_probe: {path: /, initial_delay_seconds: 1.5}\n", `s.yaml:8: service.readiness_probe.initial_delay_seconds: must be a whole number of seconds ≥ 1, got "1.5"`},
		{"zero replicas", svcBase + "service:\n  replicas: 0\n", "s.yaml:8: service.replicas: must be a whole number ≥ 1, got 0"},
		{"replicas not a number", svcBase + "service:\n  replicas: two\n", `s.yaml:8: service.replicas: must be a whole number, got "two"`},
		{"scale to zero", svcBase + "service:\n  replica_policy:\n    min_replicas: 0\n    max_replicas: 2\n", "s.yaml:9: service.replica_policy.min_replicas: must be at least 1 (the replicas a running service has; to run none while idle: service.scale_to_zero)"},
		{"max below min", svcBase + "service:\n  replica_policy:\n    min_replicas: 3\n    max_replicas: 2\n", "s.yaml:10: service.replica_policy.max_replicas: must be at least min_replicas (3), got 2"},
		{"qps target", svcBase + "service:\n  replica_policy:\n    min_replicas: 1\n    target_qps_per_replica: 2.5\n", "s.yaml:10: service.replica_policy.target_qps_per_replica: not supported by gpumesh: the autoscaler keeps outstanding requests per replica under service.target_concurrency"},
		{"replicas and policy", svcBase + "service:\n  replicas: 2\n  replica_policy: {min_replicas: 1}\n", "s.yaml:9: service.replica_policy: give replicas (a fixed count) or replica_policy (bounds), not both"},
		{"unknown service field", svcBase + "service:\n  replicaz: 2\n", "s.yaml:8: service.replicaz: unknown field (service fields: readiness_probe, replicas"},
		{"bad region", svcBase + "service:\n  regions: [eu, 'us east']\n", `s.yaml:8: service.regions: "us east" is not a region`},
		{"zero per region", svcBase + "service:\n  regions: eu\n  replicas_per_region: 0\n", "s.yaml:9: service.replicas_per_region: must be a whole number ≥ 1, got 0"},
		{"bad scale to zero", svcBase + "service:\n  scale_to_zero: sometimes\n", "s.yaml:8: service.scale_to_zero: must be true or false"},
		{"bad p95", svcBase + "service:\n  target_p95: fast\n", `s.yaml:8: service.target_p95: must be a positive duration such as 10m or 2h, got "fast"`},
		{"public without addr", svcBase + "service:\n  public:\n    rate: 5\n", "s.yaml:9: service.public: has no addr"},
		{"public bad size", svcBase + "service:\n  public: {addr: ':8443', max_body: lots}\n", `s.yaml:8: service.public.max_body: invalid size "lots"`},
		{"service a list", svcBase + "service: [a]\n", "s.yaml:7: service: must be a mapping"},
		{"two ports", strings.Replace(svcBase, "ports: 8000", "ports: [8000, 8001]", 1) + "service: {}\n", "s.yaml:4: resources.ports: a service has one port (the server's), got 2"},
		{"port out of range", strings.Replace(svcBase, "ports: 8000", "ports: 70000", 1) + "service: {}\n", `s.yaml:4: resources.ports: must be a port number in [1, 65535], got "70000"`},
		{"duration", svcBase + "duration: 2h\nservice: {}\n", "s.yaml:7: duration: not for a service: a service runs until stopped; give the length of each replica's lease as service.lease"},
		{"max attempts", svcBase + "max_attempts: 3\nservice: {}\n", "s.yaml:7: max_attempts: not for a service: the service replaces a lost replica itself"},
		{"spot", strings.Replace(svcBase, "ports: 8000", "ports: 8000\n  use_spot: true", 1) + "service: {}\n", "s.yaml:5: resources.use_spot: must be false: a service is always on"},
		{"gold preemptible", svcBase + "preemptible: true\nservice: {}\n", "s.yaml:7: preemptible: must be false: a service is always on"},
		{"bad price", strings.Replace(svcBase, "max_price: 2", "max_price: -2", 1) + "service: {}\n", "s.yaml:6: max_price: must be a positive number, got -2"},
		{"no port", strings.Replace(svcBase, "  ports: 8000\n", "", 1) + "service: {}\n", "s.yaml: missing resources.ports (the port the server listens on, e.g. 8000)"},
		{"no price", strings.Replace(svcBase, "max_price: 2\n", "", 1) + "service: {}\n", "s.yaml: missing max_price"},
		{"a job", strings.Replace(svcBase, "  ports: 8000\n", "", 1), "s.yaml: missing service (readiness_probe:, replicas: ...); a task file without one is a job: gpumesh job post s.yaml"},
		{"zero nodes", svcBase + "num_nodes: 0\nservice: {}\n", "s.yaml:7: num_nodes: must be in [1, 64], got 0"},
		{"negative nodes", svcBase + "num_nodes: -3\nservice: {}\n", "s.yaml:7: num_nodes: must be in [1, 64], got -3"},
		{"gang of fractions", strings.Replace(svcBase, "A100", "A100:0.5", 1) + "num_nodes: 2\nservice: {}\n", "s.yaml:7: num_nodes: a gang's members take whole GPUs"},
		{"bad name", strings.Replace(svcBase, "name: web", "name: my web", 1) + "service: {}\n", `s.yaml:1: name: "my web" must be 1-128 letters`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ConvertService("s.yaml", []byte(c.text), now)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q\nwant it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
	// job post of a service file says to use serve post; a job's ports
	// say what a service is.
	_, err := Convert("s.yaml", []byte(svcBase+"duration: 1h\nservice:\n  replicas: 2\n"), now)
	if err == nil || !strings.Contains(err.Error(), "s.yaml:8: service: the file describes a service: post it with `gpumesh serve post s.yaml`") {
		t.Fatalf("service posted as a job: %v", err)
	}
	if strings.Contains(err.Error(), ";") {
		t.Fatalf("a service posted as a job gets more than the hint: %v", err)
	}
	_, err = Convert("j.yaml", []byte(svcBase+"duration: 1h\n"), now)
	if err == nil || !strings.Contains(err.Error(), "j.yaml:4: resources.ports: not supported by gpumesh: a job has no ports: a service (a task file with a service: section)") {
		t.Fatalf("ports of a job: %v", err)
	}
}
