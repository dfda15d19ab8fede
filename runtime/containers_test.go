package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestGPUPassthroughFromEngineInfo reads GPU support from GET /info the
// way Docker reports it: the NVIDIA runtime, CDI devices, or neither.
func TestGPUPassthroughFromEngineInfo(t *testing.T) {
	cases := []struct {
		name string
		info string
		want gpuPassthrough
		req  map[string]any
		// reqUUID is the request for devices 1 and 3 with known UUIDs.
		reqUUID map[string]any
	}{
		{"nvidia runtime", `{"Runtimes":{"runc":{},"nvidia":{"path":"nvidia-container-runtime"}}}`, gpuNVIDIA,
			map[string]any{"Driver": "nvidia", "DeviceIDs": []string{"1", "3"}, "Capabilities": [][]string{{"gpu"}}},
			map[string]any{"Driver": "nvidia", "DeviceIDs": []string{"GPU-b", "GPU-d"}, "Capabilities": [][]string{{"gpu"}}}},
		{"cdi devices", `{"Runtimes":{"runc":{}},"DiscoveredDevices":[{"Source":"cdi","ID":"nvidia.com/gpu=0"},{"Source":"cdi","ID":"nvidia.com/gpu=all"}]}`, gpuCDI,
			map[string]any{"Driver": "cdi", "DeviceIDs": []string{"nvidia.com/gpu=1", "nvidia.com/gpu=3"}},
			map[string]any{"Driver": "cdi", "DeviceIDs": []string{"nvidia.com/gpu=1", "nvidia.com/gpu=3"}}},
		{"plain engine", `{"Runtimes":{"runc":{},"io.containerd.runc.v2":{}}}`, gpuNone, nil, nil},
		{"other cdi vendor", `{"DiscoveredDevices":[{"Source":"cdi","ID":"vendor.com/fpga=0"}]}`, gpuNone, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var info engineInfo
			if err := json.Unmarshal([]byte(c.info), &info); err != nil {
				t.Fatal(err)
			}
			got := info.passthrough()
			if got != c.want {
				t.Fatalf("passthrough = %q, want %q", got, c.want)
			}
			if c.req != nil {
				if r := got.deviceRequest([]int{1, 3}, nil); !reflect.DeepEqual(r, c.req) {
					t.Fatalf("device request %v, want %v", r, c.req)
				}
				if r := got.deviceRequest([]int{1, 3}, []string{"GPU-b", "GPU-d"}); !reflect.DeepEqual(r, c.reqUUID) {
					t.Fatalf("device request with uuids %v, want %v", r, c.reqUUID)
				}
				// A MIG slice's job asks for its instance alone, by UUID,
				// however the engine passes GPUs: never its device.
				const mig = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"
				want := mig
				if got == gpuCDI {
					want = "nvidia.com/gpu=" + mig
				}
				if ids := got.deviceRequest([]int{1}, []string{mig})["DeviceIDs"]; !reflect.DeepEqual(ids, []string{want}) {
					t.Fatalf("MIG slice device request %v, want [%s]", ids, want)
				}
			}
		})
	}
}

// TestGPUImageJobRefusedWithoutPassthrough: on an engine with no NVIDIA
// runtime (this CI machine), a job that needs GPUs is refused before any
// container is created, and the executor says so for the capability record.
func TestGPUImageJobRefusedWithoutPassthrough(t *testing.T) {
	e := dockerExecutor(t)
	if e.gpu != gpuNone {
		t.Skip("this engine has GPU passthrough (" + string(e.gpu) + "); the refusal is covered by the info test")
	}
	if got := ContainersOf(e); got != terms.ContainersNoGPU {
		t.Fatalf("ContainersOf = %q, want %q", got, terms.ContainersNoGPU)
	}
	_, err := e.Start(context.Background(), Spec{ID: "d-gpu", Image: testImage, Command: []string{"/jobhelper", "echo", "x"},
		GPUs: []int{0}, Deadline: time.Now().Add(time.Minute)}, nil, nil)
	if !errors.Is(err, ErrNoGPUContainers) {
		t.Fatalf("Start = %v, want ErrNoGPUContainers", err)
	}
}

// TestAutoNeverRunsAnImageJobOnTheHost: without a container engine, auto
// refuses an image job instead of running its command as a process.
func TestAutoNeverRunsAnImageJobOnTheHost(t *testing.T) {
	a := &AutoExecutor{proc: newTestExecutor(t, ProcessOptions{})}
	if got := ContainersOf(a); got != terms.ContainersNone {
		t.Fatalf("ContainersOf = %q, want none", got)
	}
	marker := t.TempDir() + "/ran"
	_, err := a.Start(context.Background(), Spec{ID: "img-on-host", Image: "pytorch:2", Command: []string{"/bin/sh", "-c", "touch " + marker},
		Deadline: time.Now().Add(time.Minute)}, nil, nil)
	if !errors.Is(err, ErrNoContainers) {
		t.Fatalf("Start = %v, want ErrNoContainers", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the image job's command ran on the host (%v)", err)
	}
	// A command job still runs on the process backend.
	res, _, _, _ := run(t, a, Spec{ID: "cmd-on-host", Command: []string{"/bin/true"}, Deadline: time.Now().Add(time.Minute)})
	if res.ExitCode != 0 {
		t.Fatalf("command job: %+v", res)
	}
	if got := ContainersOf(newTestExecutor(t, ProcessOptions{})); got != terms.ContainersNone {
		t.Fatalf("process backend: %q", got)
	}
}

// TestDeclaredGPUsRunInContainers: with declared GPUs there is no device
// to pass through, so a GPU image job runs on any engine, seeing its
// leased indices in the environment as a process job would, and the
// executor reports GPU containers for the capability record.
func TestDeclaredGPUsRunInContainers(t *testing.T) {
	dockerExecutor(t) // skips without Docker; imports the test image
	e, err := NewDockerExecutor(DefaultDockerSocket, DockerOptions{Root: filepath.Join(t.TempDir(), "jobs"), DeclaredGPUs: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ContainersOf(e); got != terms.ContainersGPU {
		t.Fatalf("ContainersOf = %q, want %q", got, terms.ContainersGPU)
	}
	res, out, _, _ := run(t, e, Spec{ID: "d-declared", Image: testImage, Command: []string{"/jobhelper", "env"},
		GPUs: []int{1, 3}, Deadline: time.Now().Add(time.Minute)})
	if res.ExitCode != 0 || !strings.Contains(out, EnvCUDA+"=1,3\n") {
		t.Fatalf("declared-GPU container: %+v, env %q", res, out)
	}
}
