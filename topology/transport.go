package topology

import (
	"context"
	"net"
	"net/http"
	"time"
)

// NewTransport is an HTTP transport with explicit timeouts; dial, when set, creates the
// connections (the netns engine dials from inside a namespace).
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	if dial == nil {
		d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}
		dial = d.DialContext
	}
	return &http.Transport{
		Proxy:                 nil, // never route the qualification through a proxy from the environment
		DialContext:           dial,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ForceAttemptHTTP2:     false,
	}
}
