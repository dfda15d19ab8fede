package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// AutoExecutor dispatches each job to the Docker backend when the job has an
// image and Docker is reachable, and to the process backend otherwise.
type AutoExecutor struct {
	proc   *ProcessExecutor
	docker *DockerExecutor // nil when Docker is not reachable
	log    *slog.Logger
}

// Auto builds the process backend in root and, if the Engine answers on
// DefaultDockerSocket, the Docker backend in the same root.
func Auto(root string, log *slog.Logger) (*AutoExecutor, error) {
	return AutoWith(root, ProcessOptions{Log: log}, DockerOptions{Log: log})
}

// AutoWith is Auto with the backends' options (their Root is root; the
// process options' Log is the auto executor's).
func AutoWith(root string, po ProcessOptions, do DockerOptions) (*AutoExecutor, error) {
	log := po.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		po.Log = log
	}
	if do.Log == nil {
		do.Log = log
	}
	do.Root = root
	p, err := NewProcessExecutor(root, po)
	if err != nil {
		return nil, err
	}
	a := &AutoExecutor{proc: p, log: log}
	if DockerAvailable(DefaultDockerSocket) {
		d, err := NewDockerExecutor(DefaultDockerSocket, do)
		if err != nil {
			log.Warn("docker backend unavailable", "err", err)
		} else {
			a.docker = d
		}
	}
	log.Info("executor", "docker", a.docker != nil, "limits", p.Limits())
	return a, nil
}

// Name returns "auto".
func (a *AutoExecutor) Name() string { return "auto" }

// Process is the process backend.
func (a *AutoExecutor) Process() *ProcessExecutor { return a.proc }

// Close closes its process executor (ProcessExecutor.Close).
func (a *AutoExecutor) Close() error { return a.proc.Close() }

// Docker is the Docker backend, or nil when Docker is not reachable.
func (a *AutoExecutor) Docker() *DockerExecutor { return a.docker }

// Backend names the backend Start would use for spec.
func (a *AutoExecutor) Backend(spec Spec) string {
	if spec.Image != "" && a.docker != nil {
		return a.docker.Name()
	}
	return a.proc.Name()
}

// ErrNoContainers is returned for an image job on a host without a
// container engine: an image job's command never runs outside its image.
var ErrNoContainers = errors.New("runtime: no container engine on this host: image jobs are not run")

// Containers is what this host can do with image jobs.
func (a *AutoExecutor) Containers() terms.ContainerSupport {
	if a.docker == nil {
		return terms.ContainersNone
	}
	return a.docker.Containers()
}

// Start runs spec on the backend Backend names. A job with an image on a
// host without Docker is refused (ErrNoContainers), never run on the host.
func (a *AutoExecutor) Start(ctx context.Context, spec Spec, stdout, stderr io.Writer) (Handle, error) {
	if spec.Image != "" && a.docker != nil {
		return a.docker.Start(ctx, spec, stdout, stderr)
	}
	if spec.Image != "" {
		return nil, fmt.Errorf("job %s: %w", spec.ID, ErrNoContainers)
	}
	h, err := a.proc.Start(ctx, spec, stdout, stderr)
	if err != nil {
		return nil, fmt.Errorf("runtime: auto: %w", err)
	}
	return h, nil
}
