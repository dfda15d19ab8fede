package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a module of one main package, its files by name, into a
// new directory and returns the directory.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/crosschecked\n\ngo 1.22\n"
	files["main.go"] = "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(f()) }\n"
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCheckSeesOnlyTheTargetsFiles: a package whose darwin-only file does
// not type-check fails for darwin/arm64 and passes for linux/arm64, and
// the other way round for a file only linux/arm64 compiles; the error
// names the file.
func TestCheckSeesOnlyTheTargetsFiles(t *testing.T) {
	t.Parallel()
	good := "package main\n\nfunc f() int { return 1 }\n"
	bad := "package main\n\nfunc f() int { return undefinedName }\n"
	for _, c := range []struct {
		name          string
		files         map[string]string
		fails, passes string
	}{
		{"darwin", map[string]string{"f_darwin.go": bad, "f_linux.go": good}, "darwin/arm64", "linux/arm64"},
		{"linux/arm64", map[string]string{"f_darwin.go": good, "f_linux_arm64.go": bad, "f_linux_amd64.go": good}, "linux/arm64", "darwin/arm64"},
	} {
		dir := module(t, c.files)
		for target, wantErr := range map[string]bool{c.fails: true, c.passes: false} {
			goos, goarch, _ := strings.Cut(target, "/")
			var out strings.Builder
			err := check(dir, goos, goarch, []string{"."}, &out)
			if (err != nil) != wantErr {
				t.Errorf("%s, for %s: %v\n%s", c.name, target, err, out.String())
			}
			if wantErr && !strings.Contains(out.String(), "undefined: undefinedName") {
				t.Errorf("%s, for %s: the error does not say what is undefined:\n%s", c.name, target, out.String())
			}
		}
	}
}

// TestCheckRefusesAMissingBody: a function of this module declared
// without a body, in a package with no assembly, fails as the compiler
// fails it; one a //go:linkname provides does not.
func TestCheckRefusesAMissingBody(t *testing.T) {
	t.Parallel()
	dir := module(t, map[string]string{"f_darwin.go": "package main\n\nfunc f() int\n", "f_linux.go": "package main\n\nfunc f() int { return 1 }\n"})
	var out strings.Builder
	if err := check(dir, "darwin", "arm64", []string{"."}, &out); err == nil || !strings.Contains(out.String(), "f_darwin.go:3:1: missing function body") {
		t.Fatalf("a body-less func: %v\n%s", err, out.String())
	}
	linked := "package main\n\nimport _ \"unsafe\"\n\n//go:linkname f runtime.fastrand\nfunc f() int\n"
	dir = module(t, map[string]string{"f_darwin.go": linked, "f_linux.go": "package main\n\nfunc f() int { return 1 }\n"})
	out.Reset()
	if err := check(dir, "darwin", "arm64", []string{"."}, &out); err != nil {
		t.Fatalf("a linknamed func: %v\n%s", err, out.String())
	}
}
