// Command svcserver is the HTTP server the service tests run as a replica:
// it listens on 127.0.0.1:$PORT (the job's own loopback).
//
//	GET /healthz       200 "ok"
//	GET /work?ms=N     sleeps N ms, then answers "ok <pid>"
//	GET /stream?n=N    N server-sent events, 100 ms apart
//	POST /echo         the request body
//	GET /fail          500 (a failing handler)
//	GET /ws            a WebSocket that sends back each message
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/net/websocket"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		fmt.Fprintln(os.Stderr, "PORT is not set")
		os.Exit(2)
	}
	pid := os.Getpid()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
		if ms, _ := strconv.Atoi(r.URL.Query().Get("ms")); ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		fmt.Fprintf(w, "ok %d\n", pid)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			_ = rc.Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
	mux.Handle("GET /ws", websocket.Handler(func(ws *websocket.Conn) {
		var msg string
		for websocket.Message.Receive(ws, &msg) == nil {
			if websocket.Message.Send(ws, fmt.Sprintf("%d: %s", pid, msg)) != nil {
				return
			}
		}
	}))
	mux.HandleFunc("GET /fail", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "failing", 500) })
	fmt.Println("listening on 127.0.0.1:" + port)
	if err := http.ListenAndServe("127.0.0.1:"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
