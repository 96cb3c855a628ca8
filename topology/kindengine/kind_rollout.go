package kindengine

// Gateway restarts (rollouts, also onto another rule policy) and Valkey stop/start (scale to
// zero and back).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
)

// gatewayReadyURL is gateway name's readiness URL, as its profile says.
func (t *kindTopo) gatewayReadyURL(name string) string {
	gw := t.Gateway(name)
	return topology.GatewayProfile(t.spec).ReadyURL(gw.DataURL, gw.AdminURL)
}

// RestartGateway is a rollout restart: a new pod with the same config, ready, the old one gone
// from the endpoints.
func (t *kindTopo) RestartGateway(ctx context.Context, name string) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	return t.rollout(ctx, name, nil)
}

// rollout restarts gateway name's pods with the pod template's annotations set to annotations
// plus a new restartedAt (one revision), and waits until the new pod is ready and the old one
// is no longer serving.
func (t *kindTopo) rollout(ctx context.Context, name string, annotations map[string]string) error {
	t.saveLogs(ctx, name)
	ann := map[string]string{k8s.AnnotationRestartedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	maps.Copy(ann, annotations)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": ann}}}})
	if err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if _, err := t.cs.AppsV1().Deployments(t.ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := t.waitRollout(ctx, name, kindLeverTimeout); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	t.client.CloseIdleConnections()
	t.observer.CloseIdleConnections()
	if err := t.waitHTTP(ctx, t.gatewayReadyURL(name), kindLeverTimeout); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

// RestartGatewayWithPolicy restarts a gateway on the rule policy of p (nil: the run's own
// profile), one step of a rolling change of the quota policy: the gateway's ConfigMap gets the
// config rendered for p, then a rollout restart (RestartGateway) starts a pod that mounts it.
// The config's digest is an annotation of the pod template, so the Deployment's revision names
// the config it runs. The rendered config is kept beside the original as evidence.
func (t *kindTopo) RestartGatewayWithPolicy(ctx context.Context, name string, p *deployment.Profile) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	prof := t.spec.PolicyProfile(p)
	t.mu.Lock()
	in := t.in
	t.mu.Unlock()
	kg, err := gatewayManifest(t.spec, name, gatewayAddresses(in), prof)
	if err != nil {
		return fmt.Errorf("rendering %s's config for policy %s: %w", name, prof.Name, err)
	}
	if p != nil {
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", name+"-policy"+filepath.Ext(kg.ConfigFile)), kg.Config, 0o600)
	}
	cm, err := t.cs.CoreV1().ConfigMaps(t.ns).Get(ctx, name+"-config", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("restarting %s on another policy: reading its ConfigMap: %w", name, err)
	}
	cm.Data = map[string]string{kg.ConfigFile: string(kg.Config)}
	if _, err := t.cs.CoreV1().ConfigMaps(t.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("restarting %s on another policy: updating its ConfigMap: %w", name, err)
	}
	sum := sha256.Sum256(kg.Config)
	return t.rollout(ctx, name, map[string]string{annotationConfigDigest: hex.EncodeToString(sum[:8])})
}

// annotationConfigDigest, on a gateway's pod template, is the digest of the config its pods
// mount (set by RestartGatewayWithPolicy).
const annotationConfigDigest = "quotaqual.dev/config-digest"

func (t *kindTopo) scaleValkey(ctx context.Context, n int) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := t.cs.AppsV1().Deployments(t.ns).Patch(ctx, topology.HostValkey, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// StopValkey scales Valkey to 0 and waits until its pod is gone.
func (t *kindTopo) StopValkey(ctx context.Context) error {
	if t.cs == nil {
		return errors.New("valkey is not running: bring the topology up first")
	}
	t.saveLogs(ctx, topology.HostValkey)
	if err := t.scaleValkey(ctx, 0); err != nil {
		return fmt.Errorf("stopping valkey (scale to 0): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, kindLeverTimeout)
	defer cancel()
	for {
		pods, err := t.pods(ctx, topology.HostValkey)
		if err == nil && len(pods) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopping valkey: its pod was not gone within %s", kindLeverTimeout)
		case <-time.After(kindPoll):
		}
	}
}

// StartValkey scales Valkey to 1 and waits until it is ready (its AOF on the PVC reloaded).
func (t *kindTopo) StartValkey(ctx context.Context) error {
	if t.cs == nil {
		return errors.New("valkey was never started: bring the topology up first")
	}
	if err := t.scaleValkey(ctx, 1); err != nil {
		return fmt.Errorf("starting valkey (scale to 1): %w", err)
	}
	if err := t.waitRollout(ctx, topology.HostValkey, kindLeverTimeout); err != nil {
		return fmt.Errorf("starting valkey: %w", err)
	}
	return nil
}
