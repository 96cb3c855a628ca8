package main

import (
	"github.com/spf13/cobra"
)

// exitError carries an exit code out of a command's RunE.
type exitError struct {
	code int
	err  error // printed to stderr; nil when the command already reported
}

func (e *exitError) Error() string {
	if e.err == nil {
		return "exit status"
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that main exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// subcommands lists the constructors of every subcommand; each command's file registers its
// constructor in an init function, so adding a command touches only its own file.
var subcommands []func() *cobra.Command

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "quotaqual",
		Short: "Qualify distributed token-quota enforcement for LLM gateways",
		Long: `quotaqual brings up two consumer gateways that embed its token-quota limiter, three
provider stubs and a real Valkey, runs the qualification scenarios, pulls the fault levers,
and writes a redacted evidence bundle plus JUnit for CI.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, c := range subcommands {
		root.AddCommand(c())
	}
	return root
}

// gatewaysUsage is the --gateways flag's help, the same on run, up and render.
const gatewaysUsage = "gateway replicas, 2 to 16 (gateway-a, gateway-b, …): every scenario spreads over all of them"
