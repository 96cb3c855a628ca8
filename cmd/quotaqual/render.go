package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/qualify"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/kindengine"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newRenderCmd) }

// newRenderCmd prints the kind topology's manifests for review. Every secret is a placeholder
// (REPLACE-generated-per-run): a run generates its own and puts them only into the cluster's
// Secrets, so the output can be pasted into a review or a ticket as it is.
func newRenderCmd() *cobra.Command {
	var engine, runID, profile, qqImage, valkeyImage, storageClass, gatewayName, gatewayImage string
	var emptyDir, storeGroup bool
	var gateways int
	cmd := &cobra.Command{
		Use:   "render --topology kind [--run-id ID] [--profile P]",
		Short: "Print the Kubernetes manifests of the kind topology for review (secrets as placeholders)",
		Long: `Print the manifests quotaqual run --topology kind applies: namespace, Secrets, gateway
ConfigMaps, Valkey PVC, NetworkPolicies (default deny plus the allow rules of the qualification's
policy), Services and Deployments, as one multi-document YAML stream. Secrets are shown as
placeholders; a run generates fresh ones and never prints them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if engine != topology.EngineKind {
				return withCode(wire.ExitUsage, fmt.Errorf("--topology %q cannot be rendered: only kind has manifests (use --topology kind)", engine))
			}
			if runID == "" {
				runID = topology.NewRunID()
			}
			if err := topology.ValidateRunID(runID); err != nil {
				return withCode(wire.ExitUsage, fmt.Errorf("--run-id: %w", err))
			}
			p, err := deployment.ProfileByName(profile)
			if err != nil {
				return withCode(wire.ExitUsage, fmt.Errorf("--profile: %w", err))
			}
			list, _ := scenarios.ForProfile(p.Name, nil)
			d, err := scenarios.NewDeployment(runID, p, list)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			var gw *undertest.Profile
			if gatewayName != "" {
				if gw, err = qualify.LoadGateway(gatewayName); err != nil {
					return withCode(wire.ExitUsage, fmt.Errorf("--gateway: %w", err))
				}
			}
			y, err := kindengine.RenderYAML(d, kindengine.ManifestOptions{
				RunID: runID, QuotaqualImage: qqImage, ValkeyImage: valkeyImage,
				StorageClass: storageClass, EmptyDir: emptyDir, Placeholders: true, StoreGroup: storeGroup,
				Gateway: gw, GatewayImage: gatewayImage,
				Gateways: gateways,
			})
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			_, err = cmd.OutOrStdout().Write(y)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&engine, "topology", topology.EngineKind, "topology to render (only kind has manifests)")
	f.StringVar(&runID, "run-id", "", "run id naming the namespace quotaqual-<id> (default: a fresh one)")
	f.StringVar(&profile, "profile", deployment.DefaultProfile, "profile of the gateway configs")
	f.StringVar(&qqImage, "image", "quotaqual:dev", "quotaqual image of gateways, providers and probe pods")
	f.StringVar(&valkeyImage, "valkey-image", images.DefaultValkeyImage, "Valkey image")
	f.StringVar(&storageClass, "storage-class", "", "storage class of Valkey's PVC (default: the cluster's default class)")
	f.BoolVar(&emptyDir, "valkey-emptydir", false, "keep Valkey's data on an emptyDir instead of a PVC (state does not survive a scale to zero)")
	f.StringVar(&gatewayName, "gateway", "", "the gateway under test: a gateway profile file or a shipped profile's name (default: quotaqual's own gateway)")
	f.StringVar(&gatewayImage, "gateway-image", "", "the gateway's image instead of its profile's launch.image")
	f.IntVar(&gateways, "gateways", topology.DefaultGateways, gatewaysUsage)
	f.BoolVar(&storeGroup, "store-group", false, "also render the replicated store group (valkey-1..3, sentinel-1..3, their Secret, ConfigMap and NetworkPolicies)")
	return cmd
}
