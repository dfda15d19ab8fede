package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// isTerminal reports whether w is a terminal (a character device), where a
// status line may be redrawn in place. A variable so tests can say yes.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressTick is how often the status line is redrawn.
var progressTick = 200 * time.Millisecond

// progress draws one status line on a terminal, redrawn in place with the
// time elapsed; off a terminal (or with --json) it draws nothing, so
// scripts and logs see only the permanent lines.
type progress struct {
	w     io.Writer
	on    bool
	start time.Time

	mu    sync.Mutex
	text  string
	width int // of the line last drawn
	stop  chan struct{}
	done  chan struct{}
}

func newProgress(w io.Writer, json bool) *progress {
	return &progress{w: w, on: !json && isTerminal(w), start: time.Now()}
}

// show sets the status text and keeps the line redrawn until clear.
func (p *progress) show(text string) {
	if !p.on {
		return
	}
	p.mu.Lock()
	p.text = text
	running := p.stop != nil
	if !running {
		p.stop, p.done = make(chan struct{}), make(chan struct{})
	}
	p.drawLocked()
	p.mu.Unlock()
	if running {
		return
	}
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.drawLocked()
				p.mu.Unlock()
			}
		}
	}(p.stop, p.done)
}

func (p *progress) drawLocked() {
	line := fmt.Sprintf("[%5.1fs] %s", time.Since(p.start).Seconds(), p.text)
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprint(p.w, "\r"+line+pad)
	p.width = len(line)
}

// clear erases the status line (before a permanent line is printed, and at
// the end) and stops redrawing it.
func (p *progress) clear() {
	if !p.on {
		return
	}
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	p.mu.Lock()
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
	p.mu.Unlock()
}

// above prints permanent text, whole lines, above the status line: it
// erases the line, writes text and draws the line again. It may be called
// from other goroutines than the one showing the status (the job's log
// while `job post --wait` polls), and off a terminal it only writes text,
// in turn with the other callers.
func (p *progress) above(text []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
	_, err := p.w.Write(text)
	if p.on && p.stop != nil {
		p.drawLocked()
	}
	return err
}
