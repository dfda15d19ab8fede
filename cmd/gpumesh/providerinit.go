package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/gpumodel"
	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/config"
	"github.com/gpumesh/gpumesh/runtime"
	"github.com/urfave/cli/v2"
)

// suggestedFloor is a starting price floor in USD per GPU-hour for each GPU
// family (gpumodel keys): roughly half of 2025's on-demand cloud prices, so
// idle hardware sells. It is a suggestion written into the config for the
// owner to edit, not a market rule.
var suggestedFloor = map[string]float64{
	"gb200": 4.50, "b200": 3.80, "b100": 3.20, "h200": 2.60, "gh200": 2.20, "h100": 1.90, "h800": 1.70, "h20": 0.90,
	"a800": 1.00, "a100": 0.90, "a40": 0.35, "a30": 0.30, "a16": 0.15, "a10g": 0.30, "a10": 0.28, "a2": 0.10,
	"l40s": 0.70, "l40": 0.60, "l20": 0.45, "l4": 0.25, "t4": 0.12,
	"v100s": 0.22, "v100": 0.20, "p100": 0.12, "p40": 0.10, "p4": 0.05, "k80": 0.04, "m60": 0.04, "m40": 0.04,
	"rtx-pro-6000": 0.90, "rtx-6000-ada": 0.60, "rtx-5000-ada": 0.40, "rtx-4500-ada": 0.30, "rtx-4000-ada": 0.20,
	"rtx-a6000": 0.35, "rtx-a5000": 0.22, "rtx-a4500": 0.18, "rtx-a4000": 0.15,
	"rtx-5090": 0.55, "rtx-5080": 0.30, "rtx-4090": 0.35, "rtx-4080-super": 0.22, "rtx-4080": 0.20,
	"rtx-4070-ti-super": 0.15, "rtx-4070-ti": 0.13, "rtx-3090-ti": 0.20, "rtx-3090": 0.18, "rtx-3080-ti": 0.13, "rtx-3080": 0.12,
}

// floorPerGB is the fallback for a family the table does not list: USD per
// GPU-hour per GB of VRAM, with a floor of one cent.
const floorPerGB = 0.008

// SuggestFloor is the suggested price floor for a set of GPUs: that of the
// cheapest one (a floor applies to every GPU of the machine), and which
// family it came from.
func suggestFloor(gpus []terms.GPU) (float64, string) {
	best, why := math.Inf(1), ""
	for _, g := range gpus {
		m := gpumodel.Identify(g.Model)
		p, ok := suggestedFloor[m.Family]
		src := m.Family
		if !ok {
			p = math.Max(0.01, math.Round(floorPerGB*float64(g.VRAMGB)*100)/100)
			src = fmt.Sprintf("%s (not in the table; %.3f/GB of VRAM)", m.Family, floorPerGB)
		}
		if p < best {
			best, why = p, src
		}
	}
	if math.IsInf(best, 1) {
		return 0, ""
	}
	return best, why
}

func providerInitCommand() *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "detect this machine's GPUs, container engine and isolation and write a commented provider config.yaml",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "where to write; default <data-dir>/config.yaml"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "accept the detected and suggested values without asking"},
			&cli.BoolFlag{Name: "force", Usage: "overwrite an existing config file"},
			&cli.StringSliceFlag{Name: "gpu", Usage: "declare a GPU as MODEL:VRAM_GB, e.g. \"RTX 4090:24\" (repeatable; used where NVML finds none)"},
			&cli.StringFlag{Name: "region", Usage: "where this machine is, e.g. eu-west"},
			&cli.Float64Flag{Name: "price-floor", Usage: "minimum USD per GPU-hour; default suggested from the GPU model"},
			&cli.GenericFlag{Name: "window", Value: &repeated{}, Usage: "availability window \"[DAYS ]HH:MM-HH:MM\", e.g. \"mon-fri 19:00-07:00\" or \"sat,sun 00:00-24:00\" (repeatable; default always)"},
			&cli.StringFlag{Name: "timezone", Usage: "IANA zone of the windows; default UTC"},
			&cli.StringSliceFlag{Name: "listen", Usage: "libp2p listen multiaddr (repeatable); default TCP and QUIC on port 4001"},
			&cli.StringSliceFlag{Name: "bootstrap", Usage: "bootstrap peer multiaddr ending in /p2p/<id> (repeatable)"},
			&cli.StringFlag{Name: "metrics-addr", Value: "127.0.0.1:9464", Usage: "loopback address of the Prometheus metrics listener (\"\" turns it off)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			return providerInitAction(c, newDoctorProbes(client(c)))
		},
	}
}

// initAnswers is what the config is written from.
type initAnswers struct {
	GPUs        []terms.GPU
	GPUSource   string
	Detected    string // one line on what was found
	Region      string
	Floor       float64
	FloorSource string
	Windows     []terms.Window
	Timezone    string
	Listen      []string
	Bootstrap   []string
	MetricsAddr string
	Notes       []string // detection results, written as comments
}

func providerInitAction(c *cli.Context, p doctorProbes) error {
	path := c.String("config")
	if path == "" {
		path = config.Paths{Dir: c.String("data-dir")}.Config()
	}
	if _, err := os.Stat(path); err == nil && !c.Bool("force") {
		return fmt.Errorf("%s exists; pass --force to overwrite it", path)
	}
	a := initAnswers{Region: c.String("region"), Timezone: c.String("timezone"), Listen: c.StringSlice("listen"),
		Bootstrap: c.StringSlice("bootstrap"), MetricsAddr: c.String("metrics-addr")}
	if len(a.Listen) == 0 {
		a.Listen = config.DefaultConfig().Listen
	}
	for _, s := range c.StringSlice("gpu") {
		g, err := parseGPUFlag(s)
		if err != nil {
			return err
		}
		a.GPUs = append(a.GPUs, g)
	}
	for _, s := range c.Generic("window").(*repeated).vals {
		w, err := parseWindowFlag(s)
		if err != nil {
			return err
		}
		a.Windows = append(a.Windows, w)
	}
	inv, nvmlErr := p.NVML()
	switch {
	case nvmlErr == nil && len(inv.GPUs) > 0:
		a.GPUSource = runtime.GPUSourceAuto
		a.Detected = fmt.Sprintf("NVML: %s, driver %s, CUDA %s", gpuModels(inv.GPUs), orDash(inv.Driver), orDash(inv.CUDA))
		if len(a.GPUs) > 0 {
			a.Notes = append(a.Notes, "--gpu ignored: the driver's GPUs are sold (set gpu_source: declared to sell the declared list instead)")
		}
		a.GPUs = inv.GPUs
	case len(a.GPUs) > 0:
		a.GPUSource = runtime.GPUSourceDeclared
		a.Detected = "no NVIDIA driver (" + errText(nvmlErr) + "); GPUs declared with --gpu"
	default:
		a.Detected = "no NVIDIA driver (" + errText(nvmlErr) + ")"
	}
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	if st, err := p.Docker(ctx); err != nil {
		a.Notes = append(a.Notes, "Docker: not reachable; jobs run in the process sandbox and image jobs are refused")
	} else if st.GPU == "" {
		a.Notes = append(a.Notes, "Docker: answers, no NVIDIA runtime or CDI devices; image jobs run without GPUs (install nvidia-container-toolkit)")
	} else {
		a.Notes = append(a.Notes, "Docker: answers; GPUs reach containers through "+st.GPU)
	}
	cg := p.Cgroups()
	if cg.Version == 0 {
		a.Notes = append(a.Notes, "cgroups: none ("+cg.Detail+")")
	} else {
		a.Notes = append(a.Notes, fmt.Sprintf("cgroups: v%d (%s); sandbox: %s", cg.Version, strings.Join(cg.Controllers, ","), orDash(cg.Detail)))
	}
	var ns []string
	for _, k := range []string{runtime.NamespaceNet, runtime.NamespaceMount, runtime.NamespaceUser} {
		if p.Namespace(k) == nil {
			ns = append(ns, k)
		}
	}
	a.Notes = append(a.Notes, "namespaces this user can create: "+orDash(strings.Join(ns, ",")))

	if !c.Bool("yes") {
		if err := askInit(c.App.Reader, c.App.Writer, &a); err != nil {
			return err
		}
	}
	if len(a.GPUs) == 0 {
		return errors.New("no GPU to sell: NVML finds none; declare them with --gpu MODEL:VRAM_GB (e.g. --gpu \"RTX 4090:24\")")
	}
	a.Floor, a.FloorSource = c.Float64("price-floor"), "--price-floor"
	if !c.IsSet("price-floor") || a.Floor <= 0 {
		a.Floor, a.FloorSource = suggestFloor(a.GPUs)
		a.FloorSource = "suggested for " + a.FloorSource
	}
	body := renderConfig(a)
	// The written file must load as the daemon loads it.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		if mkErr := os.MkdirAll(filepath.Dir(path), 0o700); mkErr != nil {
			return fmt.Errorf("config dir: %w", mkErr)
		}
		if tmp, err = os.CreateTemp(filepath.Dir(path), ".config-*.yaml"); err != nil {
			return err
		}
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(body); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if _, err := config.LoadConfig(tmp.Name(), true); err != nil {
		return fmt.Errorf("generated config does not load (a bug or a bad flag): %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	w := c.App.Writer
	fmt.Fprintf(w, "wrote %s\n", path)
	fmt.Fprintf(w, "GPUs:        %s (%s)\n", gpuModels(a.GPUs), a.Detected)
	fmt.Fprintf(w, "price floor: $%.2f/GPU-h (%s)\n", a.Floor, a.FloorSource)
	for _, n := range a.Notes {
		fmt.Fprintf(w, "note:        %s\n", n)
	}
	fmt.Fprintf(w, "next:        gpumesh doctor --role provider; then gpumesh daemon\n")
	return nil
}

// repeated is a repeatable string flag whose values may hold commas
// (cli's slice flags split on them; a window's days are a comma list).
type repeated struct{ vals []string }

func (r *repeated) Set(s string) error { r.vals = append(r.vals, s); return nil }
func (r *repeated) String() string     { return strings.Join(r.vals, "; ") }

func errText(err error) string {
	if err == nil {
		return "no devices"
	}
	return err.Error()
}

// parseGPUFlag reads "MODEL:VRAM_GB".
func parseGPUFlag(s string) (terms.GPU, error) {
	i := strings.LastIndex(s, ":")
	if i <= 0 {
		return terms.GPU{}, fmt.Errorf("--gpu %q: want MODEL:VRAM_GB, e.g. \"RTX 4090:24\"", s)
	}
	model := strings.TrimSpace(s[:i])
	vram, err := strconv.Atoi(strings.TrimSpace(s[i+1:]))
	if err != nil || vram <= 0 || model == "" {
		return terms.GPU{}, fmt.Errorf("--gpu %q: want MODEL:VRAM_GB with VRAM_GB a positive whole number", s)
	}
	return terms.GPU{Model: model, VRAMGB: vram}, nil
}

// parseWindowFlag reads "[DAYS ]HH:MM-HH:MM"; DAYS is a comma list or a
// range such as mon-fri. The window's own rules (auction) check the values
// when the written config is loaded.
func parseWindowFlag(s string) (terms.Window, error) {
	fields := strings.Fields(s)
	var days, span string
	switch len(fields) {
	case 1:
		span = fields[0]
	case 2:
		days, span = fields[0], fields[1]
	default:
		return terms.Window{}, fmt.Errorf("--window %q: want \"[DAYS ]HH:MM-HH:MM\", e.g. \"mon-fri 19:00-07:00\"", s)
	}
	from, to, ok := strings.Cut(span, "-")
	if !ok {
		return terms.Window{}, fmt.Errorf("--window %q: want HH:MM-HH:MM", s)
	}
	w := terms.Window{From: from, To: to}
	if days != "" {
		var err error
		if w.Days, err = expandDays(days); err != nil {
			return terms.Window{}, fmt.Errorf("--window %q: %v", s, err)
		}
	}
	if err := (terms.Policy{PriceFloor: 1, Availability: []terms.Window{w}}).Validate(); err != nil {
		return terms.Window{}, fmt.Errorf("--window %q: %v", s, err)
	}
	return w, nil
}

var weekdays = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

func expandDays(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(strings.ToLower(s), ",") {
		a, b, isRange := strings.Cut(part, "-")
		ia, ib := dayIndex(a), dayIndex(b)
		switch {
		case ia < 0:
			return nil, fmt.Errorf("unknown day %q (mon..sun)", a)
		case !isRange:
			out = append(out, weekdays[ia])
		case ib < 0:
			return nil, fmt.Errorf("unknown day %q (mon..sun)", b)
		default:
			for i := ia; ; i = (i + 1) % 7 {
				out = append(out, weekdays[i])
				if i == ib {
					break
				}
			}
		}
	}
	return out, nil
}

func dayIndex(d string) int {
	for i, w := range weekdays {
		if strings.TrimSpace(d) == w {
			return i
		}
	}
	return -1
}

// askInit asks for what flags left open, showing the default in brackets;
// an empty answer keeps it.
func askInit(r io.Reader, w io.Writer, a *initAnswers) error {
	if r == nil {
		r = os.Stdin
	}
	in := bufio.NewScanner(r)
	ask := func(q, def string) (string, error) {
		fmt.Fprintf(w, "%s [%s]: ", q, def)
		if !in.Scan() {
			if err := in.Err(); err != nil {
				return "", err
			}
			return "", errors.New("no answer on stdin; pass --yes to accept the defaults")
		}
		if s := strings.TrimSpace(in.Text()); s != "" {
			return s, nil
		}
		return def, nil
	}
	if len(a.GPUs) == 0 {
		s, err := ask("No GPU detected. Declare GPUs (MODEL:VRAM_GB, comma-separated)", "")
		if err != nil {
			return err
		}
		for _, part := range strings.Split(s, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			g, err := parseGPUFlag(part)
			if err != nil {
				return err
			}
			a.GPUs = append(a.GPUs, g)
			a.GPUSource = runtime.GPUSourceDeclared
		}
	}
	s, err := ask("Region (e.g. eu-west, us-east; empty for none)", a.Region)
	if err != nil {
		return err
	}
	a.Region = s
	return nil
}

// renderConfig writes the config as commented YAML.
func renderConfig(a initAnswers) string {
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintf(&b, "# gpumesh provider configuration, written by `gpumesh provider init` on %s.\n", time.Now().UTC().Format(time.RFC3339))
	b.WriteString("# Edit freely: the daemon refuses unknown keys, so a typo never changes what is sold.\n#\n# What init found:\n")
	fmt.Fprintf(&b, "#   GPUs: %s\n", a.Detected)
	for _, n := range a.Notes {
		fmt.Fprintf(&b, "#   %s\n", n)
	}
	b.WriteString("\n# libp2p listen addresses; open these ports (TCP and UDP) for renters outside your network.\nlisten:\n")
	for _, l := range a.Listen {
		fmt.Fprintf(&b, "  - %s\n", q(l))
	}
	b.WriteString("# Peers to join the network through (multiaddrs ending in /p2p/<peer id>).\nbootstrap:")
	if len(a.Bootstrap) == 0 {
		b.WriteString(" []\n")
	} else {
		b.WriteString("\n")
		for _, l := range a.Bootstrap {
			fmt.Fprintf(&b, "  - %s\n", q(l))
		}
	}
	b.WriteString("# Find peers on the local network by mDNS.\nmdns: false\nlog_level: info\n")
	fmt.Fprintf(&b, "# Where this machine is; renters with residency rules filter on it.\nregion: %s\n", q(a.Region))
	fmt.Fprintf(&b, "# Prometheus metrics and the status page on loopback only (\"\" turns them off);\n# metrics_pprof: true adds /debug/pprof/, metrics_token_file requires a bearer token.\nmetrics_addr: %s\n", q(a.MetricsAddr))
	b.WriteString("\nprovider:\n  enabled: true\n")
	src := a.GPUSource
	if src == "" {
		src = runtime.GPUSourceAuto
	}
	fmt.Fprintf(&b, "  # auto: the driver's GPUs when there is a driver, else the list below; nvml: the driver or fail;\n  # declared: the list below, never the driver.\n  gpu_source: %s\n", src)
	if src == runtime.GPUSourceDeclared {
		b.WriteString("  gpus:\n")
		for _, g := range a.GPUs {
			fmt.Fprintf(&b, "    - {model: %s, vram_gb: %d}\n", q(g.Model), g.VRAMGB)
		}
	} else {
		b.WriteString("  # Declared GPUs, used only without a driver: - {model: \"RTX 4090\", vram_gb: 24}\n  gpus: []\n")
	}
	b.WriteString("  # auto runs image jobs in Docker when it answers and the rest in the process sandbox.\n  executor: auto\n")
	b.WriteString("  advertise_ttl: 10m\n  heartbeat_interval: 5s\n  preempt_grace: 10s\n")
	b.WriteString("  policy:\n")
	fmt.Fprintf(&b, "    # Minimum USD per GPU-hour (%s).\n    price_floor: %s\n", a.FloorSource, strconv.FormatFloat(a.Floor, 'f', -1, 64))
	b.WriteString("    # Peak windows cost peak_multiplier times the floor, e.g.\n    # peak_windows: [{days: [mon, tue, wed, thu, fri], from: \"09:00\", to: \"18:00\"}]\n    peak_multiplier: 1.5\n")
	b.WriteString("    # At full occupancy the price is (1 + occupancy_surcharge) times the base.\n    occupancy_surcharge: 0.2\n")
	b.WriteString("    # When the machine is for sale; empty means always. e.g. evenings and weekends:\n")
	b.WriteString("    # availability: [{days: [mon, tue, wed, thu, fri], from: \"19:00\", to: \"07:00\"}, {days: [sat, sun], from: \"00:00\", to: \"24:00\"}]\n")
	if len(a.Windows) == 0 {
		b.WriteString("    availability: []\n")
	} else {
		b.WriteString("    availability:\n")
		for _, w := range a.Windows {
			days := ""
			if len(w.Days) > 0 {
				days = "days: [" + strings.Join(w.Days, ", ") + "], "
			}
			fmt.Fprintf(&b, "      - {%sfrom: %s, to: %s}\n", days, q(w.From), q(w.To))
		}
	}
	fmt.Fprintf(&b, "    # IANA zone of the windows; empty is UTC.\n    timezone: %s\n", q(a.Timezone))
	b.WriteString("    # Accept interruptible (bronze) work, and let gold work preempt it here.\n    accept_preemptible: true\n    allow_preemption: true\n")
	b.WriteString("    # Stop bidding above these readings (0 = no limit).\n    max_temp_c: 85\n    max_power_w: 0\n")
	b.WriteString("    # Longest single lease (0 = no cap).\n    max_lease: 24h\n")
	return b.String()
}
