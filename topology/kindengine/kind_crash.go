package kindengine

// The crash lever: SIGKILL of a gateway's container through its node's containerd (ctr task
// kill), and the wait for the kubelet to restart it in the same pod.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"

	"github.com/quotaqual/quotaqual/topology"
)

// CrashGateway SIGKILLs the gateway's container through its kind node's containerd (`ctr -n
// k8s.io task kill -s SIGKILL`), and the kubelet starts it again in the same pod (restartPolicy
// Always), as after a real crash. Deleting the pod would not do: the kubelet sends SIGTERM
// first and waits at least its minimum grace, and the gateway's SIGTERM handler drains its
// in-flight requests — a shutdown, not a crash. The pod (its network namespace, where the
// port-forwards enter) stays, so no log is saved here: the pod's log keeps its previous
// container's. The kill is checked: the old container must have exited 137 (SIGKILL).
func (t *kindTopo) CrashGateway(ctx context.Context, name string) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	if t.provider == nil {
		return fmt.Errorf("crashing %s: %w: the crash lever kills the container through its kind node's containerd (docker exec), and %s is not a kind cluster on this docker host: run on a kind cluster (the engine's own, or a kind-<name> context)",
			name, topology.ErrUnsupported, t.clusterNm)
	}
	start := time.Now()
	pod, err := t.readyPod(ctx, name)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	before, err := gatewayContainer(pod)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	id, ok := strings.CutPrefix(before.ContainerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("crashing %s: pod %s runs container %q, not a containerd one: the crash lever needs kind's containerd runtime", name, pod.Name, before.ContainerID)
	}
	node, err := t.kindNode(pod.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	kctx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	out, err := kindexec.CombinedOutputLines(node.CommandContext(kctx, "ctr", "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", id))
	cancel()
	if err != nil {
		return fmt.Errorf("crashing %s: `ctr -n k8s.io task kill -s SIGKILL %s` in kind node %s: %w: %s (the node image must ship ctr, as kind's and hack/kind-node-image's do)",
			name, id, node.String(), err, strings.Join(out, "; "))
	}
	after, err := t.waitContainerRestarted(ctx, name, pod.Name, before, kindLeverTimeout)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	if term := after.LastTerminationState.Terminated; term == nil || term.ExitCode != 137 {
		return fmt.Errorf("crashing %s: container %s of pod %s ended %s, not by SIGKILL (exit 137): the kill did not crash it", name, id, pod.Name, describeTermination(term))
	}
	t.client.CloseIdleConnections()
	t.observer.CloseIdleConnections()
	if err := t.waitHTTP(ctx, t.gatewayReadyURL(name), kindLeverTimeout); err != nil {
		return fmt.Errorf("crashing %s: after the restart: %w", name, err)
	}
	crash := fmt.Sprintf("%s: pod %s container %.12s SIGKILLed in node %s: exit %d (%s), restart count %d → %d, serving again %s after the kill began",
		name, pod.Name, id, node.String(), after.LastTerminationState.Terminated.ExitCode, after.LastTerminationState.Terminated.Reason,
		before.RestartCount, after.RestartCount, topology.ElapsedSince(start))
	// Into the gateway's log (ahead of its pods' own), as the evidence of how it ended: the
	// topology facts are taken before the scenarios run.
	t.mu.Lock()
	if t.logs[name] == nil {
		t.logs[name] = &bytes.Buffer{}
	}
	fmt.Fprintf(t.logs[name], "=== crash lever: %s ===\n", crash)
	t.mu.Unlock()
	t.spec.Progress("kind: %s", crash)
	return nil
}

// gatewayContainer is the status of pod's (first and only) container.
func gatewayContainer(pod *corev1.Pod) (corev1.ContainerStatus, error) {
	if len(pod.Spec.Containers) == 0 {
		return corev1.ContainerStatus{}, fmt.Errorf("pod %s has no container", pod.Name)
	}
	want := pod.Spec.Containers[0].Name
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == want {
			return cs, nil
		}
	}
	return corev1.ContainerStatus{}, fmt.Errorf("pod %s reports no status for its container %s yet", pod.Name, want)
}

// kindNode is the node of the run's kind cluster named name (a kind node's Kubernetes name is
// its docker container's).
func (t *kindTopo) kindNode(name string) (nodes.Node, error) {
	all, err := t.provider.ListNodes(t.clusterNm)
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of kind cluster %s: %w", t.clusterNm, err)
	}
	var names []string
	for _, n := range all {
		if n.String() == name {
			return n, nil
		}
		names = append(names, n.String())
	}
	return nil, fmt.Errorf("node %s is not a node of kind cluster %s (its nodes: %s)", name, t.clusterNm, strings.Join(names, ", "))
}

// waitContainerRestarted waits until pod podName's container has restarted (a new container
// ID, a higher restart count) and the pod is ready again, and returns the container's status.
func (t *kindTopo) waitContainerRestarted(ctx context.Context, host, podName string, before corev1.ContainerStatus, within time.Duration) (corev1.ContainerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	last := "not read yet"
	for {
		p, err := t.cs.CoreV1().Pods(t.ns).Get(ctx, podName, metav1.GetOptions{})
		if err == nil {
			cs, cerr := gatewayContainer(p)
			switch {
			case cerr != nil:
				last = cerr.Error()
			case cs.RestartCount > before.RestartCount && cs.ContainerID != before.ContainerID && podReady(p):
				return cs, nil
			default:
				last = fmt.Sprintf("restart count %d (was %d), ready %v", cs.RestartCount, before.RestartCount, podReady(p))
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return corev1.ContainerStatus{}, fmt.Errorf("pod %s's container was not restarted and ready within %s after the SIGKILL (%s)%s", podName, within, last, t.podTrouble(context.WithoutCancel(ctx), host))
		case <-time.After(kindPoll):
		}
	}
}

func describeTermination(term *corev1.ContainerStateTerminated) string {
	if term == nil {
		return "with no termination recorded"
	}
	return fmt.Sprintf("with exit %d (%s, signal %d)", term.ExitCode, term.Reason, term.Signal)
}
