package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestContainerCommandMissingIsTheJobsFault: a container job whose command
// is not in its image, by name or by path, fails to start with an error
// JobFault calls the job's own; a spec the provider got wrong (no GPU
// passthrough) is not.
func TestContainerCommandMissingIsTheJobsFault(t *testing.T) {
	e := dockerExecutor(t)
	for _, cmd := range []string{"no-such-command", "/no/such/command", "/"} {
		h, err := e.Start(context.Background(), Spec{ID: "d-missing", Image: testImage, Command: []string{cmd}, Deadline: time.Now().Add(time.Minute)}, nil, nil)
		if err == nil {
			res := h.Wait()
			h.Cleanup()
			t.Fatalf("command %q started: %+v", cmd, res)
		}
		if !JobFault(err) {
			t.Fatalf("command %q: %v: not the job's fault", cmd, err)
		}
	}
	if _, err := e.Start(context.Background(), Spec{ID: "d-env", Image: testImage, Command: []string{"/jobhelper", "env"},
		Env: map[string]string{"TMPDIR": "/x"}}, nil, nil); !errors.Is(err, ErrInvalidSpec) || !JobFault(err) {
		t.Fatalf("reserved env in a container: %v", err)
	}
}

// TestContainerCannotExec: the engine's messages for a command it could not
// execute are the job's; others are not.
func TestContainerCannotExec(t *testing.T) {
	for msg, want := range map[string]bool{
		`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`: true,
		`OCI runtime create failed: container_linux.go:380: starting container process caused: exec: "/x": stat /x: no such file or directory: unknown`:                           true,
		`OCI runtime create failed: container_linux.go:380: starting container process caused: exec: "/etc": permission denied: unknown`:                                          true,
		`OCI runtime create failed: runc create failed: unable to start container process: exec /bin/x: exec format error: unknown`:                                               true,
		`error while creating mount source path '/data/x': mkdir /data: no such file or directory`:                                                                                false,
		`could not select device driver "" with capabilities: [[gpu]]`:                                                                                                            false,
	} {
		if got := containerCannotExec(&dockerError{Status: 400, Message: msg}); got != want {
			t.Errorf("%q: %v, want %v", msg, got, want)
		}
	}
	if containerCannotExec(errors.New(`exec: "x": executable file not found`)) {
		t.Error("a non-engine error was taken for the engine's")
	}
}
