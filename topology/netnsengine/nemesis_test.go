//go:build linux

package netnsengine

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
	"github.com/quotaqual/quotaqual/topology/linkproxy"
)

// TestNetnsNemesisLevers: pause, store stall, memory pressure and loss (nftables numgen in the
// host's namespace) on the netns engine, each healed by its Undo.
func TestNetnsNemesisLevers(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	topo, _ := enginetest.UpTopology(t, topology.EngineNetns, spec)
	if ok, why := topology.Loss.Available(topo); !ok {
		t.Fatalf("loss on netns: %s", why)
	}
	enginetest.CheckNemesisLevers(t, topo, spec.Deployment)
}

// TestLossNFT: the loss table is declared before it is deleted (a delete of a missing table
// fails the whole script) and drops the given share of the peer's packets.
func TestLossNFT(t *testing.T) {
	got := lossNFT("10.77.0.5", 30)
	for _, want := range []string{"table inet qqloss_10_77_0_5 {}\ndelete table inet qqloss_10_77_0_5\n",
		"ip saddr 10.77.0.5 numgen random mod 100 < 30 counter drop", "priority filter - 10"} {
		if !strings.Contains(got, want) {
			t.Errorf("lossNFT lacks %q:\n%s", want, got)
		}
	}
	if all := lossNFT("10.77.0.5", 100); !strings.Contains(all, "ip saddr 10.77.0.5 counter drop") {
		t.Errorf("lossNFT 100%% is not a plain drop (numgen's range is 0-99):\n%s", all)
	}
	if off := lossNFT("10.77.0.5", 0); strings.Contains(off, "drop") {
		t.Errorf("lossNFT 0%% still drops:\n%s", off)
	}
}

// TestRedirectNFT: the proxy's table is declared before it is deleted, redirects new
// connections to the store port and resets live direct ones, and both rules spare the
// proxy's own marked connection.
func TestRedirectNFT(t *testing.T) {
	got := linkproxy.RedirectNFT(linkproxy.Table("10.77.0.5"), "10.77.0.5", 6379, 41000)
	for _, want := range []string{"table ip qqproxy_10_77_0_5 {}\ndelete table ip qqproxy_10_77_0_5\n",
		"type nat hook output priority -100", "ip daddr 10.77.0.5 tcp dport 6379 meta mark != 0x5171 counter redirect to :41000",
		"type filter hook output priority filter", "ip daddr 10.77.0.5 tcp dport 6379 meta mark != 0x5171 counter reject with tcp reset"} {
		if !strings.Contains(got, want) {
			t.Errorf("RedirectNFT lacks %q:\n%s", want, got)
		}
	}
}
