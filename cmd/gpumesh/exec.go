package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumesh/gpumesh/auction/terms"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/wire"
	"github.com/urfave/cli/v2"
)

func jobExecCommand() *cli.Command {
	return &cli.Command{
		Name: "exec",
		Usage: "run a command inside a running job's sandbox (its uid, namespaces, cgroup and environment); " +
			"exits with the command's exit code",
		ArgsUsage: "ID -- COMMAND [ARGS...]",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "stdin", Aliases: []string{"i"}, Usage: "pass this terminal's input to the command"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal (for a shell: -it)"},
			&cli.BoolFlag{Name: "it", Hidden: true, Usage: "-i and -t"},
		},
		Action: jobExecAction,
	}
}

func jobPortForwardCommand() *cli.Command {
	return &cli.Command{
		Name: "port-forward",
		Usage: "listen on 127.0.0.1:LOCAL and carry each connection to port REMOTE inside a running job's " +
			"own network (LOCAL 0 or empty: any free port; PORT alone: the same port both sides)",
		ArgsUsage: "ID LOCAL:REMOTE",
		Action:    jobPortForwardAction,
	}
}

// execArgs splits `job exec ID [--] COMMAND...`.
func execArgs(c *cli.Context) (string, []string, error) {
	usage := "usage: " + commandPath(c) + " " + c.Command.ArgsUsage
	args := c.Args().Slice()
	if len(args) == 0 || strings.TrimSpace(args[0]) == "" || args[0] == "--" {
		return "", nil, fmt.Errorf("missing job ID (%s)", usage)
	}
	id, cmd := args[0], args[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return "", nil, fmt.Errorf("missing command to run in job %s (%s)", id, usage)
	}
	return id, cmd, nil
}

func jobExecAction(c *cli.Context) error {
	id, cmd, err := execArgs(c)
	if err != nil {
		return err
	}
	stdin := c.Bool("stdin") || c.Bool("it")
	tty := c.Bool("tty") || c.Bool("it")
	req := api.ExecRequest{Command: cmd, Stdin: stdin, TTY: tty}
	in := c.App.Reader
	var term *terminal
	if tty {
		// The terminal is this one: its size, and raw input when it is
		// passed on (the job's terminal echoes and edits).
		if f, ok := c.App.Writer.(*os.File); ok {
			req.Rows, req.Cols = termSize(f)
		}
		if f, ok := in.(*os.File); ok && stdin {
			if term, err = makeRaw(f); err != nil {
				return fmt.Errorf("exec -t: %w", err)
			}
			if req.Rows == 0 {
				req.Rows, req.Cols = termSize(f)
			}
		}
	}
	restore := func() {
		if term != nil {
			term.restore()
			term = nil
		}
	}
	defer restore()
	conn, err := client(c).Exec(c.Context, id, req)
	if err != nil {
		return fmt.Errorf("exec in job %s: %w", id, err)
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(kind byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return wire.WriteExecFrame(conn, kind, p)
	}
	done := make(chan struct{})
	defer close(done)
	if stdin {
		go func() {
			buf := make([]byte, wire.MaxExecFrame)
			for {
				n, err := in.Read(buf)
				if n > 0 {
					if send(wire.ExecFrameStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					wmu.Lock()
					_ = conn.CloseWrite()
					wmu.Unlock()
					return
				}
			}
		}()
	}
	if term != nil {
		go term.watchResize(done, func(rows, cols uint16) { _ = send(wire.ExecFrameResize, wire.ResizePayload(rows, cols)) })
	}
	out, errOut := c.App.Writer, c.App.ErrWriter
	buf := make([]byte, wire.MaxExecFrame)
	for {
		kind, p, err := wire.ReadExecFrame(conn, buf)
		if err != nil {
			restore()
			if errors.Is(err, io.EOF) {
				err = errors.New("the connection ended")
			}
			return fmt.Errorf("exec in job %s: %v before the command's exit status came", id, err)
		}
		switch kind {
		case wire.ExecFrameStdout:
			if _, err := out.Write(p); err != nil {
				return fmt.Errorf("exec in job %s: write output: %w", id, err)
			}
		case wire.ExecFrameStderr:
			_, _ = errOut.Write(p)
		case wire.ExecFrameExit:
			restore()
			var x wire.ExecExit
			if err := json.Unmarshal(p, &x); err != nil {
				return fmt.Errorf("exec in job %s: bad exit status from the provider: %v", id, err)
			}
			code := x.Code
			if code <= 0 || code > 255 {
				code = 1
			}
			if x.Error != "" {
				return cli.Exit("exec in job "+id+": "+x.Error, code)
			}
			if x.Code == 0 {
				return nil
			}
			return cli.Exit("", code)
		}
	}
}

// parsePortPair reads LOCAL:REMOTE, PORT (both sides) or :REMOTE (any
// local port).
func parsePortPair(s string) (local, remote int, err error) {
	l, r, pair := strings.Cut(s, ":")
	if !pair {
		l, r = s, s
	}
	bad := func(what, v string, min int) error {
		return fmt.Errorf("invalid %s port %q in %q: want a number %d-65535 (LOCAL:REMOTE)", what, v, s, min)
	}
	remote, err = strconv.Atoi(r)
	if err != nil || remote < 1 || remote > 65535 {
		return 0, 0, bad("remote", r, 1)
	}
	if l == "" {
		return 0, remote, nil
	}
	local, err = strconv.Atoi(l)
	if err != nil || local < 0 || local > 65535 {
		return 0, 0, bad("local", l, 0)
	}
	return local, remote, nil
}

func jobPortForwardAction(c *cli.Context) error {
	usage := "usage: " + commandPath(c) + " " + c.Command.ArgsUsage
	args := c.Args().Slice()
	switch {
	case len(args) == 0 || strings.TrimSpace(args[0]) == "":
		return fmt.Errorf("missing job ID (%s)", usage)
	case len(args) == 1:
		return fmt.Errorf("missing LOCAL:REMOTE ports (%s)", usage)
	case len(args) > 2:
		return fmt.Errorf("unexpected argument %q (%s)", args[2], usage)
	}
	id := args[0]
	local, remote, err := parsePortPair(args[1])
	if err != nil {
		return err
	}
	cl := client(c)
	if err := jobRunning(c.Context, cl, id); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return fmt.Errorf("port-forward: listen on 127.0.0.1:%d: %w", local, err)
	}
	defer ln.Close()
	fmt.Fprintf(c.App.Writer, "forwarding %s -> job %s port %d\n", ln.Addr(), id, remote)
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		// Stop once the job does (heard at its view's change: a long
		// poll).
		f := followJob(cl, id)
		v, err := f.next(ctx)
		for err == nil {
			if err = running(id, v); err != nil {
				break
			}
			v, err = f.next(ctx)
		}
		if ctx.Err() == nil {
			ended <- err
			_ = ln.Close()
		}
	}()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		lc, err := ln.Accept()
		if err != nil {
			select {
			case err := <-ended:
				return err
			default:
			}
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("port-forward: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lc.Close()
			up, err := cl.PortForward(ctx, id, remote)
			if err != nil {
				fmt.Fprintf(c.App.ErrWriter, "gpumesh: port-forward %s: %s\n", lc.RemoteAddr(), oneLine(err.Error()))
				return
			}
			defer up.Close()
			stop := context.AfterFunc(ctx, func() { _ = up.Close(); _ = lc.Close() })
			defer stop()
			pipeConns(lc.(*net.TCPConn), up)
		}()
	}
}

// jobRunning checks that job id has a running lease.
func jobRunning(ctx context.Context, cl *api.Client, id string) error {
	v, err := cl.Job(ctx, id)
	if err != nil {
		return err
	}
	return running(id, v)
}

// running checks that v, job id's view, has a running lease.
func running(id string, v api.JobView) error {
	if v.Lease == nil || v.Run != terms.RunRunning {
		run := string(v.Run)
		if run == "" {
			run = string(v.State)
		}
		return fmt.Errorf("job %s is not running (%s)", id, run)
	}
	return nil
}

// pipeConns copies a and b into each other, passing each side's end of
// writing on, until both directions are done.
func pipeConns(a *net.TCPConn, b *api.UpgradedConn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := io.Copy(b, a); err != nil {
			_ = b.Close()
			return
		}
		_ = b.CloseWrite()
	}()
	if _, err := io.Copy(a, b); err != nil {
		_ = a.Close()
	} else {
		_ = a.CloseWrite()
	}
	wg.Wait()
}
