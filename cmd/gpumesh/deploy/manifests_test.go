package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The subset of apps/v1 DaemonSet (and core/v1 PodSpec) the manifest uses.
// Decoding with KnownFields rejects any key not listed here, so a typo in
// the manifest (or a field in the wrong place) fails the test.
type daemonSet struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		UpdateStrategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     podSpec    `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type podSpec struct {
	RuntimeClassName              string            `yaml:"runtimeClassName"`
	NodeSelector                  map[string]string `yaml:"nodeSelector"`
	Tolerations                   []toleration      `yaml:"tolerations"`
	HostNetwork                   bool              `yaml:"hostNetwork"`
	DNSPolicy                     string            `yaml:"dnsPolicy"`
	TerminationGracePeriodSeconds int               `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container       `yaml:"containers"`
	Volumes                       []volume          `yaml:"volumes"`
}

type toleration struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"`
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	Env             []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsUser                *int  `yaml:"runAsUser"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	Exec struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
	InitialDelaySeconds int `yaml:"initialDelaySeconds"`
	PeriodSeconds       int `yaml:"periodSeconds"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

func TestDaemonSetManifest(t *testing.T) {
	b, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var ds daemonSet
	if err := dec.Decode(&ds); err != nil {
		t.Fatalf("daemonset.yaml does not decode strictly: %v", err)
	}
	if ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" || ds.Metadata.Name == "" {
		t.Fatalf("header: %s %s %q", ds.APIVersion, ds.Kind, ds.Metadata.Name)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	pod := ds.Spec.Template.Spec
	if pod.RuntimeClassName != "nvidia" {
		t.Errorf("runtimeClassName %q, want nvidia", pod.RuntimeClassName)
	}
	if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("nodeSelector %v does not pick GPU nodes", pod.NodeSelector)
	}
	tolerated := false
	for _, tl := range pod.Tolerations {
		tolerated = tolerated || (tl.Key == "nvidia.com/gpu" && tl.Operator == "Exists")
	}
	if !tolerated {
		t.Errorf("no toleration of the nvidia.com/gpu taint: %+v", pod.Tolerations)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	var dataVol *volume
	for i, v := range pod.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			t.Errorf("volume %s is not mounted", v.Name)
		}
		if mounts[v.Name] == "/data" {
			dataVol = &pod.Volumes[i]
		}
	}
	if dataVol == nil || dataVol.HostPath == nil || dataVol.HostPath.Path == "" {
		t.Fatalf("the data dir /data is not a hostPath volume: %+v", pod.Volumes)
	}
	// The container runs the daemon on the mounted data dir and config,
	// with flags the CLI has.
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "-d /data daemon") || !strings.Contains(args, "--config "+mounts["config"]+"/config.yaml") {
		t.Errorf("args %q do not run the daemon on /data with the mounted config", args)
	}
	out, err := exec.Command(gpumeshBin, "daemon", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("gpumesh daemon --help: %v\n%s", err, out)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--") && !strings.Contains(string(out), a) {
			t.Errorf("daemon has no flag %s", a)
		}
	}
}

// TestDashboardNamesOnlyExportedMetrics: every metric a dashboard query
// names is one the daemon exports (as listed by node/metrics, read from
// its source), so no panel stays empty after a rename.
func TestDashboardNamesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	exported := exportedMetrics(t)
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if s, ok := v.Query.(string); ok {
			exprs = append(exprs, s)
		}
	}
	name := regexp.MustCompile(`gpumesh_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(m, suf); ok && exported[s] == "histogram" {
					base = s
				}
			}
			if exported[base] == "" {
				t.Errorf("dashboard queries %s, which the daemon does not export", m)
			}
			used[base] = true
		}
	}
	if len(used) < 10 {
		t.Fatalf("dashboard uses only %d metrics", len(used))
	}
	var unused []string
	for m := range exported {
		if !used[m] {
			unused = append(unused, m)
		}
	}
	sort.Strings(unused)
	t.Logf("exported but not on the dashboard: %v", unused)
}

// exportedMetrics reads node/metrics/metrics.go for the metric names it registers
// and their kinds (name → "counter", "gauge" or "histogram").
func exportedMetrics(t *testing.T) map[string]string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "..", "node", "metrics", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	patterns := map[string]*regexp.Regexp{
		"histogram": regexp.MustCompile(`prometheus\.NewHistogram(?:Vec)?\(prometheus\.HistogramOpts\{Namespace: ns, Name: "([a-z0-9_]+)"`),
		"counter":   regexp.MustCompile(`(?:prometheus\.NewCounter(?:Vec)?\(prometheus\.CounterOpts\{Namespace: ns, Name: |\bcounter\()"([a-z0-9_]+)"`),
		"gauge":     regexp.MustCompile(`\bgauge\("([a-z0-9_]+)"`),
		"desc":      regexp.MustCompile(`NewDesc\(namespace\+"(_[a-z0-9_]+)"`),
	}
	for kind, re := range patterns {
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			n := m[1]
			if kind == "desc" {
				kind = "gauge"
				if strings.HasSuffix(n, "_total") {
					kind = "counter"
				}
				out["gpumesh"+n] = kind
				kind = "desc"
				continue
			}
			out["gpumesh_"+n] = kind
		}
	}
	if len(out) < 15 {
		t.Fatalf("found only %d metrics in node/metrics/metrics.go: %v", len(out), out)
	}
	return out
}
