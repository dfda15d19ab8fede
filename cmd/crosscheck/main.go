// Command crosscheck type-checks packages, and every package they import,
// for other targets without cgo, from source: for each GOOS/GOARCH given,
// the files `go build` would compile there (go list's, for that target)
// must type-check, so that a file only another OS or architecture
// compiles cannot break a release build. It is `make cross`'s check: a
// type-check from source costs a fraction of compiling the tree again
// for each target (it generates no code and links nothing), and, run on
// an empty build cache, it leaves the tests' compiles the CPU.
//
// Besides what go/types reports, it does the compiler's one check on a
// package of this module that go/types leaves out: a function declared
// without a body needs an assembly file or a //go:linkname to provide it.
//
// Usage: crosscheck GOOS/GOARCH... -- package...
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"go/version"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// pkg is one package as go list describes it for a target, and what
// checking it gave.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	SFiles     []string
	CgoFiles   []string
	Imports    []string
	ImportMap  map[string]string
	Standard   bool
	Module     *struct {
		Main      bool
		GoVersion string
	}
	Error *struct{ Err string }

	done  chan struct{}
	types *types.Package
	errs  []string
}

// maxErrs bounds the errors reported of one package.
const maxErrs = 10

func main() {
	targets, patterns, ok := splitArgs(os.Args[1:])
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: crosscheck GOOS/GOARCH... -- package...")
		os.Exit(2)
	}
	failed := false
	for _, t := range targets {
		goos, goarch, _ := strings.Cut(t, "/")
		fmt.Printf("type-check %s (CGO_ENABLED=0)\n", t)
		if err := check("", goos, goarch, patterns, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", t, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// splitArgs splits the arguments at "--" into targets and packages.
func splitArgs(args []string) (targets, patterns []string, ok bool) {
	for i, a := range args {
		if a == "--" {
			targets, patterns = args[:i], args[i+1:]
			break
		}
	}
	if len(targets) == 0 || len(patterns) == 0 {
		return nil, nil, false
	}
	for _, t := range targets {
		if goos, goarch, ok := strings.Cut(t, "/"); !ok || goos == "" || goarch == "" {
			return nil, nil, false
		}
	}
	return targets, patterns, true
}

// check type-checks patterns (as go list in dir names them; "": the
// current directory) and their imports for goos/goarch, writing each
// package's errors to w; it fails if any package has one.
func check(dir, goos, goarch string, patterns []string, w io.Writer) error {
	pkgs, err := list(dir, goos, goarch, patterns)
	if err != nil {
		return err
	}
	byPath := make(map[string]*pkg, len(pkgs))
	for _, p := range pkgs {
		p.done = make(chan struct{})
		byPath[p.ImportPath] = p
	}
	sizes := types.SizesFor("gc", goarch)
	if sizes == nil {
		return fmt.Errorf("no sizes for GOARCH %s", goarch)
	}
	goVersion := version.Lang(runtime.Version()) // std's language: the toolchain's
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(p.done)
			for _, imp := range p.Imports {
				if d := byPath[resolve(p, imp)]; d != nil {
					<-d.done
				}
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			typeCheck(p, byPath, sizes, goVersion)
		}()
	}
	wg.Wait()
	bad := 0
	for _, p := range pkgs {
		if len(p.errs) == 0 {
			continue
		}
		bad++
		for _, e := range p.errs {
			fmt.Fprintf(w, "%s: %s\n", p.ImportPath, e)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d packages do not type-check", bad, len(pkgs))
	}
	return nil
}

// list returns patterns and their dependencies as go list describes them
// for goos/goarch without cgo, each after its imports.
func list(dir, goos, goarch string, patterns []string) ([]*pkg, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps", "-e",
		"-json=ImportPath,Dir,GoFiles,SFiles,CgoFiles,Imports,ImportMap,Standard,Module,Error"}, patterns...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []*pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// resolve is the package path that p's import path imp names (std's
// vendored packages are imported by another path).
func resolve(p *pkg, imp string) string {
	if r, ok := p.ImportMap[imp]; ok {
		return r
	}
	return imp
}

// typeCheck type-checks p, whose imports are checked already, recording
// its errors.
func typeCheck(p *pkg, byPath map[string]*pkg, sizes types.Sizes, goVersion string) {
	if p.Error != nil {
		p.errs = append(p.errs, p.Error.Err)
		return
	}
	if p.ImportPath == "unsafe" {
		p.types = types.Unsafe
		return
	}
	if len(p.CgoFiles) > 0 {
		p.errs = append(p.errs, "has cgo files with CGO_ENABLED=0")
		return
	}
	main := p.Module != nil && p.Module.Main
	mode := parser.SkipObjectResolution
	if main {
		mode |= parser.ParseComments
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, mode)
		if err != nil {
			p.errs = append(p.errs, err.Error())
			return
		}
		files = append(files, f)
	}
	if main && len(p.SFiles) == 0 {
		p.errs = append(p.errs, missingBodies(fset, files)...)
	}
	lang := goVersion
	if p.Module != nil && p.Module.GoVersion != "" {
		lang = "go" + p.Module.GoVersion
	}
	conf := types.Config{
		GoVersion: lang,
		Sizes:     sizes,
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if path == "unsafe" {
				return types.Unsafe, nil
			}
			d := byPath[resolve(p, path)]
			if d == nil || d.types == nil {
				return nil, fmt.Errorf("%s: not type-checked", path)
			}
			return d.types, nil
		}),
		Error: func(err error) {
			if len(p.errs) < maxErrs {
				p.errs = append(p.errs, err.Error())
			}
		},
	}
	p.types, _ = conf.Check(p.ImportPath, fset, files, nil)
}

// missingBodies reports the functions of files declared without a body
// and without a //go:linkname that provides one: the compiler refuses
// them in a package with no assembly.
func missingBodies(fset *token.FileSet, files []*ast.File) []string {
	var errs []string
	for _, f := range files {
		linked := map[string]bool{}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if rest, ok := strings.CutPrefix(c.Text, "//go:linkname "); ok {
					linked[strings.Fields(rest)[0]] = true
				}
			}
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body == nil && !linked[fd.Name.Name] {
				errs = append(errs, fmt.Sprintf("%s: missing function body", fset.Position(fd.Pos())))
			}
		}
	}
	return errs
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
