// Command svcserver is the HTTP server the service tests run as a replica:
// it listens on 127.0.0.1:$PORT (the job's own loopback); as a gang's
// member ($RANK set), on every address of its own network namespace, so
// that the other members reach it at its gang address too.
//
//	GET /healthz       200 "ok"
//	GET /work?ms=N     sleeps N ms, then answers "ok <pid>"
//	GET /stream?n=N    N server-sent events, 100 ms apart
//	POST /echo         the request body
//	GET /fail          500 (a failing handler)
//	GET /whoami        "rank $RANK"
//	GET /peer?rank=N   what GET /whoami answers on gang member N, reached
//	                   at its gang address (GPUMESH_PEERS)
//	GET /ws            a WebSocket that sends back each message
//	POST /v1/chat/completions
//	                   an OpenAI-compatible chat completion: max_tokens
//	                   completion tokens, one per word of the messages'
//	                   content as prompt tokens; streamed as server-sent
//	                   events (the usage in the last) when stream is true
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
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
	mux.HandleFunc("POST /v1/chat/completions", chatCompletion)
	mux.HandleFunc("GET /fail", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "failing", 500) })
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "rank %s\n", os.Getenv("RANK")) })
	mux.HandleFunc("GET /peer", func(w http.ResponseWriter, r *http.Request) {
		peers := strings.Split(os.Getenv("GPUMESH_PEERS"), ",")
		n, err := strconv.Atoi(r.URL.Query().Get("rank"))
		if err != nil || n < 0 || n >= len(peers) || peers[n] == "" {
			http.Error(w, "no such gang member", http.StatusBadRequest)
			return
		}
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + net.JoinHostPort(peers[n], port) + "/whoami")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	})
	addr := "127.0.0.1:" + port
	if os.Getenv("RANK") != "" {
		addr = ":" + port
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on " + addr) // once it does: a test waits for this line
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func chatCompletion(w http.ResponseWriter, r *http.Request) {
	var req struct {
		MaxTokens int  `json:"max_tokens"`
		Stream    bool `json:"stream"`
		Messages  []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(strings.Fields(m.Content))
	}
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": req.MaxTokens, "total_tokens": prompt + req.MaxTokens}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "chat.completion",
			"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": strings.Repeat("tok ", req.MaxTokens)}}},
			"usage":   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for range req.MaxTokens {
		fmt.Fprint(w, `data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"tok "}}],"usage":null}`+"\n\n")
		_ = rc.Flush()
	}
	last, _ := json.Marshal(map[string]any{"object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", last)
}
