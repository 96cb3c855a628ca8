package altgateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// valkeyDo dials addr, authenticates when password is set, sends every command in one write
// and reads their replies (integers, simple strings, or errors). One connection per call, with
// ctx's deadline on all of it: nothing to reconnect, nothing that outlives a partition.
func valkeyDo(ctx context.Context, addr, password string, cmds ...[]string) ([]int64, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if password != "" {
		cmds = append([][]string{{"AUTH", password}}, cmds...)
	}
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	out := make([]int64, 0, len(cmds))
	for range cmds {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, ":"):
			n, err := strconv.ParseInt(line[1:], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("valkey: bad integer reply")
			}
			out = append(out, n)
		case strings.HasPrefix(line, "+"):
			out = append(out, 0)
		case strings.HasPrefix(line, "-"):
			return nil, errors.New("valkey: " + strings.SplitN(line[1:], " ", 2)[0]) // the code only: never echo a command
		default:
			return nil, fmt.Errorf("valkey: unexpected reply type %q", line[:min(1, len(line))])
		}
	}
	return out, nil
}
