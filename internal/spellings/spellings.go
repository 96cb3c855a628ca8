// Package spellings writes one metered request the many ways HTTP/1.x lets a client spell it on
// the wire — other path spellings, other request-target forms, another protocol version, method
// overrides, conflicting framing, an upgrade, a body longer than announced — and reads back
// every answer a connection gives. A gateway must refuse each (4xx, no provider call) or meter
// it exactly like the canonical request: a spelling a router normalises and forwards while the
// quota only matches the canonical one is a path around the quota.
//
// Go's http.Client would normalise most of these before they reach the wire, so they are sent
// as raw bytes on a connection the caller dials (from the client's vantage point).
package spellings

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request is the canonical request every spelling rewrites: a POST of Body to Path on Host
// (host:port, as the Host header carries it), with Header (Authorization, Content-Type, …; not
// Host, Content-Length or Transfer-Encoding, which the spelling writes).
type Request struct {
	Host   string
	Path   string
	Header http.Header
	Body   []byte
}

// Spelling is one way of writing the request.
type Spelling struct {
	Name string
	// Why says what a careless gateway does with it.
	Why string
	// Requests is how many requests a server that parses the bytes correctly reads from
	// them (two when the body smuggles a second one).
	Requests int
	// Write renders the bytes sent on one connection.
	Write func(r Request) []byte
}

// All lists the spellings, the canonical request first (the control).
func All() []Spelling {
	return []Spelling{
		{"canonical", "the control: the request as clients send it", 1, func(r Request) []byte {
			return head("POST", r.Path, "HTTP/1.1", r, withLength(r.Body))
		}},
		{"trailing-slash", "a router that strips a trailing slash forwards a path the quota does not match", 1, func(r Request) []byte {
			return head("POST", r.Path+"/", "HTTP/1.1", r, withLength(r.Body))
		}},
		{"doubled-slash", "a router that cleans paths forwards //", 1, func(r Request) []byte {
			return head("POST", strings.Replace(r.Path, "/", "//", 2)[1:], "HTTP/1.1", r, withLength(r.Body))
		}},
		{"leading-doubled-slash", "a router that cleans paths forwards a leading //", 1, func(r Request) []byte {
			return head("POST", "/"+r.Path, "HTTP/1.1", r, withLength(r.Body))
		}},
		{"dot-segment", "a router that resolves /./ forwards it", 1, func(r Request) []byte {
			return head("POST", insertSegment(r.Path, "."), "HTTP/1.1", r, withLength(r.Body))
		}},
		{"dot-dot-segment", "a router that resolves /x/../ forwards it", 1, func(r Request) []byte {
			return head("POST", insertSegment(r.Path, "x/.."), "HTTP/1.1", r, withLength(r.Body))
		}},
		{"percent-encoded-slash", "a router that decodes %2F before matching forwards it", 1, func(r Request) []byte {
			i := strings.LastIndex(r.Path, "/")
			return head("POST", r.Path[:i]+"%2F"+r.Path[i+1:], "HTTP/1.1", r, withLength(r.Body))
		}},
		{"percent-encoded-letter", "a router that decodes the path before matching forwards %63 as c", 1, func(r Request) []byte {
			i := strings.LastIndex(r.Path, "/") + 1
			return head("POST", r.Path[:i]+fmt.Sprintf("%%%02X", r.Path[i])+r.Path[i+1:], "HTTP/1.1", r, withLength(r.Body))
		}},
		{"upper-case", "a router that matches paths case-insensitively forwards it", 1, func(r Request) []byte {
			return head("POST", strings.ToUpper(r.Path), "HTTP/1.1", r, withLength(r.Body))
		}},
		{"mixed-case", "a router that matches paths case-insensitively forwards it", 1, func(r Request) []byte {
			return head("POST", mixedCase(r.Path), "HTTP/1.1", r, withLength(r.Body))
		}},
		{"query-string", "a quota matched on the whole request target misses it", 1, func(r Request) []byte {
			return head("POST", r.Path+"?stream=false&api-version=1", "HTTP/1.1", r, withLength(r.Body))
		}},
		{"absolute-form", "a quota matched on the request target as sent misses http://host/path", 1, func(r Request) []byte {
			return head("POST", "http://"+r.Host+r.Path, "HTTP/1.1", r, withLength(r.Body))
		}},
		{"absolute-form-other-host", "a proxying router may send it to the host it names", 1, func(r Request) []byte {
			return head("POST", "http://provider.invalid"+r.Path, "HTTP/1.1", r, withLength(r.Body))
		}},
		{"http-1.0", "a quota path for HTTP/1.1 only misses it", 1, func(r Request) []byte {
			return head("POST", r.Path, "HTTP/1.0", r, withLength(r.Body))
		}},
		{"get-with-method-override", "GET with X-HTTP-Method-Override: POST; a framework that honours it serves a POST the quota (metering POST) never saw", 1, func(r Request) []byte {
			return head("GET", r.Path, "HTTP/1.1", r, withLength(r.Body), overrides("POST")...)
		}},
		{"put-with-method-override", "PUT with the override headers naming POST", 1, func(r Request) []byte {
			return head("PUT", r.Path, "HTTP/1.1", r, withLength(r.Body), overrides("POST")...)
		}},
		{"transfer-encoding-and-content-length", "chunked framing with a Content-Length announcing less: a gateway and a provider that read the framing differently see different requests", 1, func(r Request) []byte {
			return head("POST", r.Path, "HTTP/1.1", r, withChunked(r.Body, len(r.Body)/2))
		}},
		{"h2c-upgrade", "an h2c upgrade a server accepts carries the request past an HTTP/1 metering layer", 1, func(r Request) []byte {
			return head("POST", r.Path, "HTTP/1.1", r, withLength(r.Body),
				"Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
		}},
		{"body-longer-than-announced", "a Content-Length announcing half the body; the rest is left on the connection", 2, func(r Request) []byte {
			return head("POST", r.Path, "HTTP/1.1", r, withBytes(r.Body, len(r.Body)/2))
		}},
		{"request-smuggled-in-body", "a body that carries a second request past its Content-Length: a gateway that relays the connection's bytes forwards it unmetered", 2, func(r Request) []byte {
			first := head("POST", r.Path, "HTTP/1.1", r, withLength(r.Body))
			return append(first, head("POST", r.Path, "HTTP/1.1", r, withLength(r.Body))...)
		}},
	}
}

// overrides are the method-override headers frameworks honour, each naming m.
func overrides(m string) []string {
	return []string{"X-HTTP-Method-Override: " + m, "X-HTTP-Method: " + m, "X-Method-Override: " + m}
}

// framing writes the body and its framing headers.
type framing struct {
	headers []string
	body    []byte
}

func withLength(b []byte) framing {
	return framing{[]string{"Content-Length: " + strconv.Itoa(len(b))}, b}
}

// withBytes announces n bytes and sends all of b.
func withBytes(b []byte, n int) framing {
	return framing{[]string{"Content-Length: " + strconv.Itoa(n)}, b}
}

// withChunked sends b chunked and also announces a Content-Length of n.
func withChunked(b []byte, n int) framing {
	var out bytes.Buffer
	fmt.Fprintf(&out, "%x\r\n%s\r\n0\r\n\r\n", len(b), b)
	return framing{[]string{"Transfer-Encoding: chunked", "Content-Length: " + strconv.Itoa(n)}, out.Bytes()}
}

// head writes one request: its line, Host, the request's headers, extra lines and framing.
func head(method, target, proto string, r Request, f framing, extra ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s %s\r\nHost: %s\r\n", method, target, proto, r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	for _, l := range append(extra, f.headers...) {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(f.body)
	return b.Bytes()
}

// insertSegment puts seg before the path's last segment: /v1/chat/./completions.
func insertSegment(p, seg string) string {
	i := strings.LastIndex(p, "/")
	return p[:i] + "/" + seg + p[i:]
}

// mixedCase upper-cases the first letter of each segment: /V1/Chat/Completions.
func mixedCase(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if s != "" {
			parts[i] = strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return strings.Join(parts, "/")
}

// Answer is one response read off the connection.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// followUpWait bounds the wait for a second answer once the first was read.
const followUpWait = 2 * time.Second

// Exchange sends raw on conn and reads every response the server writes until it closes the
// connection, want responses were read, or the deadline passes. It returns the answers read
// and the error that ended the reading, if it was not the end of the connection or want.
func Exchange(ctx context.Context, conn net.Conn, raw []byte, want int, timeout time.Duration) ([]Answer, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(raw); err != nil {
		return nil, fmt.Errorf("sending: %w", err)
	}
	br := bufio.NewReader(conn)
	var out []Answer
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
				return out, nil // the server closed the connection
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && len(out) > 0 {
				return out, nil // answered, then kept the connection open
			}
			return out, fmt.Errorf("reading answer %d: %w", len(out)+1, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		out = append(out, Answer{Status: resp.StatusCode, Header: resp.Header, Body: body})
		if err != nil {
			return out, fmt.Errorf("reading answer %d's body: %w", len(out), err)
		}
		if resp.Close {
			return out, nil
		}
		// A further answer comes at once or not at all: the server has the bytes already.
		if next := time.Now().Add(followUpWait); next.Before(deadline) {
			_ = conn.SetDeadline(next)
		}
	}
	return out, nil
}
