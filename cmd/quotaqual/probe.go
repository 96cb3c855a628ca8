package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// Hidden helpers the docker topology runs inside its containers (whose images have no shell):
//
//	quotaqual probe --to host:port [--timeout 1s]   one TCP connect; JSON result on stdout; exit 0 reached, 1 not
//	quotaqual relay --to host:port                  pipe stdin/stdout to one TCP connection (the harness's
//	                                                way in when it cannot reach published ports)
//	quotaqual sleep                                 idle until SIGTERM (the client container's process)
func init() {
	subcommands = append(subcommands, newProbeCmd, newRelayCmd, newSleepCmd)
}

func newProbeCmd() *cobra.Command {
	var to string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    "probe --to host:port [--timeout 1s]",
		Short:  "Try one TCP connection from here (used inside topology containers)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(to); err != nil {
				return withCode(wire.ExitUsage, fmt.Errorf("--to %q is not host:port, for example --to valkey:6379", to))
			}
			if timeout <= 0 || timeout > time.Minute {
				return withCode(wire.ExitUsage, fmt.Errorf("--timeout %s is out of range: use 1ms to 1m", timeout))
			}
			out := topology.ProbeOutput{To: to}
			d := net.Dialer{Timeout: timeout}
			start := time.Now()
			conn, err := d.DialContext(cmd.Context(), "tcp", to)
			out.ElapsedNS = int64(time.Since(start))
			if err == nil {
				conn.Close()
				out.Reached = true
			} else {
				out.Error = dialCause(err)
			}
			b, _ := json.Marshal(out)
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			if !out.Reached {
				return withCode(wire.ExitFailed, nil)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "host:port to connect to (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Second, "connect timeout")
	return cmd
}

func newRelayCmd() *cobra.Command {
	var to string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    "relay --to host:port",
		Short:  "Relay stdin/stdout to one TCP connection (used inside topology containers)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(cmd.Context(), "tcp", to)
			if err != nil {
				// The caller waits for this first stderr line to learn how the dial went.
				fmt.Fprintln(os.Stderr, "error: "+dialCause(err))
				return withCode(wire.ExitFailed, nil)
			}
			fmt.Fprintln(os.Stderr, "connected")
			tc := conn.(*net.TCPConn)
			done := make(chan struct{}, 2)
			go func() {
				_, _ = io.Copy(tc, os.Stdin)
				_ = tc.CloseWrite()
				done <- struct{}{}
			}()
			go func() {
				_, _ = io.Copy(os.Stdout, tc)
				done <- struct{}{}
			}()
			<-done // either side finished: the HTTP client does not half-close
			tc.Close()
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "host:port to connect to (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "connect timeout")
	return cmd
}

func newSleepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "sleep",
		Short:  "Idle until SIGTERM or SIGINT (the docker topology's client container)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
}

// dialCause reduces a dial error to its cause: "connection refused", "i/o timeout", ...
func dialCause(err error) string {
	var ne net.Error
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network is unreachable"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "no route to host"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "i/o timeout"
	case errors.As(err, &dns):
		return "name not resolved: " + dns.Name
	}
	return err.Error()
}
