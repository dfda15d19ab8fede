package terms

import (
	"fmt"
	"regexp"
	"strings"
)

// Environment variables every runtime sets for a job itself (runtime uses
// these names): a job's Run.Env may not name them, nor those in
// ReservedEnv.
const (
	EnvJobID   = "GPUMESH_JOB_ID"
	EnvOutputs = "GPUMESH_OUTPUTS"
	EnvInputs  = "GPUMESH_INPUTS"
	// EnvCheckpoint names the job's checkpoint dir.
	EnvCheckpoint = "GPUMESH_CHECKPOINT_DIR"
	EnvCUDA       = "CUDA_VISIBLE_DEVICES"
	// EnvMPSMemLimit and EnvMPSThreads confine a job on a slice of a
	// device enforced by CUDA MPS (IsolationMPS) to the slice's memory and
	// share of the device's threads.
	EnvMPSMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// reservedEnv is every name the runtimes set for the job and a spec may
// not set.
var reservedEnv = map[string]bool{"HOME": true, "TMPDIR": true, EnvJobID: true, EnvOutputs: true, EnvInputs: true,
	EnvCheckpoint: true, EnvCUDA: true, "NVIDIA_VISIBLE_DEVICES": true, EnvMPSMemLimit: true, EnvMPSThreads: true}

// ReservedEnv reports whether name is set by the runtime for every job, so
// a job's environment may not set it.
func ReservedEnv(name string) bool { return reservedEnv[name] }

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckEnvVar is the one rule for a job's environment variable, which
// every runtime applies before it starts a job and a renter applies before
// it posts one (Job.Validate): the name is an identifier, not one the
// runtime sets (ReservedEnv), and the value holds no NUL byte.
func CheckEnvVar(name, value string) error {
	if !envNameRE.MatchString(name) {
		return fmt.Errorf("env name %q is not a valid identifier", name)
	}
	if reservedEnv[name] {
		return fmt.Errorf("env %s is set by the runtime", name)
	}
	if strings.IndexByte(value, 0) >= 0 {
		return fmt.Errorf("env %s contains a NUL byte", name)
	}
	return nil
}
