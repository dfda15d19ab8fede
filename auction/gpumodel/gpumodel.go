// Package gpumodel is gpumesh's one catalogue of GPU model identity. It maps
// the names NVML reports ("NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA
// GeForce RTX 4090") and the spellings people type ("h100", "H100-80G",
// "RTX4090", "rtx 4090", "4090") to one canonical model: a family ("h100"),
// a variant where the family has several form factors ("sxm", "pcie",
// "nvl") and a memory size.
//
// Capability records, DHT discovery keys, gossip topics, eligibility and the
// CLI all go through Identify, so a renter asking for "H100" reaches every
// H100 provider whatever its driver calls the card. Unknown models keep
// working by their exact (normalised) name and are marked unknown.
package gpumodel

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Model is the canonical identity of a GPU model.
type Model struct {
	// Family is the key renters ask by and topics/DHT keys are built from:
	// "h100", "a100", "rtx-4090", "rtx-6000-ada". For an unknown model it
	// is the normalised name.
	Family string `json:"family"`
	// Variant is the form factor within the family ("sxm", "pcie", "nvl"),
	// empty when the family has one or the name does not say.
	Variant string `json:"variant,omitempty"`
	// MemGB is the model's memory; 0 when neither the name nor the
	// catalogue tells.
	MemGB int `json:"mem_gb,omitempty"`
	// Known is false for a model the catalogue does not list.
	Known bool `json:"known"`
}

// Key is the exact canonical key: family, then variant and memory where
// known, e.g. "h100-sxm-80g", "rtx-4090-24g", "t4-16g".
func (m Model) Key() string {
	k := m.Family
	if m.Variant != "" {
		k += "-" + m.Variant
	}
	if m.MemGB > 0 {
		k += "-" + strconv.Itoa(m.MemGB) + "g"
	}
	return k
}

// String is the model as shown to people: "H100 SXM 80GB", "RTX 4090 24GB",
// or "unknown (name)".
func (m Model) String() string {
	if !m.Known {
		return "unknown (" + m.Family + ")"
	}
	s := display[m.Family]
	if m.Variant != "" {
		s += " " + variantDisplay[m.Variant]
	}
	if m.MemGB > 0 {
		s += " " + strconv.Itoa(m.MemGB) + "GB"
	}
	return s
}

// Matches reports whether a device of model m satisfies a renter's request
// for want: a request by family matches every variant and memory size; one
// that names a variant or a memory size must match those too. Unknown
// models match by their exact normalised name.
func (m Model) Matches(want Model) bool {
	if m.Family != want.Family {
		return false
	}
	if want.Variant != "" && m.Variant != want.Variant {
		return false
	}
	if want.MemGB > 0 && m.MemGB != want.MemGB {
		return false
	}
	return true
}

// Match reports whether a device named have satisfies a request for want:
// Identify(have).Matches(Request(want)).
func Match(have, want string) bool { return Identify(have).Matches(Request(want)) }

// FamilyOf is the family key of a GPU name (Identify(name).Family).
func FamilyOf(name string) string { return Identify(name).Family }

// family is one catalogue entry.
type family struct {
	key     string
	display string
	// pattern matches the normalised name (lower case, words separated by
	// single spaces, "rtx4090" split into "rtx 4090"); it is anchored on
	// word boundaries by the catalogue builder.
	pattern string
	// mem is the memory when the family has one size (0: several).
	mem int
	// variants lists the family's form factors with their memory (0:
	// several sizes); empty for a family with one form factor.
	variants map[string]int
	// int32 is the family's peak INT32 multiply-add rate in tera-ops per
	// second (SMs × 64 INT32 lanes × 2 × boost clock; the slowest variant's
	// where variants differ), what the GPU challenge (attest/gpuproof)
	// expects a device to approach; 0 where the catalogue has no figure.
	int32 float64
	// defaultVariant is the variant of a device whose name names none (an
	// "H100 80GB HBM3" is the SXM5 board, an "H200" the SXM one).
	defaultVariant func(words string) string
}

// catalogue lists the families, most specific pattern first: "a100" before
// "a10", "l40s" before "l40" before "l4", "4070 ti super" before "4070 ti".
var catalogue = []family{
	// Datacenter, Blackwell/Hopper.
	{key: "gb200", display: "GB200", pattern: `gb200`, mem: 186},
	{key: "b200", display: "B200", pattern: `b200`, mem: 180},
	{key: "b100", display: "B100", pattern: `b100`, mem: 192},
	{key: "gh200", display: "GH200", int32: 33.5, pattern: `gh200`, mem: 96},
	{key: "h200", display: "H200", int32: 30.2, pattern: `h200`, variants: map[string]int{"sxm": 141, "nvl": 141},
		defaultVariant: func(string) string { return "sxm" }},
	{key: "h100", display: "H100", int32: 25.6, pattern: `h100`,
		variants: map[string]int{"sxm": 80, "pcie": 80, "nvl": 94},
		defaultVariant: func(w string) string {
			if strings.Contains(w, "hbm3") {
				return "sxm"
			}
			return ""
		}},
	{key: "h800", display: "H800", int32: 25.6, pattern: `h800`, mem: 80},
	{key: "h20", display: "H20", pattern: `h20`, mem: 96},
	// Ampere datacenter.
	{key: "a800", display: "A800", int32: 19.5, pattern: `a800`, variants: map[string]int{"sxm": 80, "pcie": 80}},
	{key: "a100", display: "A100", int32: 19.5, pattern: `a100`, variants: map[string]int{"sxm": 80, "pcie": 40}},
	{key: "a40", display: "A40", int32: 18.7, pattern: `a40`, mem: 48},
	{key: "a30", display: "A30", int32: 10.3, pattern: `a30`, mem: 24},
	{key: "a16", display: "A16", pattern: `a16`, mem: 16},
	{key: "a10g", display: "A10G", int32: 17.5, pattern: `a10g`, mem: 24},
	{key: "a10", display: "A10", int32: 15.6, pattern: `a10`, mem: 24},
	{key: "a2", display: "A2", pattern: `a2`, mem: 16},
	// Ada / Turing / Volta / Pascal / Kepler datacenter.
	{key: "l40s", display: "L40S", int32: 45.8, pattern: `l40s`, mem: 48},
	{key: "l40", display: "L40", int32: 45.3, pattern: `l40`, mem: 48},
	{key: "l20", display: "L20", pattern: `l20`, mem: 48},
	{key: "l4", display: "L4", int32: 15.1, pattern: `l4`, mem: 24},
	{key: "t4", display: "T4", int32: 8.1, pattern: `t4`, mem: 16},
	{key: "v100s", display: "V100S", int32: 16.4, pattern: `v100s`, mem: 32},
	{key: "v100", display: "V100", int32: 15.7, pattern: `v100`, variants: map[string]int{"sxm": 16, "pcie": 16}},
	{key: "p100", display: "P100", pattern: `p100`, mem: 16},
	{key: "p40", display: "P40", pattern: `p40`, mem: 24},
	{key: "p4", display: "P4", pattern: `p4`, mem: 8},
	{key: "k80", display: "K80", pattern: `k80`, mem: 12},
	{key: "m60", display: "M60", pattern: `m60`, mem: 8},
	{key: "m40", display: "M40", pattern: `m40`, mem: 12},
	// Workstation.
	{key: "rtx-pro-6000", display: "RTX PRO 6000", pattern: `rtx pro 6000`, mem: 96},
	{key: "rtx-6000-ada", display: "RTX 6000 Ada", int32: 45.5, pattern: `rtx 6000 ada`, mem: 48},
	{key: "rtx-5000-ada", display: "RTX 5000 Ada", pattern: `rtx 5000 ada`, mem: 32},
	{key: "rtx-4500-ada", display: "RTX 4500 Ada", pattern: `rtx 4500 ada`, mem: 24},
	{key: "rtx-4000-ada", display: "RTX 4000 Ada", pattern: `rtx 4000( sff)? ada`, mem: 20},
	{key: "rtx-a6000", display: "RTX A6000", int32: 19.4, pattern: `rtx a6000|^a6000`, mem: 48},
	{key: "rtx-a5000", display: "RTX A5000", pattern: `rtx a5000|^a5000`, mem: 24},
	{key: "rtx-a4500", display: "RTX A4500", pattern: `rtx a4500|^a4500`, mem: 20},
	{key: "rtx-a4000", display: "RTX A4000", pattern: `rtx a4000|^a4000`, mem: 16},
	{key: "rtx-a2000", display: "RTX A2000", pattern: `rtx a2000|^a2000`, mem: 12},
	{key: "quadro-rtx-8000", display: "Quadro RTX 8000", pattern: `quadro rtx 8000`, mem: 48},
	{key: "quadro-rtx-6000", display: "Quadro RTX 6000", pattern: `quadro rtx 6000`, mem: 24},
	{key: "quadro-rtx-5000", display: "Quadro RTX 5000", pattern: `quadro rtx 5000`, mem: 16},
	{key: "titan-rtx", display: "TITAN RTX", pattern: `titan rtx`, mem: 24},
	{key: "titan-v", display: "TITAN V", pattern: `titan v`, mem: 12},
	// Consumer (GeForce). A bare number ("4090") names the RTX card.
	{key: "rtx-5090", display: "RTX 5090", pattern: `(rtx )?5090`, mem: 32},
	{key: "rtx-5080", display: "RTX 5080", pattern: `(rtx )?5080`, mem: 16},
	{key: "rtx-5070-ti", display: "RTX 5070 Ti", pattern: `(rtx )?5070 ti`, mem: 16},
	{key: "rtx-5070", display: "RTX 5070", pattern: `(rtx )?5070`, mem: 12},
	{key: "rtx-4090", display: "RTX 4090", int32: 41.3, pattern: `(rtx )?4090( d)?`, mem: 24},
	{key: "rtx-4080-super", display: "RTX 4080 SUPER", pattern: `(rtx )?4080 super`, mem: 16},
	{key: "rtx-4080", display: "RTX 4080", int32: 24.4, pattern: `(rtx )?4080`, mem: 16},
	{key: "rtx-4070-ti-super", display: "RTX 4070 Ti SUPER", pattern: `(rtx )?4070 ti super`, mem: 16},
	{key: "rtx-4070-ti", display: "RTX 4070 Ti", pattern: `(rtx )?4070 ti`, mem: 12},
	{key: "rtx-4070-super", display: "RTX 4070 SUPER", pattern: `(rtx )?4070 super`, mem: 12},
	{key: "rtx-4070", display: "RTX 4070", int32: 14.9, pattern: `(rtx )?4070`, mem: 12},
	{key: "rtx-4060-ti", display: "RTX 4060 Ti", pattern: `(rtx )?4060 ti`},
	{key: "rtx-4060", display: "RTX 4060", pattern: `(rtx )?4060`, mem: 8},
	{key: "rtx-3090-ti", display: "RTX 3090 Ti", pattern: `(rtx )?3090 ti`, mem: 24},
	{key: "rtx-3090", display: "RTX 3090", int32: 17.8, pattern: `(rtx )?3090`, mem: 24},
	{key: "rtx-3080-ti", display: "RTX 3080 Ti", pattern: `(rtx )?3080 ti`, mem: 12},
	{key: "rtx-3080", display: "RTX 3080", int32: 14.9, pattern: `(rtx )?3080`},
	{key: "rtx-3070-ti", display: "RTX 3070 Ti", pattern: `(rtx )?3070 ti`, mem: 8},
	{key: "rtx-3070", display: "RTX 3070", int32: 12.0, pattern: `(rtx )?3070`, mem: 8},
	{key: "rtx-3060-ti", display: "RTX 3060 Ti", pattern: `(rtx )?3060 ti`, mem: 8},
	{key: "rtx-3060", display: "RTX 3060", int32: 6.4, pattern: `(rtx )?3060`},
	{key: "rtx-2080-ti", display: "RTX 2080 Ti", pattern: `(rtx )?2080 ti`, mem: 11},
	{key: "rtx-2080", display: "RTX 2080", pattern: `(rtx )?2080( super)?`, mem: 8},
	{key: "rtx-2070", display: "RTX 2070", pattern: `(rtx )?2070( super)?`, mem: 8},
	{key: "rtx-2060", display: "RTX 2060", pattern: `(rtx )?2060( super)?`},
	{key: "gtx-1080-ti", display: "GTX 1080 Ti", pattern: `(gtx )?1080 ti`, mem: 11},
	{key: "gtx-1080", display: "GTX 1080", pattern: `(gtx )?1080`, mem: 8},
	{key: "gtx-1070", display: "GTX 1070", pattern: `(gtx )?1070( ti)?`, mem: 8},
	{key: "gtx-1660", display: "GTX 1660", pattern: `(gtx )?1660( ti| super)?`, mem: 6},
}

var variantDisplay = map[string]string{"sxm": "SXM", "pcie": "PCIe", "nvl": "NVL"}

var (
	compiled []*regexp.Regexp
	display  = map[string]string{}
	byKey    = map[string]*family{}
)

func init() {
	compiled = make([]*regexp.Regexp, len(catalogue))
	for i := range catalogue {
		f := &catalogue[i]
		compiled[i] = regexp.MustCompile(`(^| )(` + f.pattern + `)( |$)`)
		display[f.key] = f.display
		byKey[f.key] = f
	}
}

// Families lists the catalogue's family keys, most specific first.
func Families() []string {
	out := make([]string, len(catalogue))
	for i, f := range catalogue {
		out[i] = f.key
	}
	return out
}

var (
	nonWord   = regexp.MustCompile(`[^a-z0-9]+`)
	gluedName = regexp.MustCompile(`(^| )(rtx|gtx|quadro|titan)(\d)`)
	memWord   = regexp.MustCompile(`^(\d+)(gb|g)$`)
	// vendor and marketing words that carry no identity.
	noise = map[string]bool{"nvidia": true, "geforce": true, "tesla": true, "gpu": true, "laptop": true, "graphics": true}
)

// normalise lower-cases a name, turns every run of separators into one
// space, splits "rtx4090" into "rtx 4090", drops vendor words and returns
// the words with the memory size (if a word like "80gb" names one).
func normalise(name string) (words string, mem int) {
	s := strings.TrimSpace(nonWord.ReplaceAllString(strings.ToLower(name), " "))
	s = gluedName.ReplaceAllString(s, "$1$2 $3")
	var kept []string
	for _, w := range strings.Fields(s) {
		if m := memWord.FindStringSubmatch(w); m != nil {
			mem, _ = strconv.Atoi(m[1])
			continue
		}
		if noise[w] {
			continue
		}
		kept = append(kept, w)
	}
	return strings.Join(kept, " "), mem
}

// variantOf reads the form factor from the words.
func variantOf(words string) string {
	for _, w := range strings.Fields(words) {
		switch {
		case strings.HasPrefix(w, "sxm"):
			return "sxm"
		case w == "pcie" || w == "pci":
			return "pcie"
		case w == "nvl":
			return "nvl"
		}
	}
	return ""
}

// Identify maps a device's name (as NVML reports it or a provider declares
// it) to its canonical model, filling the variant and memory from the
// catalogue where the name does not say.
func Identify(name string) Model { return parse(name, true) }

// Device identifies a device from its name and its memory in GB (NVML's
// total, or the vram_gb a provider declares): where the name gives no
// memory size, the device's own memory does, unless the catalogue's size
// for the model is within rounding of it (NVML reports a 16 GB T4 as 15
// GiB). So a declared "A100" of 80 GB is the 80 GB A100 that a request
// for "A100 80GB" asks for, which the name alone cannot tell (the A100
// comes in 40 and 80 GB). A memory of 0 means unknown: Identify(name).
func Device(name string, memGB int) Model {
	m := Identify(name)
	if memGB <= 0 || m.Family == "" || Request(name).MemGB > 0 {
		return m
	}
	if cat := m.MemGB; cat > 0 && 10*abs(cat-memGB) <= cat {
		return m
	}
	m.MemGB = memGB
	return m
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Request maps what a renter asked for ("H100", "h100-sxm", "RTX4090",
// "a100 80gb") to a model that constrains only what it names: a family
// alone matches every variant and memory size of it.
func Request(name string) Model { return parse(name, false) }

// parsed memoises parse: eligibility asks for the same few names on every
// call for bids. Names come from the network, so it is bounded: when full
// it starts over.
var parsed = struct {
	sync.Mutex
	m map[parseKey]Model
}{m: map[parseKey]Model{}}

type parseKey struct {
	name   string
	device bool
}

const maxParsed = 4096

func parse(name string, device bool) Model {
	k := parseKey{name, device}
	parsed.Lock()
	m, ok := parsed.m[k]
	parsed.Unlock()
	if ok {
		return m
	}
	m = parseName(name, device)
	parsed.Lock()
	if len(parsed.m) >= maxParsed {
		clear(parsed.m)
	}
	parsed.m[k] = m
	parsed.Unlock()
	return m
}

func parseName(name string, device bool) Model {
	words, mem := normalise(name)
	if words == "" {
		return Model{}
	}
	for i, f := range catalogue {
		loc := compiled[i].FindStringIndex(words)
		if loc == nil {
			continue
		}
		m := Model{Family: f.key, Known: true, MemGB: mem}
		if len(f.variants) > 0 {
			m.Variant = variantOf(words[:loc[0]] + " " + words[loc[1]:])
			if m.Variant == "" && device && f.defaultVariant != nil {
				m.Variant = f.defaultVariant(words)
			}
		}
		if m.MemGB == 0 && device {
			m.MemGB = f.mem
			if v := f.variants[m.Variant]; v > 0 {
				m.MemGB = v
			}
		}
		return m
	}
	return Model{Family: strings.ReplaceAll(words, " ", "-"), MemGB: mem}
}

// PeakInt32TOPS is a model's peak INT32 multiply-add rate in tera-ops per
// second (one multiply-add counts two), from the catalogue; false for an
// unknown model or a family the catalogue has no figure for.
func PeakInt32TOPS(m Model) (float64, bool) {
	if !m.Known {
		return 0, false
	}
	for _, f := range catalogue {
		if f.key == m.Family {
			return f.int32, f.int32 > 0
		}
	}
	return 0, false
}

// Nearest is up to n catalogue models whose names are closest to name (an
// unknown one, e.g. a typo: "H1000", "RTX 4900"), as shown to people, by
// edit distance between normalised names; none when name is known or
// nothing is within half its length.
func Nearest(name string, n int) []string {
	if Request(name).Known || n <= 0 {
		return nil
	}
	words, _ := normalise(name)
	want := strings.ReplaceAll(words, " ", "")
	if want == "" {
		return nil
	}
	type cand struct {
		display string
		d       int
	}
	var cs []cand
	for _, f := range catalogue {
		have := nonWord.ReplaceAllString(strings.ToLower(f.display), "")
		if d := editDistance(want, have); 2*d <= len(want) {
			cs = append(cs, cand{f.display, d})
		}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for _, c := range cs[:min(n, len(cs))] {
		out = append(out, c.display)
	}
	return out
}

// editDistance is the edit distance between a and b counting insertions,
// deletions, substitutions and swaps of adjacent characters (optimal
// string alignment: "4900" is one swap from "4090", the commonest typo).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
