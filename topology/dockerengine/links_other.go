//go:build !linux

package dockerengine

import (
	"context"
	"fmt"
	"net"

	"github.com/quotaqual/quotaqual/topology"
)

const linksReason = "the docker engine's loss and link proxy enter the containers' network namespaces, which only a Linux harness on the Docker host can"

// LossReason says why SetLoss cannot work here.
func (t *dockerTopo) LossReason() string { return linksReason }

// LinkProxyReason says why ProxyLink cannot work here.
func (t *dockerTopo) LinkProxyReason() string { return linksReason }

// SetLoss implements topology.Lossy: unsupported off Linux.
func (t *dockerTopo) SetLoss(context.Context, string, string, int) error {
	return fmt.Errorf("loss: %s: %w", linksReason, topology.ErrUnsupported)
}

// ProxyLink implements topology.LinkProxier: unsupported off Linux.
func (t *dockerTopo) ProxyLink(context.Context, string, string, []topology.LinkToxic) (topology.Undo, error) {
	return nil, fmt.Errorf("store link proxy: %s: %w", linksReason, topology.ErrUnsupported)
}

func (t *dockerTopo) nsReason() string { return linksReason }

func (t *dockerTopo) dialIn(context.Context, string, string) (net.Conn, error) {
	return nil, fmt.Errorf("%s: %w", linksReason, topology.ErrUnsupported)
}

// DialStore is unsupported off Linux.
func DialStore(context.Context, topology.Topology, string) (net.Conn, error) {
	return nil, fmt.Errorf("%s: %w", linksReason, topology.ErrUnsupported)
}

// NFTTables is unsupported off Linux.
func NFTTables(context.Context, topology.Topology, string) (string, error) {
	return "", fmt.Errorf("%s: %w", linksReason, topology.ErrUnsupported)
}
