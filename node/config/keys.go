package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// configKeys maps each struct type a config file decodes into (by its
// name in YAML's errors, e.g. "config.ProviderConfig") to where it sits
// ("provider"; "" for the top level, or when it sits in several places)
// and the keys it accepts.
type configKeys map[string]*keySet

type keySet struct {
	path      string
	ambiguous bool
	keys      []string
}

var knownConfigKeys = func() configKeys {
	ks := configKeys{}
	ks.walk(reflect.TypeOf(Config{}), "")
	return ks
}()

func (ks configKeys) walk(t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return
	}
	name := t.String()
	if s, seen := ks[name]; seen {
		if s.path != path {
			s.ambiguous = true
		}
		return
	}
	s := &keySet{path: path}
	ks[name] = s
	ks.fields(s, t, path)
}

// fields adds t's keys to s, as yaml.v3 names them (the yaml tag, else the
// lower-cased field name; inline structs' keys as their own).
func (ks configKeys) fields(s *keySet, t reflect.Type, path string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		key, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				ks.fields(s, ft, path)
			}
			continue
		}
		if key == "" {
			key = strings.ToLower(f.Name)
		}
		s.keys = append(s.keys, key)
		ks.walk(f.Type, joinKey(path, key))
	}
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var unknownFieldRE = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)

// configErrorText is a config decoding error on one line, an unknown key
// said as such, with where it is and the key probably meant: "unknown
// config key 'lisen' (line 1); did you mean 'listen'?".
func configErrorText(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	parts := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		e = strings.TrimSpace(e)
		parts[i] = e
		m := unknownFieldRE.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		parts[i] = knownConfigKeys.unknown(m[2], m[3], line)
	}
	return strings.Join(parts, "; ")
}

// unknown describes key, given in a map of type typ at line.
func (ks configKeys) unknown(key, typ string, line int) string {
	s := ks[typ]
	where := func(s *keySet, k string) string {
		if s == nil || s.ambiguous {
			return k
		}
		return joinKey(s.path, k)
	}
	msg := fmt.Sprintf("unknown config key '%s' (line %d)", where(s, key), line)
	if s != nil {
		if k := closestKey(key, s.keys); k != "" {
			return msg + fmt.Sprintf("; did you mean '%s'?", where(s, k))
		}
	}
	// A key that belongs elsewhere, e.g. price_floor at the top level.
	for _, other := range ks {
		if other == s || other.ambiguous {
			continue
		}
		for _, k := range other.keys {
			if normKey(k) == normKey(key) {
				return msg + fmt.Sprintf("; did you mean '%s'?", joinKey(other.path, k))
			}
		}
	}
	return msg
}

func normKey(k string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k))
}

// closestKey is the key of keys that key most probably misspells: the same
// but for case, '_' and '-', else the one within a few edits; "" when none
// is close.
func closestKey(key string, keys []string) string {
	best, bestD := "", -1
	for _, k := range keys {
		if normKey(k) == normKey(key) {
			return k
		}
		d := editDistance(strings.ToLower(key), k)
		if d <= max(1, len(k)/3) && (bestD < 0 || d < bestD) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
