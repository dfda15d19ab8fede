package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeCgroups(t *testing.T) {
	write := func(t *testing.T, p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none := func() (*cgroups, string) { return nil, "not writable here" }
	cases := []struct {
		name   string
		layout func(t *testing.T, root string)
		want   CgroupStatus
	}{
		{"v2", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
		}, CgroupStatus{Version: 2, Controllers: []string{"cpu", "cpuset", "io", "memory", "pids"}, Detail: "not writable here"}},
		{"v1", func(t *testing.T, root string) {
			write(t, filepath.Join(root, "memory", "tasks"), "")
			write(t, filepath.Join(root, "cpu,cpuacct", "tasks"), "")
			write(t, filepath.Join(root, "pids", "tasks"), "")
			if err := os.Mkdir(filepath.Join(root, "unified"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, CgroupStatus{Version: 1, Controllers: []string{"cpu", "cpuacct", "memory", "pids"}, Detail: "not writable here"}},
		{"none", func(*testing.T, string) {}, CgroupStatus{Detail: "no cgroup file system at "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.layout(t, root)
			got := probeCgroups(root, none)
			if got.Version != tc.want.Version || strings.Join(got.Controllers, ",") != strings.Join(tc.want.Controllers, ",") ||
				got.Usable || !strings.HasPrefix(got.Detail, tc.want.Detail) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
