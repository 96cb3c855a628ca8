package kindengine

// Applying the rendered manifests and waiting for their rollouts: pods, readiness and what
// is wrong with a pod that does not become ready.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
)

// render builds the input with the run's real secrets and keeps the gateway configs next to
// the logs, as the other engines do.
func (t *kindTopo) render() error {
	pull := corev1.PullIfNotPresent
	if t.provider != nil {
		pull = corev1.PullNever // loaded into the nodes: never try a registry
	}
	in, err := Input(t.spec.Deployment, ManifestOptions{
		RunID: t.spec.RunID, Namespace: t.ns, QuotaqualImage: t.qqImg, ValkeyImage: t.valkeyImg,
		PullPolicy: pull, StorageClass: t.opts.StorageClass, EmptyDir: t.opts.EmptyDir,
		Gateway: t.spec.Gateway, GatewayImage: t.spec.GatewayImage,
		Gateways: t.spec.Gateways,
	})
	if err != nil {
		return err
	}
	for _, g := range in.Gateways {
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", g.Host+filepath.Ext(g.ConfigFile)), g.Config, 0o600)
	}
	t.mu.Lock()
	t.in = in
	t.mu.Unlock()
	return nil
}

// apply creates every object in order. The namespace must not exist yet: it is this run's.
func (t *kindTopo) apply(ctx context.Context) error {
	objs, err := k8s.Render(t.in)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := t.create(ctx, o); err != nil {
			return err
		}
		if _, ok := o.(*corev1.Namespace); ok {
			t.mu.Lock()
			t.nsCreated = true
			t.mu.Unlock()
		}
	}
	return nil
}

func (t *kindTopo) create(ctx context.Context, o runtime.Object) error {
	var err error
	var what string
	switch x := o.(type) {
	case *corev1.Namespace:
		what, err = "namespace "+x.Name, createWith(ctx, t.cs.CoreV1().Namespaces(), x)
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s already exists: another run with id %s, or its leftovers (delete that namespace, or pick another run id)", x.Name, t.spec.RunID)
		}
	case *corev1.Secret:
		what, err = "secret "+x.Name, createWith(ctx, t.cs.CoreV1().Secrets(t.ns), x)
	case *corev1.ConfigMap:
		what, err = "configmap "+x.Name, createWith(ctx, t.cs.CoreV1().ConfigMaps(t.ns), x)
	case *corev1.PersistentVolumeClaim:
		what, err = "persistentvolumeclaim "+x.Name, createWith(ctx, t.cs.CoreV1().PersistentVolumeClaims(t.ns), x)
	case *corev1.Service:
		what, err = "service "+x.Name, createWith(ctx, t.cs.CoreV1().Services(t.ns), x)
	case *networkingv1.NetworkPolicy:
		what, err = "networkpolicy "+x.Name, createWith(ctx, t.cs.NetworkingV1().NetworkPolicies(t.ns), x)
	case *appsv1.Deployment:
		what, err = "deployment "+x.Name, createWith(ctx, t.cs.AppsV1().Deployments(t.ns), x)
	default:
		return fmt.Errorf("applying %T: not an object the kind engine renders", o)
	}
	if err != nil {
		return fmt.Errorf("creating %s in %s: %w", what, t.ns, err)
	}
	return nil
}

// creator is what every typed client-go client of one kind offers: the switch above picks the
// client, createWith makes the one call they share.
type creator[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

func createWith[T any](ctx context.Context, c creator[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// waitRollouts waits until every Deployment in the namespace is rolled out.
func (t *kindTopo) waitRollouts(ctx context.Context, within time.Duration) error {
	names := append(append(append([]string{topology.HostValkey}, topology.Providers...), t.Gateways()...), topology.HostClient, topology.HostObserver)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.waitRollout(ctx, n, within)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitRollout waits until deployment name has its desired replicas updated, available and
// ready, no old replica left, and (for 1 replica) exactly one ready pod not being deleted.
func (t *kindTopo) waitRollout(ctx context.Context, name string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		d, err := t.cs.AppsV1().Deployments(t.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			s := d.Status
			last = fmt.Sprintf("%d/%d updated, %d available, %d ready, %d total", s.UpdatedReplicas, want, s.AvailableReplicas, s.ReadyReplicas, s.Replicas)
			if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
				s.AvailableReplicas == want && s.ReadyReplicas == want {
				pods, err := t.pods(ctx, name)
				if err == nil && countReady(pods) == int(want) && countLive(pods) == int(want) {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s not rolled out within %s (%s)%s", name, within, last, t.podTrouble(context.WithoutCancel(ctx), name))
		case <-time.After(kindPoll):
		}
	}
}

// podTrouble says why host's pods are not ready: waiting reasons, unschedulable conditions.
func (t *kindTopo) podTrouble(ctx context.Context, host string) string {
	pods, err := t.pods(ctx, host)
	if err != nil || len(pods) == 0 {
		return ": no pod exists"
	}
	var out []string
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				out = append(out, fmt.Sprintf("%s %s: %s", p.Name, c.Type, c.Message))
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				out = append(out, fmt.Sprintf("%s waiting: %s %s", p.Name, w.Reason, w.Message))
			}
			if tm := cs.LastTerminationState.Terminated; tm != nil {
				out = append(out, fmt.Sprintf("%s last exit %d: %s", p.Name, tm.ExitCode, tm.Reason))
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, "; ")
}

func (t *kindTopo) pods(ctx context.Context, host string) ([]corev1.Pod, error) {
	l, err := t.cs.CoreV1().Pods(t.ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelHost + "=" + host})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func countReady(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if podReady(&pods[i]) {
			n++
		}
	}
	return n
}

func countLive(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// readyPod returns the newest ready pod of host (client and observer: of that role).
func (t *kindTopo) readyPod(ctx context.Context, host string) (*corev1.Pod, error) {
	if t.cs == nil {
		return nil, errors.New("the kind topology is not up: bring it up first")
	}
	pods, err := t.pods(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s: %w", host, err)
	}
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if podReady(p) && (best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time)) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no ready pod of %s in %s", host, t.ns)
	}
	return best, nil
}
