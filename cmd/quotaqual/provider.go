package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newProviderCmd) }

func newProviderCmd() *cobra.Command {
	var f providerstub.ProviderFlags
	cmd := &cobra.Command{
		Use:   "provider --site NAME --listen ADDR --admin-listen ADDR",
		Short: "Run an OpenAI-compatible provider stub with deterministic usage and call counters",
		Long: `provider serves POST /v1/chat/completions (JSON and SSE streaming), GET /v1/models and
GET /healthz on --listen, and GET /admin/calls, /healthz and /readyz on --admin-listen.
Usage is deterministic: prompt_tokens = sum over messages of (ceil(content bytes / 4) + 4) + 3,
completion_tokens = min(max_tokens, --completion-tokens). Every response carries
x-quotaqual-provider-site. Logs are JSON lines on stderr, one per request, without prompts.
SIGTERM or SIGINT drains in-flight requests for up to 5s and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.Validate(); err != nil {
				return withCode(wire.ExitUsage, err)
			}
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "provider")
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := providerstub.ServeProvider(ctx, f.Config(), f.Listen, f.AdminListen, logger); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			return nil
		},
	}
	f.Register(cmd.Flags())
	return cmd
}
