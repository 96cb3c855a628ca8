package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/internal/altgateway"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newAltGatewayCmd) }

// newAltGatewayCmd runs the second, independent gateway the tests qualify through a gateway
// profile (undertest/profiles/altgateway.yaml). Hidden: it is a test subject, not a product.
func newAltGatewayCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:    "altgateway --config FILE.json",
		Short:  "Run the independent test gateway (fixed-window INCRBY counter) the seam is proven with",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return withCode(wire.ExitUsage, errors.New("--config is required: pass the altgateway's JSON config file"))
			}
			s, err := altgateway.LoadConfig(configPath, os.LookupEnv)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "altgateway")
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := altgateway.Run(ctx, s, logger); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "altgateway JSON config file")
	return cmd
}
