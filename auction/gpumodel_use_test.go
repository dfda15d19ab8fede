package auction

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// TestSpellingsShareTopicsAndMatch: a renter asking for "RTX 4090" and a
// provider whose driver says "NVIDIA GeForce RTX 4090" (or who declared
// "RTX4090") meet on one topic, and a job for the H100 family is eligible
// on an H100 whose NVML name is "NVIDIA H100 80GB HBM3".
func TestSpellingsShareTopicsAndMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ want, provider string }{
		{"RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"RTX 4090", "RTX4090"},
		{"4090", "rtx 4090"},
		{"H100", "NVIDIA H100 80GB HBM3"},
		{"h100-pcie", "NVIDIA H100 PCIe"},
	} {
		t.Run(c.want+" for "+c.provider, func(t *testing.T) {
			j := &terms.Job{Region: "eu", GPUModels: []string{c.want}}
			capa := &terms.Capability{Region: "eu-west", GPUs: []terms.GPU{{Model: c.provider, VRAMGB: 80}}}
			jt := JobTopics(j)
			pt := ProviderTopics(capa)
			if len(jt) != 1 || !slices.Contains(pt, jt[0]) {
				t.Fatalf("job topics %v not among provider topics %v", jt, pt)
			}
			ps, job := baseState(), evalJob()
			ps.Cap.GPUs = gpus(c.provider, 80, 2)
			job.GPUModels = []string{c.want}
			if _, err := Evaluate(ps, job, at(0, "10:00")); err != nil {
				t.Fatalf("not eligible: %v", err)
			}
		})
	}
	// A request for a variant leaves the other variants out.
	ps, job := baseState(), evalJob()
	ps.Cap.GPUs = gpus("NVIDIA H100 80GB HBM3", 80, 2)
	job.GPUModels = []string{"H100 PCIe"}
	if _, err := Evaluate(ps, job, at(0, "10:00")); err == nil {
		t.Fatal("an SXM H100 was offered for an H100 PCIe request")
	}
}

// TestDeclaredVRAMSizesTheModel: providers that declared "A100" with
// vram_gb 80 are found by `providers --gpu "A100 80GB"` and bid for a job
// asking for "A100 80GB" (it was declined gpu_model: the catalogue alone
// cannot size an A100), while a 40 GB one is not taken for them; a
// request for the family still finds both.
func TestDeclaredVRAMSizesTheModel(t *testing.T) {
	t.Parallel()
	big := &terms.Capability{Region: "eu", GPUs: gpus("A100", 80, 2)}
	small := &terms.Capability{Region: "eu", GPUs: gpus("A100", 40, 2)}
	for _, c := range []struct {
		gpu        string
		big, small bool
	}{{"A100 80GB", true, false}, {"a100-80g", true, false}, {"A100 40GB", false, true}, {"A100", true, true}} {
		q := terms.Query{GPU: c.gpu}
		if got := big.Matches(q); got != c.big {
			t.Errorf("80 GB A100s match %q: %v, want %v", c.gpu, got, c.big)
		}
		if got := small.Matches(q); got != c.small {
			t.Errorf("40 GB A100s match %q: %v, want %v", c.gpu, got, c.small)
		}
	}
	ps, job := baseState(), evalJob()
	ps.Cap.GPUs = gpus("A100", 80, 2)
	job.GPUModels = []string{"A100 80GB"}
	if _, err := Evaluate(ps, job, at(0, "10:00")); err != nil {
		t.Fatalf("a declared 80 GB A100 declined a job for A100 80GB: %v", err)
	}
	ps.Cap.GPUs = gpus("A100", 40, 2)
	var in *Ineligible
	if _, err := Evaluate(ps, job, at(0, "10:00")); !errors.As(err, &in) || in.Kind != "gpu_model" {
		t.Fatalf("a 40 GB A100 for a job asking for A100 80GB: %v, want declined gpu_model", err)
	}
	// A host with both sizes offers the job only its 80 GB devices.
	ps.Cap.GPUs = append(gpus("A100", 40, 2), gpus("A100", 80, 2)...)
	ps.Cal = NewCalendar(4)
	offer, err := Evaluate(ps, job, at(0, "10:00"))
	if err != nil || !slices.Equal(offer.Devices, []int{2, 3}) || offer.VRAMGB != 80 {
		t.Fatalf("mixed host: offer %+v, err %v; want devices [2 3] of 80 GB", offer, err)
	}
}
