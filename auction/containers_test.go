package auction

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestImageJobsNeedAContainerEngineWithGPUs: an image job gets no offer from
// a provider without a container engine, nor from one whose engine cannot
// give containers their GPUs; the reason says which.
func TestImageJobsNeedAContainerEngineWithGPUs(t *testing.T) {
	t.Parallel()
	now := at(0, "10:00")
	cases := []struct {
		name       string
		containers terms.ContainerSupport
		image      string
		want       string // "" = eligible
	}{
		{"command job without engine", terms.ContainersNone, "", ""},
		{"image job without engine", terms.ContainersNone, "pytorch:2", "no container engine"},
		{"image job, engine without gpu passthrough", terms.ContainersNoGPU, "pytorch:2", "cannot give containers their GPUs"},
		{"image job, engine with gpus", terms.ContainersGPU, "pytorch:2", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps, j := baseState(), evalJob()
			ps.Cap.Containers = c.containers
			j.Run.Image = c.image
			_, err := Evaluate(ps, j, now)
			if c.want == "" {
				if err != nil {
					t.Fatalf("not eligible: %v", err)
				}
				return
			}
			reason, ok := IneligibleReason(err)
			if !ok || err.(*Ineligible).Kind != "image" || !strings.Contains(reason, c.want) {
				t.Fatalf("want image ineligibility %q, got %v", c.want, err)
			}
		})
	}
}
