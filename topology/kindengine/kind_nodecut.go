package kindengine

// Partitions through the kind nodes. A NetworkPolicy can only allow, works only where the CNI
// enforces it, and governs new connections; a partition the qualification trusts must also
// cut the connections already open (valkey-partition's "live connections included"). On a
// kind cluster on this docker host the engine reaches the nodes, so it cuts a pair the way the
// netns engine does: an nftables table in the partitioned pod's network namespace (entered
// with nsenter from its kind node, through the PID containerd reports for its container) drops
// every packet to and from the peer — its pods' addresses and its Service's cluster IP, which
// is what the pod sees before the node's kube-proxy translates it.

import (
	"context"
	"fmt"
	"net"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"
)

// kindNodeCutReason is the partition lever's description when the nodes are reachable.
const kindNodeCutReason = "kind partitions drop the pair's packets (the peer's pod addresses and Service IP) in the partitioned pod's network namespace, " +
	"set from its kind node (nsenter, nft), live connections included, and are trusted only after a probe is denied"

// nodeCuts reports whether partitions are cut through the nodes: on a kind cluster on this
// docker host.
func (t *kindTopo) nodeCuts() bool { return t.provider != nil }

// nodeCut installs (on) or removes the table that cuts host off from peer in the network
// namespace of every running pod of host. Valkey's pods run no quotaqual binary but have a
// network namespace like any other, so either side may be cut.
func (t *kindTopo) nodeCut(ctx context.Context, host, peer string, on bool) error {
	pods, err := t.pods(ctx, host)
	if err != nil {
		return fmt.Errorf("listing %s's pods: %w", host, err)
	}
	var v4, v6 []string
	if on {
		if v4, v6, err = t.peerAddrs(ctx, peer); err != nil {
			return err
		}
	}
	table := "quotaqual_cut_" + strings.ReplaceAll(peer, "-", "_")
	cut := 0
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || len(pod.Status.ContainerStatuses) == 0 {
			continue
		}
		id, ok := strings.CutPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
		if !ok || id == "" {
			continue // not started yet: nothing to enter
		}
		node, err := t.kindNode(pod.Spec.NodeName)
		if err != nil {
			return err
		}
		pid, err := containerPID(ctx, node, id)
		if err != nil {
			return fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		if err := nsenterNft(ctx, node, pid, cutRules(table, v4, v6, on)); err != nil {
			return fmt.Errorf("pod %s (pid %d on node %s): %w", pod.Name, pid, node.String(), err)
		}
		cut++
	}
	if cut == 0 {
		return fmt.Errorf("%s has no running pod to cut off from %s", host, peer)
	}
	return nil
}

// peerAddrs are peer's pod addresses and its Service's cluster IPs, by family.
func (t *kindTopo) peerAddrs(ctx context.Context, peer string) (v4, v6 []string, err error) {
	add := func(s string) {
		ip := net.ParseIP(s)
		switch {
		case ip == nil:
		case ip.To4() != nil:
			v4 = append(v4, ip.String())
		default:
			v6 = append(v6, ip.String())
		}
	}
	pods, err := t.pods(ctx, peer)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s's pods: %w", peer, err)
	}
	for _, p := range pods {
		for _, a := range p.Status.PodIPs {
			add(a.IP)
		}
	}
	svc, err := t.cs.CoreV1().Services(t.ns).Get(ctx, peer, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s's Service: %w", peer, err)
	}
	for _, ip := range svc.Spec.ClusterIPs {
		add(ip)
	}
	if len(v4)+len(v6) == 0 {
		return nil, nil, fmt.Errorf("%s has no pod address and no cluster IP to cut off", peer)
	}
	return v4, v6, nil
}

// cutRules is the nft script that installs (on) or removes table: dropping every packet to
// and from the addresses, ahead of connection tracking, in both directions.
func cutRules(table string, v4, v6 []string, on bool) string {
	var b strings.Builder
	// add-then-delete makes the removal idempotent (nft has no "delete if present").
	fmt.Fprintf(&b, "add table inet %s\ndelete table inet %s\n", table, table)
	if !on {
		return b.String()
	}
	fmt.Fprintf(&b, "table inet %s {\n", table)
	for _, dir := range []struct{ chain, hook, match string }{{"out", "output", "daddr"}, {"in", "input", "saddr"}} {
		fmt.Fprintf(&b, "  chain %s {\n    type filter hook %s priority -300; policy accept;\n", dir.chain, dir.hook)
		if len(v4) > 0 {
			fmt.Fprintf(&b, "    ip %s { %s } drop\n", dir.match, strings.Join(v4, ", "))
		}
		if len(v6) > 0 {
			fmt.Fprintf(&b, "    ip6 %s { %s } drop\n", dir.match, strings.Join(v6, ", "))
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// containerPID is the PID of container id's task on node, as containerd lists it.
func containerPID(ctx context.Context, node nodes.Node, id string) (int, error) {
	kctx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	defer cancel()
	lines, err := kindexec.OutputLines(node.CommandContext(kctx, "ctr", "-n", "k8s.io", "task", "ls"))
	if err != nil {
		return 0, fmt.Errorf("`ctr -n k8s.io task ls` in kind node %s: %w", node.String(), err)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == id {
			var pid int
			if _, err := fmt.Sscanf(f[1], "%d", &pid); err == nil && pid > 0 {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("container %s has no running task on kind node %s", id, node.String())
}

// nsenterNft runs the nft script in the network namespace of pid on node.
func nsenterNft(ctx context.Context, node nodes.Node, pid int, script string) error {
	kctx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	defer cancel()
	cmd := node.CommandContext(kctx, "nsenter", "-t", fmt.Sprint(pid), "-n", "nft", "-f", "-")
	cmd.SetStdin(strings.NewReader(script))
	if out, err := kindexec.CombinedOutputLines(cmd); err != nil {
		return fmt.Errorf("nsenter -t %d -n nft -f -: %w: %s (the node image must ship nsenter and nft, as kind's and hack/kind-node-image's do)",
			pid, err, strings.Join(out, "; "))
	}
	return nil
}
