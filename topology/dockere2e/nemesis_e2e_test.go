package dockere2e_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

// TestDockerNemesisLevers: pause (docker pause), store stall and memory pressure (admin commands
// from Valkey's own namespace) and loss (nftables in the containers' namespaces, loaded from
// the host) on the docker engine, each healed by its Undo, with no loss table left behind.
func TestDockerNemesisLevers(t *testing.T) {
	topo, d := upForLevers(t)
	if ok, why := topology.Loss.Available(topo); !ok {
		t.Fatalf("loss on docker: %s", why)
	}
	enginetest.CheckNemesisLevers(t, topo, d)
	for _, h := range []string{topology.HostGatewayA, topology.HostValkey} {
		if out := tablesLeft(topo, h, "qqloss"); out != "" {
			t.Errorf("after the loss is healed %s's namespace still has %s", h, out)
		}
	}
}

// TestDockerStoreLinkLevers: the store-latency and store-lost-replies levers on gateway-a's
// store link on the docker engine (enginetest.CheckStoreLinkLevers: the proxy runs in the
// harness with both ends in gateway-a's namespace, entered through /proc/<pid>/ns/net; a
// Valkey connection dialled from there goes through the same redirect as the gateway's),
// and no proxy table left in gateway-a's namespace after each Undo.
func TestDockerStoreLinkLevers(t *testing.T) {
	topo, d := upForLevers(t)
	dial := func(ctx context.Context, host string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return dockerengine.DialStore(ctx, topo, host)
	}
	left := func() string { return tablesLeft(topo, topology.HostGatewayA, "qqproxy") }
	enginetest.CheckStoreLinkLevers(t, topo, d, dial, left)
}

// upForLevers brings up a default docker topology for a lever test.
func upForLevers(t *testing.T) (topology.Topology, *deployment.Deployment) {
	t.Helper()
	requireDocker(t)
	img := ensureImages(t)
	topo, d, _ := newTopo(t, img)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	return topo, d
}

// tablesLeft is "" when host's namespace has no nftables table named with prefix, or says
// what it has (or why nft could not tell).
func tablesLeft(topo topology.Topology, host, prefix string) string {
	out, err := dockerengine.NFTTables(context.Background(), topo, host)
	if err != nil {
		return err.Error()
	}
	if strings.Contains(out, prefix) {
		return "a " + prefix + " table:\n" + out
	}
	return ""
}
