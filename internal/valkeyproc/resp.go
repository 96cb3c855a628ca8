package valkeyproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Do sends one command to addr on a fresh connection (after AUTH when password is set) and
// returns its reply: a string for simple and bulk strings, int64 for integers, []any for
// arrays, nil for a null. A server error is returned as an error. It exists for the harness's
// questions to servers and Sentinels (INFO, SENTINEL ...), bounded by ctx and one second.
func Do(ctx context.Context, addr, password string, args ...string) (any, error) {
	return DoVia(ctx, nil, addr, password, args...)
}

// Dialer opens a connection to addr; nil means a plain TCP dial from this process. An engine
// whose store nodes the harness cannot dial directly (docker) passes one that relays.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// DoVia is Do over a connection from dial (nil: a plain TCP dial).
func DoVia(ctx context.Context, dial Dialer, addr, password string, args ...string) (any, error) {
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: 500 * time.Millisecond}
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	conn, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := conn.Write(encode("AUTH", password)); err != nil {
			return nil, err
		}
		if _, err := readReply(r); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	if _, err := conn.Write(encode(args...)); err != nil {
		return nil, err
	}
	return readReply(r)
}

func encode(args ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("valkeyproc: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, errors.New(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("valkeyproc: unexpected reply %q", line)
}

// Info returns the fields of INFO section on addr as a map.
func Info(ctx context.Context, addr, password, section string) (map[string]string, error) {
	return InfoVia(ctx, nil, addr, password, section)
}

// InfoVia is Info over a connection from dial (nil: a plain TCP dial).
func InfoVia(ctx context.Context, dial Dialer, addr, password, section string) (map[string]string, error) {
	rep, err := DoVia(ctx, dial, addr, password, "INFO", section)
	if err != nil {
		return nil, err
	}
	s, _ := rep.(string)
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out, nil
}
