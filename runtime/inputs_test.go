package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inputsDir is a read-only inputs dir, traversable by job uids, holding
// data = "dataset".
func inputsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(traversableTempDir(t), "inputs-x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("dataset\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	return dir
}

func TestProcessInputs(t *testing.T) {
	e := newTestExecutor(t, ProcessOptions{})
	dir := inputsDir(t)
	res, out, _, _ := run(t, e, Spec{ID: "in-env", Command: []string{helperBin, "env"}, Inputs: dir})
	if res.ExitCode != 0 || !strings.Contains(out, EnvInputs+"="+dir+"\n") {
		t.Fatalf("env: %+v\n%s", res, out)
	}
	res, out, _, _ = run(t, e, Spec{ID: "in-cat", Command: []string{helperBin, "cat", filepath.Join(dir, "data")}, Inputs: dir})
	if res.ExitCode != 0 || out != "dataset\n" {
		t.Fatalf("cat input: %+v %q", res, out)
	}
	// Without inputs the variable is absent.
	_, out, _, _ = run(t, e, Spec{ID: "in-none", Command: []string{helperBin, "env"}})
	if strings.Contains(out, EnvInputs+"=") {
		t.Fatalf("%s set for a job without inputs:\n%s", EnvInputs, out)
	}
}

func TestSpecInputsValidated(t *testing.T) {
	for _, tc := range []struct{ name, inputs string }{
		{"relative", "inputs"},
		{"colon", "/a:b"},
		{"env reserved", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{ID: "x", Command: []string{"true"}, Inputs: tc.inputs}
			if tc.inputs == "" {
				s.Env = map[string]string{EnvInputs: "/elsewhere"}
			}
			if err := s.validate(time.Now()); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestDockerInputsMountedReadOnly(t *testing.T) {
	e := dockerExecutor(t)
	dir := inputsDir(t)
	res, out, _, _ := run(t, e, Spec{ID: "d-in-cat", Image: testImage, Command: []string{"/jobhelper", "cat", "/inputs/data"}, Inputs: dir})
	if res.ExitCode != 0 || out != "dataset\n" {
		t.Fatalf("cat /inputs/data: %+v %q", res, out)
	}
	res, out, _, _ = run(t, e, Spec{ID: "d-in-env", Image: testImage, Command: []string{"/jobhelper", "env"}, Inputs: dir})
	if res.ExitCode != 0 || !strings.Contains(out, EnvInputs+"=/inputs\n") {
		t.Fatalf("env: %+v\n%s", res, out)
	}
	res, _, _, _ = run(t, e, Spec{ID: "d-in-write", Image: testImage, Command: []string{"/jobhelper", "write", "/inputs/new", "x"}, Inputs: dir})
	if res.ExitCode == 0 {
		t.Fatal("a container wrote into its read-only inputs")
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatalf("file appeared in the inputs dir: %v", err)
	}
}
