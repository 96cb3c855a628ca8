package kindengine

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/k8s"
	"github.com/quotaqual/quotaqual/undertest"
)

// kindPorts are the container and Service ports of the kind topology (each pod has its own
// address, so every host uses the same numbers, as on docker).
var kindPorts = topology.Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}

// ManifestOptions are the choices of the kind manifests besides the deployment.
type ManifestOptions struct {
	RunID          string
	Namespace      string // default quotaqual-<run id>
	QuotaqualImage string // default quotaqual:dev
	ValkeyImage    string // default images.DefaultValkeyImage
	PullPolicy     corev1.PullPolicy
	StorageClass   string // Valkey's PVC; "" = the cluster's default class
	EmptyDir       bool   // Valkey data on an emptyDir (no PVC): state does not survive StopValkey
	// Placeholders renders every secret as k8s.Placeholder instead of the deployment's
	// generated values (for review).
	Placeholders bool
	// Policy is the network policy to render; nil means DefaultPolicy for the gateways, with the
	// store group's rules when StoreGroup is set.
	Policy *topology.Policy
	// StoreGroup renders the replicated store group (valkey-1..3, sentinel-1..3, store.go) too.
	StoreGroup bool
	// Gateway is the gateway under test; nil means quotaqual's own (undertest.Default).
	Gateway *undertest.Profile
	// GatewayImage replaces the gateway profile's launch.image (topology.Spec.GatewayImage).
	GatewayImage string
	// Gateways is how many gateway replicas to render (a Deployment, Service and policy rules
	// each): 0 means topology.DefaultGateways.
	Gateways int
}

// Sentinel timings of the kind store group: the same as on netns and docker.
const (
	kindStoreDown     = time.Second     // down-after-milliseconds
	kindStoreFailover = 3 * time.Second // failover-timeout
)

// Input builds the renderer's input for deployment d: gateway configs whose addresses are
// the Service DNS names, the providers' arguments, the policy's rules and the secrets.
func Input(d *deployment.Deployment, o ManifestOptions) (k8s.Input, error) {
	if err := topology.ValidateRunID(o.RunID); err != nil {
		return k8s.Input{}, err
	}
	n, err := topology.ValidateGateways(o.Gateways)
	if err != nil {
		return k8s.Input{}, err
	}
	gateways := topology.GatewayNames(n)
	pol := topology.DefaultPolicy(kindPorts, gateways)
	if o.StoreGroup {
		pol = topology.WithStorePolicy(pol, kindPorts.Valkey, gateways)
	}
	if o.Policy != nil {
		pol = *o.Policy
	}
	if err := pol.Validate(); err != nil {
		return k8s.Input{}, err
	}
	in := k8s.Input{
		RunID:          o.RunID,
		Namespace:      o.Namespace,
		QuotaqualImage: o.QuotaqualImage,
		ValkeyImage:    o.ValkeyImage,
		PullPolicy:     o.PullPolicy,
		Ports: k8s.Ports{GatewayData: kindPorts.GatewayData, GatewayAdmin: kindPorts.GatewayAdmin,
			ProviderData: kindPorts.ProviderData, ProviderAdmin: kindPorts.ProviderAdmin, Valkey: kindPorts.Valkey},
		ValkeyHost:         topology.HostValkey,
		ClientHost:         topology.HostClient,
		Observer:           topology.HostObserver,
		ValkeyPassword:     d.ValkeyPassword,
		Placeholders:       o.Placeholders,
		ValkeyStorageClass: o.StorageClass,
	}
	if in.QuotaqualImage == "" {
		in.QuotaqualImage = images.QuotaqualImageRepo + ":dev"
	}
	if in.ValkeyImage == "" {
		in.ValkeyImage = images.DefaultValkeyImage
	}
	if o.EmptyDir {
		in.ValkeyStorage = k8s.StorageEmptyDir
	}
	in = in.Defaulted()
	if o.StoreGroup {
		in.Store = &k8s.StoreGroup{Nodes: topology.StoreNodes, Sentinels: topology.StoreSentinels, MasterName: topology.StoreMasterName, SentinelPort: topology.SentinelPort,
			Monitor: valkeyproc.SentinelConfig(valkeyproc.ReplicatedOptions{MasterName: topology.StoreMasterName, Quorum: 2,
				DownAfter: kindStoreDown, FailoverTimeout: kindStoreFailover}, in.ServiceHost(topology.HostStore1), kindPorts.Valkey, "")}
	}
	spec := topology.Spec{RunID: o.RunID, Deployment: d, Gateway: o.Gateway, GatewayImage: o.GatewayImage}
	in.GatewayEnv = topology.GatewaySecretEnv(spec, in.ServiceAddr(topology.HostValkey, kindPorts.Valkey))
	for _, h := range topology.Providers {
		in.Providers = append(in.Providers, k8s.Provider{Host: h, Site: topology.SiteOf(h),
			Args: d.ProviderArgs(topology.SiteOf(h), ":"+strconv.Itoa(kindPorts.ProviderData), ":"+strconv.Itoa(kindPorts.ProviderAdmin))})
	}
	for _, g := range gateways {
		kg, err := gatewayManifest(spec, g, gatewayAddresses(in), d.Profile)
		if err != nil {
			return k8s.Input{}, err
		}
		in.Gateways = append(in.Gateways, kg)
	}
	for _, r := range pol.Rules {
		in.Rules = append(in.Rules, k8s.Rule{Name: r.Name, Host: r.Host, Port: r.Port, From: r.From})
	}
	return in, nil
}

// gatewayAddresses are where a gateway of in listens and what it reaches: Valkey and the
// providers by their Services.
func gatewayAddresses(in k8s.Input) deployment.Addresses {
	a := deployment.Addresses{
		DataListen:  ":" + strconv.Itoa(kindPorts.GatewayData),
		AdminListen: ":" + strconv.Itoa(kindPorts.GatewayAdmin),
		ValkeyAddr:  in.ServiceAddr(topology.HostValkey, kindPorts.Valkey),
	}
	for _, h := range topology.Providers {
		a.Providers = append(a.Providers, deployment.ProviderAddr{Site: topology.SiteOf(h), URL: "http://" + in.ServiceAddr(h, kindPorts.ProviderData)})
	}
	return a
}

// gatewayManifest is gateway host as its profile launches it on the rule policy of prof, for
// the renderer: the config (its ConfigMap key the profile's file name, mounted where the
// profile's argv finds it), the image, command and probes, and the profile's own variables,
// copies of the run's secret variables kept as references to the Secret.
func gatewayManifest(spec topology.Spec, host string, a deployment.Addresses, prof deployment.Profile) (k8s.Gateway, error) {
	cg, err := topology.ContainerGatewayFor(spec, host, a, prof)
	if err != nil {
		return k8s.Gateway{}, err
	}
	if dir := path.Dir(cg.ConfigPath); dir != k8s.GatewayConfigDir {
		return k8s.Gateway{}, fmt.Errorf("gateway %s: its config is at %s, but the ConfigMap is mounted in %s", host, cg.ConfigPath, k8s.GatewayConfigDir)
	}
	kg := k8s.Gateway{Host: host, Config: cg.Config, ConfigFile: path.Base(cg.ConfigPath), Image: cg.Image,
		Command: cg.Entrypoint, Args: cg.Cmd}
	for _, ev := range cg.Env {
		if name, ok := ev.CopiesOnly(); ok {
			kg.Env = append(kg.Env, k8s.EnvVar{Name: ev.Name, SecretKey: name})
			continue
		}
		// Text with copies embedded: Kubernetes expands $(NAME) from the variables defined
		// before it, the Secret's among them; a literal "$(" is written "$$(".
		var b strings.Builder
		for _, p := range ev.Parts {
			if p.Copy != "" {
				b.WriteString("$(" + p.Copy + ")")
			} else {
				b.WriteString(strings.ReplaceAll(p.Text, "$(", "$$("))
			}
		}
		kg.Env = append(kg.Env, k8s.EnvVar{Name: ev.Name, Value: b.String()})
	}
	gw := cg.Profile
	kg.Ready = k8s.Probe{Port: gw.Readiness.Listener, Path: gw.Readiness.Path}
	if gw.Liveness.Path != "" {
		kg.Live = &k8s.Probe{Port: gw.Liveness.Listener, Path: gw.Liveness.Path}
	}
	return kg, nil
}

// Render renders the kind topology's manifests for deployment d.
func Render(d *deployment.Deployment, o ManifestOptions) ([]runtime.Object, error) {
	in, err := Input(d, o)
	if err != nil {
		return nil, err
	}
	return k8s.Render(in)
}

// RenderYAML renders the manifests as one multi-document YAML stream.
func RenderYAML(d *deployment.Deployment, o ManifestOptions) ([]byte, error) {
	objs, err := Render(d, o)
	if err != nil {
		return nil, err
	}
	y, err := k8s.YAML(objs)
	if err != nil {
		return nil, fmt.Errorf("rendering the kind manifests as YAML: %w", err)
	}
	return y, nil
}

// PartitionedPolicy is p without the allowances between each pair of hosts (both
// directions): what the kind engine renders while those pairs are partitioned.
func PartitionedPolicy(p topology.Policy, pairs [][2]string) topology.Policy {
	cuts := map[[2]string]bool{}
	for _, pr := range pairs {
		cuts[topology.PairKey(pr[0], pr[1])] = true
	}
	return partitionedPolicy(p, cuts)
}
