// Package rls is the gRPC client of envoyproxy/ratelimit's RateLimitService the
// Envoy-based shims share (envoyaigw, kuadrant): one ShouldRateLimit call per phase, with a
// per-descriptor hits_addend, under the caller's deadline — what Envoy's rate-limit filter
// sends (go-control-plane envoy/service/ratelimit/v3/rls.proto; the filter's client is
// source/extensions/filters/common/ratelimit/ratelimit_impl.cc). It decides nothing: the
// shims map its answers the way their gateway does.
package rls

import (
	"context"
	"fmt"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Client talks to one rate-limit service over one gRPC connection (HTTP/2), as Envoy's
// filter does through its rate-limit cluster.
type Client struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

// Dial makes the client of the service at addr (host:port, plaintext). The connection is
// made lazily and re-made after a failure, by gRPC.
func Dial(addr string) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("rate-limit service %s: %w", addr, err)
	}
	// Connect now, as Envoy's cluster does before traffic, so the first request's 20 ms are
	// not spent dialling.
	conn.Connect()
	return &Client{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Entry is one descriptor entry (key, value).
type Entry struct{ Key, Value string }

// Status is the service's answer for the one descriptor a shim sends.
type Status struct {
	OverLimit bool
	Limit     uint32        // requests_per_unit of the matched limit (0: no limit matched)
	Window    time.Duration // its unit as a duration (0: none)
	Remaining uint32
	Reset     time.Duration // until the window resets
}

// Should sends ShouldRateLimit for one descriptor of entries in domain, with the descriptor's
// hits_addend set to hits (0 included: a pure check), under timeout. An RPC error (the
// deadline included) is returned as it is: the caller's failure mode decides.
func (c *Client) Should(ctx context.Context, domain string, entries []Entry, hits uint64, timeout time.Duration) (Status, error) {
	d := &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(hits)}
	for _, e := range entries {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if err != nil {
		return Status{}, err
	}
	st := Status{OverLimit: resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT}
	if ss := resp.GetStatuses(); len(ss) > 0 {
		s := ss[0]
		st.Remaining = s.GetLimitRemaining()
		st.Reset = s.GetDurationUntilReset().AsDuration()
		if l := s.GetCurrentLimit(); l != nil {
			st.Limit = l.GetRequestsPerUnit()
			st.Window = unitDuration(l.GetUnit())
		}
	}
	return st, nil
}

// unitDuration is a rate-limit unit as a duration (what Envoy's X-RateLimit headers call w=).
func unitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	}
	return 0
}
