package dockerengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/moby/moby/client"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
)

// The nemesis primitives on docker: a pause is `docker pause` (the cgroup freezer: every
// process of the container stops, its sockets stay open), and the store's admin commands go
// from Valkey's own namespace (or through a relay from inside gateway-a's container, which the
// network lets reach Valkey). Loss and the store-link proxy are in links_linux.go.

// PauseHost implements topology.Pauser.
func (t *dockerTopo) PauseHost(ctx context.Context, host string) error {
	c := t.ctr(host)
	if c == nil || t.cli == nil {
		return fmt.Errorf("pause %s: no such container (is the topology up?)", host)
	}
	if _, err := t.cli.ContainerPause(ctx, c.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("docker pause %s: %w", host, err)
	}
	return nil
}

// ResumeHost implements topology.Pauser.
func (t *dockerTopo) ResumeHost(ctx context.Context, host string) error {
	c := t.ctr(host)
	if c == nil || t.cli == nil {
		return fmt.Errorf("resume %s: no such container (is the topology up?)", host)
	}
	if _, err := t.cli.ContainerUnpause(ctx, c.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("docker unpause %s: %w", host, err)
	}
	return nil
}

// StoreAdminReason is empty when StoreCommand reaches the run's store, or says why not.
func (t *dockerTopo) StoreAdminReason() string {
	if t.spec.Store == topology.StoreCluster {
		return "the run's store is a Valkey Cluster: a store lever would reach one node of it, not the store (run with --store single)"
	}
	return ""
}

// StoreCommand implements topology.StoreAdmin: one command, authenticated with the run's
// password, on a connection the harness opens in Valkey's own namespace to its loopback, or,
// when the harness cannot enter it (nsReason), relayed from gateway-a's container (the harness
// is on no docker network). The password is sent, never returned: errors name the command's verb.
func (t *dockerTopo) StoreCommand(ctx context.Context, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("store command: no command given")
	}
	if why := t.StoreAdminReason(); why != "" {
		return "", fmt.Errorf("store command %s: %s: %w", args[0], why, topology.ErrUnsupported)
	}
	// From Valkey's own namespace to its loopback when the harness can enter it: no loss,
	// partition or proxy on a gateway's link is in the way. Otherwise from gateway-a.
	from, addr := topology.HostValkey, net.JoinHostPort("127.0.0.1", strconv.Itoa(dockerPorts.Valkey))
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return t.dialIn(ctx, from, addr) }
	if t.nsReason() != "" {
		from, addr = t.spec.GatewayHosts()[0], t.ValkeyAddr()
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return t.relayDial(ctx, from, addr) }
	}
	reply, err := valkeyproc.DoVia(ctx, dial, addr, t.spec.Deployment.ValkeyPassword, args...)
	if err != nil {
		return "", fmt.Errorf("from %s: %w", from, topology.StoreError(err, t.spec.Deployment.ValkeyPassword, args))
	}
	return topology.ReplyText(reply), nil
}
