package deploy

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository root, from this package's directory.
const repoRoot = "../../.."

// TestDockerignoreKeepsTheContextClean: building the image from the
// repository root sends no git history, no build outputs, no testnet
// state (data dirs with identity keys and ledgers) and no key file
// anywhere, while the sources, the deploy files and a prebuilt
// dist/gpumesh still go.
func TestDockerignoreKeepsTheContextClean(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore at the repository root: %v", err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, p := range []string{".git/HEAD", "bin/gpumesh", "testnet/run/node0/db/000001.vlog", "testnet/run/node0/identity.key",
		"identity.key", "somewhere/else/identity.key", "testnet/run-bench/node3/config.yaml"} {
		if !dockerIgnores(patterns, p) {
			t.Errorf(".dockerignore sends %s into the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "cmd/gpumesh/main.go", "cmd/gpumesh/deploy/Dockerfile", "dist/gpumesh", "node/configkeys.go"} {
		if dockerIgnores(patterns, p) {
			t.Errorf(".dockerignore keeps %s out of the build context", p)
		}
	}
}

// dockerIgnores reports whether Docker's .dockerignore matching leaves
// path out: a pattern matches the path or one of its parent directories
// (path.Match, with a leading "**/" matching any depth); a later "!"
// pattern takes a match back.
func dockerIgnores(patterns []string, p string) bool {
	ignored := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		pat = strings.TrimPrefix(strings.TrimPrefix(pat, "!"), "/")
		for dir := p; dir != "." && dir != "/"; dir = path.Dir(dir) {
			match, _ := path.Match(pat, dir)
			if rest, ok := strings.CutPrefix(pat, "**/"); ok && !match {
				match, _ = path.Match(rest, path.Base(dir))
			}
			if match {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

// TestGoModMarksDirectRequirements: no module the repository's own code
// imports is marked `// indirect` in go.mod (all of them were, so the
// file did not say what gpumesh depends on; `go mod tidy` sorts them).
func TestGoModMarksDirectRequirements(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	indirect := map[string]bool{}
	var self string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		switch {
		case len(fields) == 2 && fields[0] == "module":
			self = fields[1]
		case len(fields) == 4 && fields[2] == "//" && fields[3] == "indirect":
			indirect[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil || self == "" {
		t.Fatalf("go.mod: module %q, %v", self, err)
	}
	fset := token.NewFileSet()
	direct := map[string]string{} // module -> a file importing it
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || n == "run" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		file, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range file.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			for m := ip; m != "." && m != "/"; m = path.Dir(m) {
				if indirect[m] {
					direct[m] = p
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for m, file := range direct {
		t.Errorf("go.mod marks %s `// indirect`, but %s imports it (go mod tidy)", m, strings.TrimPrefix(file, repoRoot+"/"))
	}
}
