package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/internal/peers/envoyaigw"
	"github.com/quotaqual/quotaqual/internal/peers/gubershim"
	"github.com/quotaqual/quotaqual/internal/peers/kuadrant"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newShimCmd) }

// shims are the peer shims: each loads its JSON config (a usage error when it is wrong) and
// returns the function that serves it.
var shims = map[string]func(path string, log *slog.Logger) (func(context.Context) error, error){
	"envoy-ai-gateway": func(path string, log *slog.Logger) (func(context.Context) error, error) {
		c, users, err := envoyaigw.Load(path, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return envoyaigw.Run(ctx, c, users, log) }, nil
	},
	"gubernator": func(path string, log *slog.Logger) (func(context.Context) error, error) {
		c, users, err := gubershim.Load(path, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return gubershim.Run(ctx, c, users, log) }, nil
	},
	"kuadrant": func(path string, log *slog.Logger) (func(context.Context) error, error) {
		c, users, err := kuadrant.Load(path, os.LookupEnv)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return kuadrant.Run(ctx, c, users, log) }, nil
	},
}

// newShimCmd runs a peer shim: a thin gateway doing what a real gateway does around a
// third-party rate-limit engine (internal/peers), launched by the peer profiles like any
// gateway process. Hidden: a test subject, not a product.
func newShimCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:    "shim NAME --config FILE.json",
		Short:  "Run a peer shim (envoy-ai-gateway, kuadrant, gubernator) in front of its rate-limit engine",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			load, ok := shims[args[0]]
			if !ok {
				return withCode(wire.ExitUsage, errors.New("unknown shim "+args[0]+": use envoy-ai-gateway, kuadrant or gubernator"))
			}
			if configPath == "" {
				return withCode(wire.ExitUsage, errors.New("--config is required: pass the shim's JSON config file"))
			}
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "shim-"+args[0])
			run, err := load(configPath, log)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := run(ctx); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "the shim's JSON config file")
	return cmd
}
