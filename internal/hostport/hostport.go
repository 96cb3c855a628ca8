// Package hostport checks host:port addresses given on a command line or in a rendered
// configuration: the provider stub's flags and the gateway config the deployment renders share
// the one rule.
package hostport

import (
	"fmt"
	"net"
	"strconv"
)

// Check checks that addr is host:port with a numeric port.
func Check(what, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port (for example 127.0.0.1:8080 or :8080)", what, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s %q has no valid port: use a number from 0 to 65535", what, addr)
	}
	return nil
}
