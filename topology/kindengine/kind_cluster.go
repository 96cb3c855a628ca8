package kindengine

// The kind cluster itself: the run's own (created from a node image, the images loaded into
// it) or an existing one reached by kubeconfig, and the client-go connection to it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindlog "sigs.k8s.io/kind/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
)

// images resolves (and builds when missing) the two images, as the docker engine does.
func (t *kindTopo) images(ctx context.Context) (err error) {
	t.valkeyImg, t.qqImg, err = images.Resolve(ctx, t.spec.ValkeyImage, t.spec.QuotaqualImage, t.spec.Binary)
	return err
}

// kindClusterConfig is the cluster's kind config: one control-plane node, kind's default CNI
// (kindnet, which enforces NetworkPolicy since kind v0.24).
func kindClusterConfig(name string) ([]byte, error) {
	cfg := kindv1alpha4.Cluster{
		TypeMeta: kindv1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     name,
		Nodes:    []kindv1alpha4.Node{{Role: kindv1alpha4.ControlPlaneRole}},
	}
	return yaml.Marshal(cfg)
}

func (t *kindTopo) createCluster(ctx context.Context) error {
	raw, err := kindClusterConfig(t.opts.ClusterName)
	if err != nil {
		return err
	}
	t.provider = cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindlog.NoopLogger{}))
	t.kubecfg = filepath.Join(t.spec.WorkDir, "kubeconfig") // never the user's ~/.kube/config
	t.mu.Lock()
	t.clusterNm, t.owns = t.opts.ClusterName, true
	t.mu.Unlock()
	if err := t.ensurePrivilegedNodes(ctx); err != nil {
		return err
	}
	t.spec.Progress("kind: creating cluster %s (node image %s)", t.clusterNm, t.nodeImage)
	create := time.Now()
	err = t.provider.Create(t.clusterNm,
		cluster.CreateWithRawConfig(raw),
		cluster.CreateWithNodeImage(t.nodeImage),
		cluster.CreateWithWaitForReady(kindCreateWait),
		cluster.CreateWithKubeconfigPath(t.kubecfg),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	)
	if err != nil {
		return fmt.Errorf("creating kind cluster %s: %w", t.clusterNm, err)
	}
	t.spec.Progress("kind: cluster %s created in %s", t.clusterNm, topology.ElapsedSince(create))
	if err := t.loadImages(ctx); err != nil {
		return err
	}
	kc, err := t.provider.KubeConfig(t.clusterNm, false)
	if err != nil {
		return fmt.Errorf("kubeconfig of kind cluster %s: %w", t.clusterNm, err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		return fmt.Errorf("kubeconfig of kind cluster %s: %w", t.clusterNm, err)
	}
	return t.connect(ctx, rc)
}

func (t *kindTopo) connectExisting(ctx context.Context) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if t.opts.Kubeconfig != "" {
		rules.ExplicitPath = t.opts.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: t.opts.Context})
	raw, err := cc.RawConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ctxName := t.opts.Context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig context %q: %w", ctxName, err)
	}
	// A kind cluster's context is kind-<name>: load the images into its nodes.
	if name, ok := strings.CutPrefix(ctxName, "kind-"); ok {
		p := cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindlog.NoopLogger{}))
		if names, err := p.List(); err == nil && slices.Contains(names, name) {
			t.provider = p
			t.mu.Lock()
			t.clusterNm = name
			t.mu.Unlock()
			if err := t.loadImages(ctx); err != nil {
				return err
			}
		}
	}
	if t.clusterNm == "" {
		t.clusterNm = "context " + ctxName
	}
	return t.connect(ctx, rc)
}

func (t *kindTopo) connect(ctx context.Context, rc *rest.Config) error {
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("Kubernetes client: %w", err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("the Kubernetes API server did not answer: %w", err)
	}
	t.mu.Lock()
	t.rest, t.cs, t.serverVer = rc, cs, v.GitVersion
	t.mu.Unlock()
	return nil
}

// loadImages loads the images (and the gateway's own, when its profile names one) into every node of the kind cluster (docker save, then
// nodeutils.LoadImageArchive per node: kind v0.33 has no LoadImage API).
func (t *kindTopo) loadImages(ctx context.Context) error {
	start := time.Now()
	nodes, err := t.provider.ListInternalNodes(t.clusterNm)
	if err != nil {
		return fmt.Errorf("listing the nodes of kind cluster %s: %w", t.clusterNm, err)
	}
	f, err := os.CreateTemp("", "quotaqual-images-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	f.Close()
	imgs := []string{t.qqImg, t.valkeyImg}
	if gi := topology.GatewayImage(t.spec); gi != "" {
		imgs = append(imgs, gi) // the gateway's own image (CheckGatewayImage found it locally)
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"save", "-o", f.Name()}, imgs...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker save %s: %w: %s", strings.Join(imgs, " "), err, strings.TrimSpace(string(out)))
	}
	for _, n := range nodes {
		r, err := os.Open(f.Name())
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("loading the images into kind node %s: %w", n.String(), err)
		}
	}
	t.spec.Progress("kind: loaded %s into %d node(s) in %s", strings.Join(imgs, ", "), len(nodes), topology.ElapsedSince(start))
	return nil
}
