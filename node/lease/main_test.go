package lease

import (
	"testing"

	"github.com/gpumesh/gpumesh/testnet/testmain"
)

// TestMain runs 8 of the package's parallel tests at once: they mostly
// wait on lease starts, ends and settlements (15 s on 2 cores instead of 41 s
// at go test's default of 2, for 9 s of CPU either way).
func TestMain(m *testing.M) { testmain.Run(m, 8) }
