package cuda_test

import (
	"errors"
	"testing"

	"github.com/gpumesh/gpumesh/attest/gpuproof"
	"github.com/gpumesh/gpumesh/runtime/cuda"
)

// TestMatPowMatchesCPU runs the challenge kernels on the first device and
// compares them with the CPU path element for element (the same seeded
// matrices, the same product modulo 2^32). Where no driver loads it checks
// that the error says so instead.
func TestMatPowMatchesCPU(t *testing.T) {
	if err := cuda.Load(); err != nil {
		if !errors.Is(err, cuda.ErrUnavailable) {
			t.Fatalf("Load without a usable driver: %v, want ErrUnavailable", err)
		}
		if _, err := cuda.Open("", 256); !errors.Is(err, cuda.ErrUnavailable) {
			t.Fatalf("Open without a driver: %v, want ErrUnavailable", err)
		}
		t.Skipf("no CUDA driver on this host (%v): the device path is checked by testnet/gpu-check.sh on a GPU host", err)
	}
	s, err := cuda.Open("", 256)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.MatPow(99, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := gpuproof.MatPowCPU(99, 256, 3)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("device %s: element %d = %d, CPU says %d", s.Device.Name, i, got[i], want[i])
		}
	}
	if _, err := cuda.Open("", 100); err == nil {
		t.Fatal("a size that is not a multiple of 128 was accepted")
	}
}
