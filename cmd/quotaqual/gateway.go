package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/gateway"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newGatewayCmd) }

func newGatewayCmd() *cobra.Command {
	var (
		configPath string
		check      bool
	)
	cmd := &cobra.Command{
		Use:   "gateway --config FILE",
		Short: "Run the consumer gateway: authentication, token-quota admission, routing, settlement",
		Long: `gateway serves an OpenAI-compatible POST /v1/chat/completions on the config's listen
address: it authenticates the caller (HTTP Basic or bearer API key), reserves the request's
token estimate against the quota policy, routes it round-robin to a provider, relays the
response as it arrives and settles the reservation with the usage the provider reported.
401, 429 and 503 (quota store unavailable) never reach a provider.

The admin address serves /metrics (Prometheus), /healthz, /readyz and
GET /admin/quota?rule=R&subject=S[&model=M].

With --check the config is validated and the command exits 0 (valid) or 2 (every problem
listed with its path). SIGTERM or SIGINT drains in-flight requests within shutdown_timeout,
drains the settlement queue and exits 0. Logs are JSON lines on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return withCode(wire.ExitUsage, errors.New("--config is required: pass the gateway's YAML config file"))
			}
			cfg, err := gateway.LoadConfig(configPath, os.LookupEnv)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if check {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: valid\n", configPath)
				return err
			}
			if err := mutant.Arm(configPath); err != nil {
				return withCode(wire.ExitUsage, err)
			}
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "gateway")
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := gateway.Run(ctx, cfg, logger); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "gateway YAML config file")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit: 0 valid, 2 invalid")
	return cmd
}
