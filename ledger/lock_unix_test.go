//go:build linux

package ledger

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestCloseWaitsForForkedCopiesOfTheLock: a process forked while the DB
// is open holds a copy of the lock's descriptor until it execs (or, as
// here, for as long as it is handed the descriptor); the directory stays
// locked until that copy goes. Close returns only then, so that the
// directory opens again at once in this process (a daemon restarted, a
// key rotated after a stop) instead of being refused as in use.
func TestCloseWaitsForForkedCopiesOfTheLock(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("cat")
	holder.ExtraFiles = []*os.File{db.lock.f}
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Skipf("cannot start cat to hold the lock's copy: %v", err)
	}
	defer holder.Wait()

	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	// A Close that does not wait returns at once; give it that chance.
	select {
	case err := <-closed:
		stdin.Close()
		t.Fatalf("Close returned (%v) while a forked process still held the lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	stdin.Close() // the holder exits, its copy goes
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	db2, err := Open(dir)
	if errors.Is(err, ErrInUse) {
		t.Fatalf("reopen after Close: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	db2.Close()
}
