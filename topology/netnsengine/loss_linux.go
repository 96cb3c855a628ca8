//go:build linux

package netnsengine

import (
	"context"
	"fmt"
	"strings"

	"github.com/quotaqual/quotaqual/topology"
)

// SetLoss implements topology.Lossy: in host's namespace, a table of its own per peer drops
// percent of the packets from peer's address (nftables numgen; tc netem is not in this
// kernel), at a priority before the policy table qq, so an established connection loses its
// share too. Percent 0 deletes the table. Each peer has its own table so that losses on
// several pairs come and go independently, and a delete touches nothing else.
func (t *netnsTopo) SetLoss(ctx context.Context, host, peer string, percent int) error {
	if err := topology.CheckPair(host, peer, t.hosts()); err != nil {
		return err
	}
	if percent < 0 || percent > 100 {
		return fmt.Errorf("loss on %s from %s: %d%% is out of range: use 0 to 100", host, peer, percent)
	}
	if err := run(ctx, lossNFT(t.hostAddr(peer), percent), append(t.wrap(host), "nft", "-f", "-")...); err != nil {
		return fmt.Errorf("loss %d%% on %s from %s: %w", percent, host, peer, err)
	}
	return nil
}

// lossNFT is the nft script that sets the loss from peerAddr, in a table named after it.
func lossNFT(peerAddr string, percent int) string {
	return topology.LossNFT("qqloss_"+strings.ReplaceAll(peerAddr, ".", "_"), []string{peerAddr}, percent)
}
