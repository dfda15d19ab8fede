package runtime

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/auction/terms"
)

func TestCheckProviderInventory(t *testing.T) {
	gpus := Inventory{GPUs: []terms.GPU{{Model: "T4", VRAMGB: 16}}, Source: SourceDeclared}
	cases := []struct {
		name     string
		provider bool
		inv      Inventory
		wantErr  string
	}{
		{"renter without GPUs", false, Inventory{}, ""},
		{"provider with GPUs", true, gpus, ""},
		{"provider without GPUs", true, Inventory{}, "provider.enabled but no GPU to sell"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckProviderInventory(tc.provider, tc.inv)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}
