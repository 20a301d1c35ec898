package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProtocolErrorsJSON sends requests net/http refuses before any
// handler runs: the answers keep their status and come as OpenAI's JSON
// errors; a handler's own answers pass untouched.
func TestProtocolErrorsJSON(t *testing.T) {
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "handler's own")
	}))
	hs.Listener = Listener(hs.Listener)
	hs.Config.MaxHeaderBytes = 4 << 10
	hs.Start()
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, tt := range []struct {
		name, send string
		status     int
		code       string
	}{
		{"no Host header", "GET / HTTP/1.1\r\n\r\n", 400, "bad_request"},
		{"malformed header", "GET / HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n", 400, "bad_request"},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", 431, "request_header_fields_too_large"},
		{"unknown transfer encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", 501, "not_implemented"},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go conn.Write([]byte(tt.send))
		rsp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		err = json.NewDecoder(rsp.Body).Decode(&e)
		rsp.Body.Close()
		conn.Close()
		if rsp.StatusCode != tt.status || rsp.Header.Get("Content-Type") != "application/json" || err != nil || e.Error.Code != tt.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s %+v (%v), want %d JSON with code %s", tt.name, rsp.StatusCode, rsp.Header.Get("Content-Type"), e, err, tt.status, tt.code)
		}
	}
	rsp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if rsp.StatusCode != 404 || string(b) != "handler's own" {
		t.Errorf("a handler's answer was changed: %d %q", rsp.StatusCode, b)
	}
}
