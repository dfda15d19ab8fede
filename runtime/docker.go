package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/auction/terms"
)

// DefaultDockerSocket is the Docker Engine's usual unix socket.
const DefaultDockerSocket = "/var/run/docker.sock"

// dockerAPI is the Engine API version the executor speaks (Docker 20.10+).
const dockerAPI = "/v1.41"

// DockerAvailable reports whether a Docker Engine answers /_ping on the unix
// socket.
func DockerAvailable(socketPath string) bool {
	c := newDockerClient(socketPath)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := c.do(ctx, http.MethodGet, "/_ping", nil, &out)
	return err == nil && out.String() == "OK"
}

// dockerClient is a minimal Engine API client over a unix socket.
type dockerClient struct {
	hc     *http.Client
	socket string
}

func newDockerClient(socketPath string) *dockerClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &dockerClient{hc: &http.Client{Transport: tr}, socket: socketPath}
}

// dockerError is a non-2xx answer from the Engine.
type dockerError struct {
	Status  int
	Message string
}

func (e *dockerError) Error() string {
	return fmt.Sprintf("docker: %d: %s", e.Status, e.Message)
}

// containerCannotExec reports whether the engine refused to start a
// container because its command (or its image's entrypoint) is not in the
// image or cannot be executed there: the OCI runtime's exec failed. These
// are the messages the docker CLI itself maps to exit codes 127 and 126.
func containerCannotExec(err error) bool {
	var de *dockerError
	if !errors.As(err, &de) {
		return false
	}
	// runc: `exec: "cmd": executable file not found in $PATH`,
	// `exec: "/bin/x": stat /bin/x: no such file or directory`,
	// `exec: "/x": permission denied`, `exec /x: exec format error`;
	// a mount's or a device's failure names no exec.
	m := strings.ToLower(de.Message)
	if strings.Contains(m, "exec format error") || strings.Contains(m, "executable file not found") {
		return true
	}
	if !strings.Contains(m, `exec: "`) {
		return false
	}
	for _, s := range []string{"no such file or directory", "permission denied", "not a directory"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func isDockerStatus(err error, status int) bool {
	var de *dockerError
	return errors.As(err, &de) && de.Status == status
}

// request sends a request and returns the response for the caller to read
// and close; non-2xx statuses become *dockerError.
func (c *dockerClient) request(ctx context.Context, method, p string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("docker: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	if p != "/_ping" {
		p = dockerAPI + p
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+p, rd)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker: %s %s: %w", method, p, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var m struct{ Message string }
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = string(bytes.TrimSpace(b))
		}
		return nil, &dockerError{Status: resp.StatusCode, Message: m.Message}
	}
	return resp, nil
}

// do sends a request and decodes a JSON answer into out (a *bytes.Buffer
// receives the raw body; nil discards it).
func (c *dockerClient) do(ctx context.Context, method, p string, body, out any) error {
	resp, err := c.request(ctx, method, p, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch o := out.(type) {
	case nil:
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	case *bytes.Buffer:
		_, err = io.Copy(o, io.LimitReader(resp.Body, 1<<20))
	default:
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out)
	}
	if err != nil {
		return fmt.Errorf("docker: %s %s: read answer: %w", method, p, err)
	}
	return nil
}

// demux copies a multiplexed container log stream (8-byte headers: stream
// type, 3 zero bytes, big-endian payload size) to stdout and stderr.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("docker: log stream header: %w", err)
		}
		var w io.Writer
		switch hdr[0] {
		case 0, 1:
			w = stdout
		case 2:
			w = stderr
		default:
			return fmt.Errorf("docker: log stream: unknown stream type %d", hdr[0])
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		if _, err := io.CopyN(w, r, n); err != nil {
			return fmt.Errorf("docker: log stream payload: %w", err)
		}
	}
}

// DockerOptions configures NewDockerExecutor.
type DockerOptions struct {
	// Root holds the jobs' work dirs, bind-mounted at /work (required).
	Root string
	// Network is the containers' network mode (default "none").
	Network string
	// Grace is the SIGTERM→SIGKILL period at a job's deadline
	// (default DefaultGrace).
	Grace time.Duration
	// UIDBase and UIDCount: the pool of uids containers run as when the
	// daemon runs as root (see ProcessOptions; defaults 200000 and 1000).
	UIDBase, UIDCount int
	// MaxLogBytes caps what a job writes to stdout and stderr together;
	// past it the output is dropped with a note. Default
	// DefaultMaxLogBytes; < 0: no cap.
	MaxLogBytes int64
	// Log receives lifecycle events (default: discarded).
	Log *slog.Logger
	// MemoryMB is each container's memory limit, as ProcessOptions.MemoryMB
	// is each process job's: a job's Spec.MemoryMB may lower it, never
	// raise it (a larger request is clamped to it, with a note in the
	// job's stderr). Default: half the host's RAM; < 0: none.
	MemoryMB int
	// DeclaredGPUs: the provider's GPUs are declared, not read from a
	// driver (gpu_source declared, or auto without one), so there is no
	// device to hand a container: GPU jobs run with their leased indices
	// in CUDA_VISIBLE_DEVICES only, as process jobs do, and Containers
	// reports ContainersGPU whatever the engine's passthrough.
	DeclaredGPUs bool
}

// DockerExecutor runs jobs' images through the Docker Engine API. See
// NewDockerExecutor.
type DockerExecutor struct {
	c       *dockerClient
	root    string
	network string
	grace   time.Duration
	maxLog  int64
	uids    *uidPool
	log     *slog.Logger
	// memoryMB is each container's memory cap (<= 0: none).
	memoryMB int
	// gpu is how containers get their GPUs ("" when the engine cannot).
	gpu gpuPassthrough
}

// gpuPassthrough is how an engine hands containers GPUs.
type gpuPassthrough string

const (
	gpuNone   gpuPassthrough = ""
	gpuNVIDIA gpuPassthrough = "nvidia" // the NVIDIA container runtime
	gpuCDI    gpuPassthrough = "cdi"    // CDI devices (nvidia.com/gpu=N)
	// gpuDeclared: declared GPUs, nothing to pass through (see
	// DockerOptions.DeclaredGPUs).
	gpuDeclared gpuPassthrough = "declared"
)

// engineInfo is the part of GET /info that tells GPU support.
type engineInfo struct {
	Runtimes          map[string]json.RawMessage `json:"Runtimes"`
	DiscoveredDevices []struct {
		Source string `json:"Source"`
		ID     string `json:"ID"`
	} `json:"DiscoveredDevices"`
}

// passthrough reads the engine's GPU support from its info: the NVIDIA
// runtime, else CDI GPU devices, else none.
func (i engineInfo) passthrough() gpuPassthrough {
	if _, ok := i.Runtimes["nvidia"]; ok {
		return gpuNVIDIA
	}
	for _, d := range i.DiscoveredDevices {
		if d.Source == "cdi" && strings.HasPrefix(d.ID, "nvidia.com/gpu=") {
			return gpuCDI
		}
	}
	return gpuNone
}

// deviceRequest asks the engine for exactly the given GPUs: by UUID through
// the NVIDIA runtime when they are known (one per index), else by index.
// A MIG instance (a "MIG-" UUID) is named by its UUID through CDI too: the
// index would name its whole device (nvidia-ctk names MIG devices by UUID
// with --device-name-strategy=uuid).
func (g gpuPassthrough) deviceRequest(gpus []int, uuids []string) map[string]any {
	ids := make([]string, len(gpus))
	for i, n := range gpus {
		ids[i] = strconv.Itoa(n)
		if len(uuids) == len(gpus) && (g != gpuCDI || strings.HasPrefix(uuids[i], "MIG-")) {
			ids[i] = uuids[i]
		}
		if g == gpuCDI {
			ids[i] = "nvidia.com/gpu=" + ids[i]
		}
	}
	if g == gpuCDI {
		return map[string]any{"Driver": "cdi", "DeviceIDs": ids}
	}
	return map[string]any{"Driver": "nvidia", "DeviceIDs": ids, "Capabilities": [][]string{{"gpu"}}}
}

// ErrNoGPUContainers is returned for a job that needs GPUs on an engine that
// cannot give containers GPUs.
var ErrNoGPUContainers = errors.New("runtime: the container engine cannot give containers GPUs (no NVIDIA runtime or CDI devices)")

// Containers is what this engine can do with image jobs.
func (e *DockerExecutor) Containers() terms.ContainerSupport {
	if e.gpu == gpuNone {
		return terms.ContainersNoGPU
	}
	return terms.ContainersGPU
}

// NewDockerExecutor returns an executor that runs each job's image as a
// container, with the job's work dir bind-mounted at /work (also its working
// dir and HOME), no network, all capabilities dropped, no-new-privileges,
// the job's memory limit within the executor's cap (MemoryMB), exactly the
// leased GPUs (through the NVIDIA runtime or CDI, whichever the engine has;
// GPU jobs are refused on an engine with neither, unless the GPUs are
// declared: see DockerOptions.DeclaredGPUs) and
// the same uid isolation as the process backend. An image that is not on
// the host is pulled from its registry, with progress in the job's log. It fails if the Engine does not answer.
func NewDockerExecutor(socketPath string, opts DockerOptions) (*DockerExecutor, error) {
	if socketPath == "" {
		socketPath = DefaultDockerSocket
	}
	if !DockerAvailable(socketPath) {
		return nil, fmt.Errorf("runtime: no Docker Engine answering on %s", socketPath)
	}
	e := &DockerExecutor{c: newDockerClient(socketPath), network: opts.Network, grace: opts.Grace, maxLog: opts.MaxLogBytes, log: opts.Log,
		memoryMB: memoryCapMB(opts.MemoryMB)}
	if e.network == "" {
		e.network = "none"
	}
	if e.grace <= 0 {
		e.grace = DefaultGrace
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() == 0 {
		base, count := opts.UIDBase, opts.UIDCount
		if base == 0 {
			base = 200000
		}
		if count <= 0 {
			count = 1000
		}
		pool, err := newUIDPool(base, count)
		if err != nil {
			return nil, err
		}
		e.uids = pool
	}
	root, err := prepareRoot(opts.Root, false)
	if err != nil {
		return nil, err
	}
	e.root = root
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var info engineInfo
	if err := e.c.do(ctx, http.MethodGet, "/info", nil, &info); err != nil {
		return nil, fmt.Errorf("runtime: docker info: %w", err)
	}
	e.gpu = info.passthrough()
	if opts.DeclaredGPUs {
		e.gpu = gpuDeclared
	}
	e.log.Info("docker engine", "gpu_passthrough", string(orNoneGPU(e.gpu)))
	return e, nil
}

// pull fetches an image from its registry, writing one line per layer
// status change (not every progress tick) to log.
func (e *DockerExecutor) pull(ctx context.Context, image string, log io.Writer) error {
	if log == nil {
		log = io.Discard
	}
	from, tag := splitImageRef(image)
	q := "/images/create?fromImage=" + url.QueryEscape(from)
	if tag != "" {
		q += "&tag=" + url.QueryEscape(tag)
	}
	fmt.Fprintf(log, "gpumesh: pulling image %s\n", image)
	resp, err := e.c.request(ctx, http.MethodPost, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	last := map[string]string{}
	for {
		var m struct {
			Status      string `json:"status"`
			ID          string `json:"id"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("pull %s: %w", image, err)
		}
		if m.Error != "" {
			return fmt.Errorf("pull %s: %s", image, m.Error)
		}
		if m.Status != "" && last[m.ID] != m.Status {
			last[m.ID] = m.Status
			fmt.Fprintf(log, "gpumesh: pull %s: %s\n", strings.TrimSpace(m.ID+" "+m.Status), image)
		}
	}
	e.log.Info("image pulled", "image", image)
	return nil
}

// splitImageRef splits "host:5000/repo/name:tag" into the name and tag the
// Engine's pull takes; a digest reference is pulled whole.
func splitImageRef(ref string) (name, tag string) {
	if strings.Contains(ref, "@") {
		return ref, ""
	}
	slash := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > slash {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

func orNoneGPU(g gpuPassthrough) gpuPassthrough {
	if g == gpuNone {
		return "none"
	}
	return g
}

// Name returns "docker".
func (e *DockerExecutor) Name() string { return "docker" }

// Start creates and starts the job's container. ctx bounds the API calls of
// the start only.
func (e *DockerExecutor) Start(ctx context.Context, spec Spec, stdout, stderr io.Writer) (Handle, error) {
	if err := spec.validate(time.Now()); err != nil {
		return nil, err
	}
	if spec.Image == "" {
		return nil, fmt.Errorf("%w: job %s: the docker backend needs an image", ErrInvalidSpec, spec.ID)
	}
	if spec.Gang != nil {
		return nil, fmt.Errorf("%w: job %s: gang networks run process jobs only, not containers", ErrInvalidSpec, spec.ID)
	}
	if len(spec.GPUs) > 0 && e.gpu == gpuNone {
		return nil, fmt.Errorf("job %s: %w", spec.ID, ErrNoGPUContainers)
	}
	uid, err := e.uids.get()
	if err != nil {
		return nil, err
	}
	wd, _, err := makeWorkDir(e.root, &spec, uid, 0, nil)
	if err != nil {
		e.uids.put(uid)
		return nil, err
	}
	fail := func(err error) (Handle, error) {
		_ = removeWorkDir(wd)
		e.uids.put(uid)
		return nil, err
	}
	rel, _ := spec.outputsRel()
	env := []string{
		"HOME=/work", "TMPDIR=/work/tmp",
		EnvJobID + "=" + spec.jobID(),
		EnvOutputs + "=" + path.Join("/work", rel),
		EnvCheckpoint + "=" + path.Join("/work", CheckpointDir),
		EnvCUDA + "=" + spec.cudaDevices(),
		"NVIDIA_VISIBLE_DEVICES=" + spec.cudaDevices(),
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range spec.mpsEnv() {
		env = append(env, k+"="+v)
	}
	binds := []string{wd + ":/work"}
	if spec.Inputs != "" {
		binds = append(binds, spec.Inputs+":/inputs:ro")
		env = append(env, EnvInputs+"=/inputs")
	}
	hostConfig := map[string]any{
		"Binds":       binds,
		"NetworkMode": e.network,
		"AutoRemove":  false,
		"CapDrop":     []string{"ALL"},
		"SecurityOpt": []string{"no-new-privileges"},
		"PidsLimit":   4096,
	}
	mb := clampMemoryMB(spec.MemoryMB, e.memoryMB, stderr)
	if mb <= 0 && spec.NoSwap {
		// Docker limits swap only beside a memory limit: a no-swap job
		// on an engine with no cap is limited to the host's memory.
		mb = hostMemoryMB()
	}
	if mb > 0 {
		hostConfig["Memory"] = int64(mb) << 20
		hostConfig["MemorySwap"] = int64(mb) << 20 // memory and swap together: no swap
		if spec.NoSwap {
			hostConfig["MemorySwappiness"] = 0
		}
	}
	if len(spec.GPUs) > 0 && e.gpu != gpuDeclared {
		hostConfig["DeviceRequests"] = []map[string]any{e.gpu.deviceRequest(spec.GPUs, spec.UUIDs)}
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := "gpumesh-" + spec.ID + "-" + hex.EncodeToString(suffix[:])
	create := map[string]any{
		"Image":           spec.Image,
		"Cmd":             spec.Command,
		"Env":             env,
		"WorkingDir":      "/work",
		"User":            fmt.Sprintf("%d:%d", uid, uid),
		"Labels":          map[string]string{"io.gpumesh.job": spec.ID},
		"AttachStdout":    false,
		"AttachStderr":    false,
		"NetworkDisabled": e.network == "none",
		"HostConfig":      hostConfig,
	}
	var created struct {
		Id       string
		Warnings []string
	}
	createPath := "/containers/create?name=" + url.QueryEscape(name)
	err = e.c.do(ctx, http.MethodPost, createPath, create, &created)
	if isDockerStatus(err, http.StatusNotFound) {
		// The image is not here: pull it (progress goes to the job's log),
		// then create the container again.
		if perr := e.pull(ctx, spec.Image, stdout); perr != nil {
			return fail(fmt.Errorf("runtime: job %s: image %s is not on this host and could not be pulled: %w", spec.ID, spec.Image, perr))
		}
		err = e.c.do(ctx, http.MethodPost, createPath, create, &created)
	}
	if err != nil {
		return fail(fmt.Errorf("runtime: job %s: create container: %w", spec.ID, err))
	}
	h := &dockerHandle{handleState: newHandleState(wd), e: e, spec: spec, id: created.Id, uid: uid, logsDone: make(chan struct{})}
	if w := swapWarning(created.Warnings); spec.NoSwap && w != "" && hostSwaps() {
		// The engine took the container without its swap limit.
		h.remove()
		return fail(fmt.Errorf("runtime: job %s: its memory cannot be kept from swap on this host: %s", spec.ID, w))
	}
	if err := e.c.do(ctx, http.MethodPost, "/containers/"+h.id+"/start", nil, nil); err != nil {
		h.remove()
		err = fmt.Errorf("runtime: job %s: start container: %w", spec.ID, err)
		if containerCannotExec(err) {
			err = jobsFault(err)
		}
		return fail(err)
	}
	h.started = time.Now()
	stdout, stderr = capLogs(stdout, stderr, e.maxLog)
	var lctx context.Context
	lctx, h.cancelLogs = context.WithCancel(context.Background())
	go h.streamLogs(lctx, stdout, stderr)
	if !spec.Deadline.IsZero() {
		h.timer = time.AfterFunc(time.Until(spec.Deadline), func() { _ = h.stop(ReasonDeadline, e.grace) })
	}
	e.log.Info("container started", "job", spec.ID, "container", h.id[:12], "image", spec.Image)
	go h.wait()
	return h, nil
}

// swapWarning is the container engine's warning, among those it gave on
// creating a container, that it ignored the swap limit ("" if none).
func swapWarning(ws []string) string {
	for _, w := range ws {
		if strings.Contains(strings.ToLower(w), "swap") {
			return w
		}
	}
	return ""
}

type dockerHandle struct {
	e          *DockerExecutor
	spec       Spec
	id         string
	uid        int
	started    time.Time
	timer      *time.Timer
	cancelLogs context.CancelFunc
	logsDone   chan struct{}
	logsErr    error

	handleState
}

func (h *dockerHandle) Stop(grace time.Duration) error { return h.stop(ReasonStopped, grace) }

func (h *dockerHandle) stop(reason string, grace time.Duration) error {
	if !h.beginStop(reason) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.signal(ctx, "SIGTERM"); err != nil {
		return err
	}
	if h.awaitGrace(grace) {
		return nil
	}
	if err := h.signal(ctx, "SIGKILL"); err != nil {
		return err
	}
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("runtime: job %s: container did not stop: %w", h.spec.ID, ctx.Err())
	}
}

// signal sends sig to the container; a container that already stopped
// (409) is fine.
func (h *dockerHandle) signal(ctx context.Context, sig string) error {
	err := h.e.c.do(ctx, http.MethodPost, "/containers/"+h.id+"/kill?signal="+sig, nil, nil)
	if err != nil && !isDockerStatus(err, http.StatusConflict) && !isDockerStatus(err, http.StatusNotFound) {
		return fmt.Errorf("runtime: job %s: %s container: %w", h.spec.ID, sig, err)
	}
	return nil
}

func (h *dockerHandle) streamLogs(ctx context.Context, stdout, stderr io.Writer) {
	defer close(h.logsDone)
	resp, err := h.e.c.request(ctx, http.MethodGet, "/containers/"+h.id+"/logs?follow=1&stdout=1&stderr=1", nil)
	if err != nil {
		h.logsErr = err
		return
	}
	defer resp.Body.Close()
	if err := demux(resp.Body, stdout, stderr); err != nil && ctx.Err() == nil {
		h.logsErr = err
	}
}

func (h *dockerHandle) wait() {
	var st struct {
		StatusCode int
		Error      *struct{ Message string }
	}
	var werr error
	for attempt := 0; attempt < 5; attempt++ {
		// No timeout: a job may legitimately run for the whole lease.
		werr = h.e.c.do(context.Background(), http.MethodPost, "/containers/"+h.id+"/wait", nil, &st)
		if werr == nil || isDockerStatus(werr, http.StatusNotFound) {
			break
		}
		time.Sleep(time.Second)
	}
	ended := time.Now()
	if h.timer != nil {
		h.timer.Stop()
	}
	select {
	case <-h.logsDone:
	case <-time.After(5 * time.Second):
		h.cancelLogs()
		<-h.logsDone
	}
	h.cancelLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var info struct {
		State struct{ OOMKilled bool }
	}
	oom := false
	if err := h.e.c.do(ctx, http.MethodGet, "/containers/"+h.id+"/json", nil, &info); err == nil {
		oom = info.State.OOMKilled
	}
	h.remove()

	h.mu.Lock()
	res := Result{ExitCode: st.StatusCode, Started: h.started, Ended: ended, Killed: h.killed || oom, Reason: h.reason}
	h.mu.Unlock()
	switch {
	case werr != nil:
		res.ExitCode = -1
		res.Err = fmt.Errorf("runtime: job %s: wait container: %w", h.spec.ID, werr)
	case st.Error != nil && st.Error.Message != "":
		res.Err = fmt.Errorf("runtime: job %s: container: %s", h.spec.ID, st.Error.Message)
	case h.logsErr != nil:
		res.Err = fmt.Errorf("runtime: job %s: logs: %w", h.spec.ID, h.logsErr)
	}
	switch {
	case res.Reason != "":
	case res.Err != nil && werr != nil:
		res.Reason = ReasonFailed
	case oom:
		res.Reason = ReasonOOM
	default:
		res.Reason = ReasonExited
	}
	h.res = res
	h.e.log.Info("container ended", "job", h.spec.ID, "reason", res.Reason, "exit", res.ExitCode)
	close(h.done)
}

// remove deletes the container (logs are collected by then).
func (h *dockerHandle) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.e.c.do(ctx, http.MethodDelete, "/containers/"+h.id+"?force=1&v=1", nil, nil)
	if err != nil && !isDockerStatus(err, http.StatusNotFound) {
		h.e.log.Warn("remove container", "job", h.spec.ID, "container", h.id, "err", err)
	}
}

func (h *dockerHandle) Cleanup() error {
	select {
	case <-h.done:
	default:
		return fmt.Errorf("%w: %s", errStillRunning, h.spec.ID)
	}
	h.cleanOnce.Do(func() {
		h.cleanErr = removeWorkDir(h.wd)
		if h.cleanErr == nil {
			h.e.uids.put(h.uid)
		}
	})
	return h.cleanErr
}

// RemoveOrphans force-removes the containers of jobs (labelled by this
// executor) for which keep returns false (keep may be nil: remove all), e.g.
// at daemon start after a crash. It returns how many it removed.
func (e *DockerExecutor) RemoveOrphans(ctx context.Context, keep func(id string) bool) (int, error) {
	filters := url.QueryEscape(`{"label":["io.gpumesh.job"]}`)
	var list []struct {
		Id     string
		Labels map[string]string
	}
	if err := e.c.do(ctx, http.MethodGet, "/containers/json?all=1&filters="+filters, nil, &list); err != nil {
		return 0, fmt.Errorf("runtime: list job containers: %w", err)
	}
	n := 0
	var errs []error
	for _, c := range list {
		if id := c.Labels["io.gpumesh.job"]; keep != nil && keep(id) {
			continue
		}
		err := e.c.do(ctx, http.MethodDelete, "/containers/"+c.Id+"?force=1&v=1", nil, nil)
		if err != nil && !isDockerStatus(err, http.StatusNotFound) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("runtime: remove job containers: %w", errors.Join(errs...))
	}
	return n, nil
}
