// Command gangring is a gang member's test program: it reads the gang
// environment (RANK, WORLD_SIZE, MASTER_PORT, GPUMESH_PEERS) and either
// does a ring all-reduce of a vector with the other members
// ("allreduce N"), or, between two members, measures a ping-pong's round
// trip and a bulk transfer's throughput ("bench PINGS MIB"), or listens
// on its gang address at port and prints each connection's source and
// first bytes ("listen PORT"), or connects to rank 0's port and says how
// the connection ended ("probe PORT").
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gangring:", err)
		os.Exit(1)
	}
}

type gang struct {
	rank, k int
	peers   []string
	port    int
}

func env() (gang, error) {
	var g gang
	var err error
	if g.rank, err = strconv.Atoi(os.Getenv("RANK")); err != nil {
		return g, fmt.Errorf("RANK: %w", err)
	}
	if g.k, err = strconv.Atoi(os.Getenv("WORLD_SIZE")); err != nil {
		return g, fmt.Errorf("WORLD_SIZE: %w", err)
	}
	if g.port, err = strconv.Atoi(os.Getenv("MASTER_PORT")); err != nil {
		return g, fmt.Errorf("MASTER_PORT: %w", err)
	}
	g.peers = strings.Split(os.Getenv("GPUMESH_PEERS"), ",")
	if len(g.peers) != g.k || g.rank < 0 || g.rank >= g.k {
		return g, fmt.Errorf("rank %d, world %d, peers %q", g.rank, g.k, g.peers)
	}
	if os.Getenv("MASTER_ADDR") != g.peers[0] {
		return g, fmt.Errorf("MASTER_ADDR %q is not rank 0's address %q", os.Getenv("MASTER_ADDR"), g.peers[0])
	}
	return g, nil
}

func run(args []string) error {
	g, err := env()
	if err != nil {
		return err
	}
	if len(args) != 3 && !(len(args) == 2 && args[0] != "bench") {
		return fmt.Errorf("usage: gangring allreduce N | gangring bench PINGS MIB | gangring listen PORT | gangring probe PORT")
	}
	a, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	switch args[0] {
	case "allreduce":
		return allreduce(g, a)
	case "listen":
		return listen(g, a)
	case "probe":
		return probe(g, a)
	case "bench":
		b, err := strconv.Atoi(args[2])
		if err != nil {
			return err
		}
		return bench(g, a, b)
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

// dial connects to member to's port, retrying until it answers the
// handshake (its job may not listen yet, and a connection to a gang
// address is accepted locally before the member is reached).
func dial(g gang, to int) (net.Conn, error) {
	addr := net.JoinHostPort(g.peers[to], strconv.Itoa(g.port))
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			var ack [1]byte
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if err = binary.Write(c, binary.BigEndian, int64(g.rank)); err == nil {
				_, err = io.ReadFull(c, ack[:])
			}
			if err == nil {
				_ = c.SetDeadline(time.Time{})
				return c, nil
			}
			c.Close()
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("connect to rank %d at %s: %w", to, addr, last)
}

// accept takes the next connection on ln and its handshake.
func accept(ln net.Listener) (net.Conn, int, error) {
	c, err := ln.Accept()
	if err != nil {
		return nil, 0, err
	}
	var from int64
	if err := binary.Read(c, binary.BigEndian, &from); err != nil {
		c.Close()
		return nil, 0, err
	}
	if _, err := c.Write([]byte{1}); err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, int(from), nil
}

func allreduce(g gang, n int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(g.peers[g.rank], strconv.Itoa(g.port)))
	if err != nil {
		return err
	}
	defer ln.Close()
	prev, next := (g.rank+g.k-1)%g.k, (g.rank+1)%g.k
	type accepted struct {
		c    net.Conn
		from int
		err  error
	}
	ach := make(chan accepted, 1)
	go func() {
		c, from, err := accept(ln)
		ach <- accepted{c, from, err}
	}()
	out, err := dial(g, next)
	if err != nil {
		return err
	}
	defer out.Close()
	a := <-ach
	if a.err != nil {
		return a.err
	}
	in := a.c
	defer in.Close()
	if a.from != prev {
		return fmt.Errorf("rank %d connected, want %d", a.from, prev)
	}
	fromAddr := in.RemoteAddr().(*net.TCPAddr).IP.String()

	v := make([]int64, n)
	for i := range v {
		v[i] = int64(g.rank+1) * int64(i+1)
	}
	chunk := func(c int) []int64 {
		c = ((c % g.k) + g.k) % g.k
		return v[c*n/g.k : (c+1)*n/g.k]
	}
	// step sends chunk s to next while it receives chunk r from prev,
	// added into its own (reduce) or in place of it.
	step := func(s, r int, reduce bool) error {
		var wg sync.WaitGroup
		var werr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr = binary.Write(out, binary.BigEndian, chunk(s))
		}()
		dst := chunk(r)
		got := make([]int64, len(dst))
		rerr := binary.Read(in, binary.BigEndian, got)
		wg.Wait()
		if rerr != nil {
			return rerr
		}
		if werr != nil {
			return werr
		}
		for i := range dst {
			if reduce {
				dst[i] += got[i]
			} else {
				dst[i] = got[i]
			}
		}
		return nil
	}
	for s := 0; s < g.k-1; s++ {
		if err := step(g.rank-s, g.rank-s-1, true); err != nil {
			return fmt.Errorf("reduce-scatter step %d: %w", s, err)
		}
	}
	for s := 0; s < g.k-1; s++ {
		if err := step(g.rank+1-s, g.rank-s, false); err != nil {
			return fmt.Errorf("all-gather step %d: %w", s, err)
		}
	}
	var sum int64
	for _, x := range v {
		sum += x
	}
	fmt.Printf("rank %d/%d allreduce n=%d sum=%d first=%d last=%d prev_from=%s\n", g.rank, g.k, n, sum, v[0], v[n-1], fromAddr)
	return nil
}

// bench: rank 1 pings rank 0 (one byte each way) PINGS times, then sends
// it MIB MiB; rank 0 answers.
func bench(g gang, pings, mib int) error {
	if g.k != 2 {
		return fmt.Errorf("bench needs 2 members, not %d", g.k)
	}
	if g.rank == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(g.peers[0], strconv.Itoa(g.port)))
		if err != nil {
			return err
		}
		defer ln.Close()
		c, _, err := accept(ln)
		if err != nil {
			return err
		}
		if _, err := io.Copy(c, c); err != nil { // echo the pings
			return err
		}
		c.Close()
		c, _, err = accept(ln)
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			return err
		}
		if err := binary.Write(c, binary.BigEndian, n); err != nil {
			return err
		}
		c.Close()
		return nil
	}
	c, err := dial(g, 0)
	if err != nil {
		return err
	}
	b := []byte{0}
	start := time.Now()
	for i := 0; i < pings; i++ {
		if _, err := c.Write(b); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
	}
	rtt := time.Since(start) / time.Duration(pings)
	c.Close()
	c, err = dial(g, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	start = time.Now()
	for i := 0; i < mib; i++ {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	var n int64
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		return err
	}
	el := time.Since(start)
	if n != int64(mib)<<20 {
		return fmt.Errorf("rank 0 got %d bytes of %d", n, int64(mib)<<20)
	}
	fmt.Printf("bench rtt_us=%.1f throughput_mbps=%.1f bytes=%d\n", float64(rtt.Nanoseconds())/1e3, float64(n)/el.Seconds()/1e6, n)
	return nil
}

// listen prints each connection to its gang address at port: its source
// address and what it sent.
func listen(g gang, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(g.peers[g.rank], strconv.Itoa(port)))
	if err != nil {
		return err
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(io.LimitReader(c, 100))
		fmt.Printf("got %s %s\n", c.RemoteAddr().(*net.TCPAddr).IP, b)
		c.Close()
	}
}

// probe connects to rank 0 at port and prints how the connection ended
// without a byte: "reset" or "closed".
func probe(g gang, port int) error {
	c, err := net.Dial("tcp", net.JoinHostPort(g.peers[0], strconv.Itoa(port)))
	if errors.Is(err, syscall.ECONNRESET) {
		fmt.Println("reset") // before connect returned
		return nil
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	_, err = c.Read(b[:])
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		fmt.Println("reset")
	case err == io.EOF:
		fmt.Println("closed")
	default:
		return fmt.Errorf("read: %v", err)
	}
	return nil
}
