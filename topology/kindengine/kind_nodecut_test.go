package kindengine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCutRulesDropBothDirectionsAndHealIdempotently: the cut drops packets to and from every
// address of the peer, by family, in an output and an input chain; the heal removes the table
// whether or not it is there. Where nft and root are at hand, nft itself checks both scripts
// (nft -c), in a network namespace of their own.
func TestCutRulesDropBothDirectionsAndHealIdempotently(t *testing.T) {
	on := cutRules("quotaqual_cut_valkey", []string{"10.244.0.7", "10.96.12.3"}, []string{"fd00::7"}, true)
	for _, want := range []string{
		"add table inet quotaqual_cut_valkey\ndelete table inet quotaqual_cut_valkey\n",
		"type filter hook output priority -300;",
		"type filter hook input priority -300;",
		"ip daddr { 10.244.0.7, 10.96.12.3 } drop",
		"ip saddr { 10.244.0.7, 10.96.12.3 } drop",
		"ip6 daddr { fd00::7 } drop",
		"ip6 saddr { fd00::7 } drop",
	} {
		if !strings.Contains(on, want) {
			t.Errorf("the cut lacks %q:\n%s", want, on)
		}
	}
	off := cutRules("quotaqual_cut_valkey", nil, nil, false)
	if off != "add table inet quotaqual_cut_valkey\ndelete table inet quotaqual_cut_valkey\n" {
		t.Errorf("the heal is not an idempotent removal:\n%s", off)
	}
	if strings.Contains(cutRules("t", []string{"10.0.0.1"}, nil, true), "ip6") {
		t.Error("an IPv4-only peer gets an ip6 rule")
	}

	nft, err := exec.LookPath("nft")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("nft or root missing: the scripts' syntax is checked where both are (CI installs nftables and runs as root)")
	}
	for name, script := range map[string]string{"cut": on, "heal": off} {
		cmd := exec.Command("unshare", "--net", nft, "-c", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nft -c rejects the %s script: %v: %s\n%s", name, err, out, script)
		}
	}
}
