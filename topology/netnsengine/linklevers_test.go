//go:build linux

package netnsengine

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

// TestNetnsStoreLinkLevers: the store-latency and store-lost-replies levers on gateway-a's
// store link, on real processes in real namespaces (enginetest.CheckStoreLinkLevers, with a
// Valkey connection from gateway-a's namespace, through the same redirect the gateway goes
// through), and no proxy table left in its namespace after each Undo.
func TestNetnsStoreLinkLevers(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	topo, _ := enginetest.UpTopology(t, topology.EngineNetns, spec)
	nt := topo.(*netnsTopo)
	dial := func(ctx context.Context, host string) (net.Conn, error) {
		return nt.dialFrom(ctx, host, "tcp", net.JoinHostPort(nt.hostAddr(topology.HostValkey), strconv.Itoa(netnsPorts.Valkey)), 2*time.Second)
	}
	left := func() string {
		out, err := inNS(context.Background(), nt, topology.HostGatewayA, "nft", "list", "tables")
		if err != nil {
			return "nft failed: " + err.Error()
		}
		if strings.Contains(out, "qqproxy") {
			return "a qqproxy table:\n" + out
		}
		return ""
	}
	enginetest.CheckStoreLinkLevers(t, topo, spec.Deployment, dial, left)
}

// inNS runs argv in host's namespace and returns its output.
func inNS(ctx context.Context, nt *netnsTopo, host string, argv ...string) (string, error) {
	cmd := append(nt.wrap(host), argv...)
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	return string(out), err
}
