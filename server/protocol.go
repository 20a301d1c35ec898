package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
)

// Listener wraps ln so that the protocol errors net/http answers itself,
// before any handler runs (a malformed request line or header: 400;
// headers over the limit: 431; an unsupported transfer encoding: 501),
// come in OpenAI's JSON error shape like every other error, not as plain
// text. net/http writes such an answer in one Write on the connection,
// with its fixed plain-text headers and Connection: close; that Write is
// rewritten, every other byte passes untouched.
func Listener(ln net.Listener) net.Listener { return jsonErrorListener{ln} }

type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

type jsonErrorConn struct{ net.Conn }

// plainErrorHeaders are the headers net/http's own error answers carry
// (net/http's errorHeaders).
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *jsonErrorConn) Write(b []byte) (int, error) {
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 4")) && !bytes.HasPrefix(b, []byte("HTTP/1.1 5")) {
		return c.Conn.Write(b)
	}
	i := bytes.Index(b, []byte(plainErrorHeaders))
	if i < 0 || bytes.Contains(b[:i], []byte("\r\n")) {
		return c.Conn.Write(b) // a handler's answer: its headers differ
	}
	status := string(b[len("HTTP/1.1 "):i])
	text := strings.TrimSpace(string(b[i+len(plainErrorHeaders):]))
	code := "bad_request"
	switch {
	case strings.HasPrefix(status, "431"):
		code = "request_header_fields_too_large"
	case strings.HasPrefix(status, "5"):
		code = "not_implemented"
	}
	body, _ := json.Marshal(map[string]*apiError{"error": {Message: text, Type: "invalid_request_error", Code: &code}})
	out := fmt.Sprintf("HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)
	if _, err := c.Conn.Write([]byte(out)); err != nil {
		return 0, err
	}
	return len(b), nil
}
