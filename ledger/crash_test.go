package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests re-exec the test binary as a child process selected by an
// environment variable, so that a real second process holds the database.

const (
	crashChildEnv = "LEDGER_CRASH_CHILD"
	holdChildEnv  = "LEDGER_HOLD_CHILD"
	childDirEnv   = "LEDGER_CHILD_DIR"
)

// crashChild appends from several goroutines until it is killed, printing
// "committed <seq>" after each Append returns.
func crashChild() {
	db, err := Open(os.Getenv(childDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	// The parent kills us long before this; never run unbounded.
	time.AfterFunc(60*time.Second, func() { os.Exit(3) })
	// Each round starts its leases past every earlier round's (a lease is
	// settled once): no worker has appended more entries than the chain has.
	base, _, err := db.Head()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child head:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := int(base); ; i++ {
				e, err := db.Append(sampleEntry(w*1_000_000 + i))
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "committed %d\n", e.Seq)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

func startChild(t *testing.T, test, env, dir string) (*exec.Cmd, io.ReadCloser, io.WriteCloser, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=1", childDirEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(strings.Builder)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Never leave a child behind, whatever happens to the test.
	timer := time.AfterFunc(90*time.Second, func() { cmd.Process.Kill() })
	t.Cleanup(func() { timer.Stop(); cmd.Process.Kill() })
	return cmd, stdout, stdin, stderr
}

func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashChildEnv) == "1" {
		crashChild()
		return
	}
	dir := t.TempDir()
	committed := map[uint64]bool{}
	var maxSeq uint64
	for round, killAfter := range []int{10, 45, 120, 3} {
		cmd, stdout, _, stderr := startChild(t, "TestCrashSafety", crashChildEnv, dir)
		sc := bufio.NewScanner(stdout)
		lines := 0
		for sc.Scan() {
			s, ok := strings.CutPrefix(sc.Text(), "committed ")
			if !ok {
				continue // test framework chatter
			}
			seq, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("round %d: bad child line %q", round, sc.Text())
			}
			committed[seq] = true
			maxSeq = max(maxSeq, seq)
			if lines++; lines == killAfter {
				// SIGKILL while the writers are mid-append; keep
				// reading what the child reported before dying.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 {
			t.Fatalf("round %d: child ended with %v, want killed; stderr:\n%s", round, err, stderr)
		}
		if lines < killAfter {
			t.Fatalf("round %d: child reported only %d commits; stderr:\n%s", round, lines, stderr)
		}

		db, err := Open(dir, noSync())
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		rep, err := db.Verify()
		if err != nil {
			t.Fatalf("round %d: Verify after kill -9: %v", round, err)
		}
		if rep.HeadSeq < maxSeq {
			t.Fatalf("round %d: head %d is behind reported commit %d", round, rep.HeadSeq, maxSeq)
		}
		for seq := range committed {
			if _, err := db.Get(seq); err != nil {
				t.Fatalf("round %d: reported commit %d lost: %v", round, seq, err)
			}
		}
		t.Logf("round %d: killed after %d reported commits; chain has %d entries", round, lines, rep.Entries)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// holdChild opens the database, says "ready" and keeps it open until its
// stdin is closed.
func holdChild() {
	db, err := Open(os.Getenv(childDirEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	if err := db.Close(); err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

func TestOpenInUseByAnotherProcess(t *testing.T) {
	if os.Getenv(holdChildEnv) == "1" {
		holdChild()
		return
	}
	dir := t.TempDir()
	cmd, stdout, stdin, stderr := startChild(t, "TestOpenInUseByAnotherProcess", holdChildEnv, dir)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
	}
	if sc.Text() != "ready" {
		t.Fatalf("child never got ready; stderr:\n%s", stderr)
	}
	_, err := Open(dir, noSync())
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Open while another process holds %s = %v, want ErrInUse naming the dir", dir, err)
	}
	stdin.Close()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, stderr)
	}
	db, err := Open(dir, noSync())
	if err != nil {
		t.Fatalf("Open after the other process exited: %v", err)
	}
	db.Close()
}
