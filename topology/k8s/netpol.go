package k8s

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Pod is what NetworkPolicy evaluation needs of a pod.
type Pod struct {
	Name      string // for messages: the Deployment's name
	Namespace string
	Labels    map[string]string
	Ports     []corev1.ContainerPort // to resolve named ports
}

// Cluster is the part of a cluster NetworkPolicy evaluation looks at.
type Cluster struct {
	Policies  []networkingv1.NetworkPolicy
	Namespace map[string]map[string]string // namespace → its labels
}

// Evaluate is an offline model of Kubernetes NetworkPolicy ingress semantics:
//   - a pod is isolated for ingress when any policy in its namespace selects it (podSelector)
//     and that policy's policyTypes include Ingress (or, with no policyTypes, always);
//   - a connection from → to:port/TCP is allowed when to is not isolated, or when some
//     policy selecting to has an ingress rule whose ports match (none listed = all; numbers,
//     ranges with endPort, names resolved against to's container ports) and whose from
//     matches (none listed = everyone; a peer's podSelector alone = pods of the policy's
//     namespace; namespaceSelector [+ podSelector] = pods of the selected namespaces);
//   - egress is not modelled (the renderer writes no egress policy), and ipBlock peers are
//     an error rather than a guess;
//   - a pod reaching itself over loopback is not policed.
func (c Cluster) Evaluate(from, to Pod, port int) (bool, error) {
	if from.Namespace == to.Namespace && from.Name == to.Name {
		return true, nil
	}
	isolated := false
	for i := range c.Policies {
		np := &c.Policies[i]
		if np.Namespace != to.Namespace || !hasIngress(np) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			return false, fmt.Errorf("policy %s: %w", np.Name, err)
		}
		if !sel.Matches(labels.Set(to.Labels)) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			pok, err := portMatches(rule.Ports, to, port)
			if err != nil {
				return false, fmt.Errorf("policy %s: %w", np.Name, err)
			}
			if !pok {
				continue
			}
			fok, err := c.peerMatches(np, rule.From, from)
			if err != nil {
				return false, fmt.Errorf("policy %s: %w", np.Name, err)
			}
			if fok {
				return true, nil
			}
		}
	}
	return !isolated, nil
}

func hasIngress(np *networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return true // ingress is implied; egress only when egress rules exist
	}
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, to Pod, port int) (bool, error) {
	if len(ports) == 0 {
		return true, nil
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true, nil
		}
		switch p.Port.Type {
		case intstr.Int:
			lo, hi := int(p.Port.IntVal), int(p.Port.IntVal)
			if p.EndPort != nil {
				hi = int(*p.EndPort)
			}
			if port >= lo && port <= hi {
				return true, nil
			}
		case intstr.String:
			if p.EndPort != nil {
				return false, errors.New("endPort with a named port is invalid")
			}
			for _, cp := range to.Ports {
				proto := cp.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && proto == corev1.ProtocolTCP && int(cp.ContainerPort) == port {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

func (c Cluster) peerMatches(np *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, from Pod) (bool, error) {
	if len(peers) == 0 {
		return true, nil
	}
	for _, peer := range peers {
		if peer.IPBlock != nil {
			return false, errors.New("ipBlock peers are not evaluated offline")
		}
		if peer.NamespaceSelector == nil {
			if from.Namespace != np.Namespace {
				continue
			}
		} else {
			nsSel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
			if err != nil {
				return false, err
			}
			if !nsSel.Matches(labels.Set(c.Namespace[from.Namespace])) {
				continue
			}
		}
		if peer.PodSelector == nil {
			return true, nil
		}
		podSel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			return false, err
		}
		if podSel.Matches(labels.Set(from.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// ClusterOf collects the NetworkPolicies and Namespaces of rendered objects, and the pods
// their Deployments would run (one per Deployment, named after it), keyed by host label.
func ClusterOf(objs []runtime.Object) (Cluster, map[string]Pod) {
	c := Cluster{Namespace: map[string]map[string]string{}}
	pods := map[string]Pod{}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Namespace:
			c.Namespace[x.Name] = x.Labels
		case *networkingv1.NetworkPolicy:
			c.Policies = append(c.Policies, *x)
		case *appsv1.Deployment:
			var ports []corev1.ContainerPort
			for _, ct := range x.Spec.Template.Spec.Containers {
				ports = append(ports, ct.Ports...)
			}
			host := x.Spec.Template.Labels[LabelHost]
			pods[host] = Pod{Name: x.Name, Namespace: x.Namespace, Labels: x.Spec.Template.Labels, Ports: ports}
		}
	}
	return c, pods
}
