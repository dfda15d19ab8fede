package auction

import (
	"slices"
	"testing"
)

// TestSpellingsShareTopicsAndMatch: a renter asking for "RTX 4090" and a
// provider whose driver says "NVIDIA GeForce RTX 4090" (or who declared
// "RTX4090") meet on one topic, and a job for the H100 family is eligible
// on an H100 whose NVML name is "NVIDIA H100 80GB HBM3".
func TestSpellingsShareTopicsAndMatch(t *testing.T) {
	for _, c := range []struct{ want, provider string }{
		{"RTX 4090", "NVIDIA GeForce RTX 4090"},
		{"RTX 4090", "RTX4090"},
		{"4090", "rtx 4090"},
		{"H100", "NVIDIA H100 80GB HBM3"},
		{"h100-pcie", "NVIDIA H100 PCIe"},
	} {
		t.Run(c.want+" for "+c.provider, func(t *testing.T) {
			j := &Job{Region: "eu", GPUModels: []string{c.want}}
			capa := &Capability{Region: "eu-west", GPUs: []GPU{{Model: c.provider, VRAMGB: 80}}}
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
