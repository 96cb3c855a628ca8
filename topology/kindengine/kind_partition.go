package kindengine

// Partitions: the a↔b allowances removed from the NetworkPolicies (or, on a cluster whose CNI
// keeps established connections, a cut on the node), trusted only after a probe is denied.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
)

// partitionedPolicy is p without the allowances between the pairs in cuts (both directions).
func partitionedPolicy(p topology.Policy, cuts map[[2]string]bool) topology.Policy {
	var out topology.Policy
	for _, r := range p.Rules {
		r.From = slices.DeleteFunc(slices.Clone(r.From), func(f string) bool {
			return cuts[topology.PairKey(f, r.Host)]
		})
		if len(r.From) > 0 {
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}

func (t *kindTopo) Partition(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, true)
}

func (t *kindTopo) Heal(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, false)
}

func (t *kindTopo) setPartition(ctx context.Context, host, peer string, on bool) error {
	if err := topology.CheckPair(host, peer, t.hosts()); err != nil {
		return err
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	if t.nodeCuts() {
		// Cut (and heal) on the side the partition named first, recorded for the heal.
		t.mu.Lock()
		side, ok := t.nodeCutSide[topology.PairKey(host, peer)]
		if on || !ok {
			side = [2]string{host, peer}
		}
		if on {
			t.nodeCutSide[topology.PairKey(host, peer)] = side
		} else {
			delete(t.nodeCutSide, topology.PairKey(host, peer))
		}
		t.mu.Unlock()
		if err := t.nodeCut(ctx, side[0], side[1], on); err != nil {
			return fmt.Errorf("partition %s/%s: %w", host, peer, err)
		}
	} else {
		t.mu.Lock()
		if on {
			t.cuts[topology.PairKey(host, peer)] = true
		} else {
			delete(t.cuts, topology.PairKey(host, peer))
		}
		pol := partitionedPolicy(t.base, t.cuts)
		in := t.in
		t.mu.Unlock()
		in.Rules = nil
		for _, r := range pol.Rules {
			in.Rules = append(in.Rules, k8s.Rule{Name: r.Name, Host: r.Host, Port: r.Port, From: r.From})
		}
		if err := t.syncPolicies(ctx, in.NetworkPolicies()); err != nil {
			return fmt.Errorf("partition %s/%s: %w", host, peer, err)
		}
	}
	// Trust it only once a probe shows it: from each side that can probe, to each port the
	// base policy allowed it on.
	want := !on
	ctx, cancel := context.WithTimeout(ctx, kindPolicyLiveWait)
	defer cancel()
	for _, pr := range [][2]string{{host, peer}, {peer, host}} {
		from, to := pr[0], pr[1]
		if from == topology.HostValkey {
			continue
		}
		for _, r := range t.base.RulesFor(to) {
			if !slices.Contains(r.From, from) {
				continue
			}
			for {
				res := t.Probe(ctx, from, to, r.Port)
				if res.Supported && res.Reached == want && (want || res.Error != "") {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("partition %s/%s: the probe %s → %s:%d still %s after %s: the NetworkPolicy change is not live",
						host, peer, from, to, r.Port, probeState(res), kindPolicyLiveWait)
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// syncPolicies makes the namespace's allow policies exactly want (default-deny stays).
func (t *kindTopo) syncPolicies(ctx context.Context, want []*networkingv1.NetworkPolicy) error {
	api := t.cs.NetworkingV1().NetworkPolicies(t.ns)
	have, err := api.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelRunID + "=" + t.spec.RunID})
	if err != nil {
		return err
	}
	wanted := map[string]*networkingv1.NetworkPolicy{}
	for _, np := range want {
		wanted[np.Name] = np
	}
	for i := range have.Items {
		cur := &have.Items[i]
		np, ok := wanted[cur.Name]
		if !ok {
			if err := api.Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		np.ResourceVersion = cur.ResourceVersion
		if _, err := api.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			return err
		}
		delete(wanted, cur.Name)
	}
	for _, np := range wanted {
		if _, err := api.Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
