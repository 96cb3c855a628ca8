// Command quotaqual qualifies distributed token-quota enforcement for LLM gateways. The same
// binary is the harness (run, up, down), the consumer gateway (gateway) and the provider stub
// (provider), so what is qualified is what ships.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/quotaqual/quotaqual/wire"
)

func main() {
	err := newRootCmd().Execute()
	if err == nil {
		return
	}
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.err != nil {
			fmt.Fprintln(os.Stderr, "quotaqual:", ex.err)
		}
		os.Exit(ex.code)
	}
	// Anything cobra itself rejects (unknown flag, bad argument) is bad usage.
	fmt.Fprintln(os.Stderr, "quotaqual:", err)
	os.Exit(wire.ExitUsage)
}
