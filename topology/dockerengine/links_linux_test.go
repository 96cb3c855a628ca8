//go:build linux

package dockerengine

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestDockerLinkLeversSayWhyNot: where the harness cannot enter the containers' namespaces
// (here: DOCKER_HOST names another host), loss and the store-link levers are unavailable with
// that reason, and pulling them fails with ErrUnsupported; a Valkey Cluster run has loss on
// every node and no store-link proxy, saying why.
func TestDockerLinkLeversSayWhyNot(t *testing.T) {
	single := &dockerTopo{spec: topology.Spec{Store: topology.StoreSingle}}
	cluster := &dockerTopo{spec: topology.Spec{Store: topology.StoreCluster}}
	if why := cluster.LinkProxyReason(); !strings.Contains(why, "Valkey Cluster") {
		t.Errorf("store-link proxy on a cluster run: %q, want the cluster named", why)
	}
	if got := cluster.members(topology.HostValkey); len(got) != topology.ClusterPrimaries || !slices.Contains(got, clusterHolder(0)) {
		t.Errorf("valkey on a cluster run stands for %v, want every node's holder", got)
	}
	if got := single.members(topology.HostValkey); !slices.Equal(got, []string{topology.HostValkey}) {
		t.Errorf("valkey on a single-store run stands for %v", got)
	}
	if os.Geteuid() == 0 && !topology.Inside() {
		if why := single.nsReason(); why != "" {
			t.Errorf("as root on the host: %q, want no reason", why)
		}
	}

	t.Setenv("DOCKER_HOST", "tcp://elsewhere.example:2376")
	want := "DOCKER_HOST" // the first reason that applies
	switch {
	case topology.Inside():
		want = "namespaces of its own"
	case os.Geteuid() != 0:
		want = "as root"
	}
	for _, l := range append([]topology.Lever{topology.Loss}, topology.LinkLevers()...) {
		ok, why := l.Available(single)
		if ok || !strings.Contains(why, want) {
			t.Errorf("%s with a remote daemon: %v %q, want unavailable saying %q", l.Name(), ok, why, want)
		}
	}
	err := single.SetLoss(context.Background(), topology.HostGatewayA, topology.HostValkey, 50)
	if !errors.Is(err, topology.ErrUnsupported) {
		t.Errorf("SetLoss with a remote daemon: %v, want ErrUnsupported", err)
	}
	_, err = single.ProxyLink(context.Background(), topology.HostGatewayA, topology.HostValkey, nil)
	if !errors.Is(err, topology.ErrUnsupported) {
		t.Errorf("ProxyLink with a remote daemon: %v, want ErrUnsupported", err)
	}
}
