package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets a test run this binary as the command itself (main, with
// its signal handling), when REPLAYSSM_TEST_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("REPLAYSSM_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestServeSIGTERM runs `replayssm serve` as a process, starts a long
// stream and sends SIGTERM, as docker, Kubernetes and systemd do: the
// stream ends with an error event and [DONE] once the grace period is
// over, and the process exits 0.
func TestServeSIGTERM(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM on Windows")
	}
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--max-batch", "1", "--shutdown-grace", "300ms")
	cmd.Env = append(os.Environ(), "REPLAYSSM_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
		}
	}()
	url := servedURL(t, stdout)
	rsp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"And the LORD spake","max_tokens":4000,"temperature":1,"seed":1,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	sc := bufio.NewScanner(rsp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: ") {
		t.Fatalf("first event: %q", sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() { exited <- cmd.Wait() }()
	var last []string
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			last = append(last[max(0, len(last)-1):], l)
		}
	}
	if len(last) != 2 || !strings.Contains(last[0], `"error"`) || last[1] != "data: [DONE]" {
		t.Errorf("the stream ended with %q, want an error event and [DONE]", last)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve exited with %v after SIGTERM; stderr: %s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Errorf("stderr does not say it drains: %s", stderr.String())
	}
}

// TestServeTimeouts checks that a body shorter than its Content-Length and
// an idle keep-alive connection are closed after --read-timeout and
// --idle-timeout, not held open.
func TestServeTimeouts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, done := startServe(t, ctx, "--max-batch", "1", "--read-timeout", "300ms", "--idle-timeout", "300ms")
	addr := strings.TrimPrefix(url, "http://")
	for _, tt := range []struct {
		name, send string
	}{
		{"short body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":"},
		{"idle keep-alive", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := conn.Write([]byte(tt.send)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, conn) // until the server closes
		conn.Close()
		if err != nil {
			t.Errorf("%s: the connection stayed open (%v)", tt.name, err)
		} else if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: closed after %v", tt.name, d)
		}
	}
	cancel()
	if c := <-done; c != 0 {
		t.Errorf("exit %d", c)
	}
}
