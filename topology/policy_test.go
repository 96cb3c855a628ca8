package topology

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestCompileNFTGolden(t *testing.T) {
	pol := DefaultPolicy(netnsTestPorts, GatewayNames(2))
	for _, tc := range []struct{ host, mode string }{
		{HostValkey, DenyReject},
		{HostGatewayA, DenyReject},
		{HostProviderWest, DenyDrop},
		{HostClient, DenyReject},
	} {
		t.Run(tc.host+"-"+tc.mode, func(t *testing.T) {
			got, err := CompileNFT(pol, tc.host, testAddrs, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "nft-"+tc.host+"-"+tc.mode+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestCompileNFTGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("ruleset of %s (%s) differs from %s:\n--- got\n%s\n--- want\n%s", tc.host, tc.mode, golden, got, want)
			}
		})
	}
}

func TestCompileNFTOrdering(t *testing.T) {
	// The partition rules must come before the established accept (or live connections
	// survive a partition) and the allow rules after it; the final reject last.
	got, err := CompileNFT(DefaultPolicy(netnsTestPorts, GatewayNames(2)), HostValkey, testAddrs, DenyReject)
	if err != nil {
		t.Fatal(err)
	}
	idx := func(s string) int {
		i := strings.Index(got, s)
		if i < 0 {
			t.Fatalf("ruleset lacks %q:\n%s", s, got)
		}
		return i
	}
	lo, part, est, allow := idx(`iif "lo" accept`), idx("ip saddr @partition"), idx("ct state established,related accept"), idx("tcp dport 6379 accept")
	last := strings.LastIndex(got, "meta l4proto tcp reject with tcp reset")
	if !(lo < part && part < est && est < allow && allow < last) {
		t.Errorf("rule order wrong (lo %d, partition %d, established %d, allow %d, final reject %d):\n%s", lo, part, est, allow, last, got)
	}
	if !strings.Contains(got, "policy drop;") {
		t.Errorf("input chain must default to drop:\n%s", got)
	}
}

func TestCompileNFTErrors(t *testing.T) {
	pol := DefaultPolicy(netnsTestPorts, GatewayNames(2))
	if _, err := CompileNFT(pol, HostValkey, testAddrs, "bounce"); err == nil || !strings.Contains(err.Error(), "deny mode") {
		t.Errorf("unknown deny mode: got %v", err)
	}
	addrs := map[string]string{HostValkey: "198.18.0.31"}
	if _, err := CompileNFT(pol, HostValkey, addrs, DenyReject); err == nil || !strings.Contains(err.Error(), "no address") {
		t.Errorf("missing source address: got %v", err)
	}
	bad := Policy{Rules: []PolicyRule{{Name: "x", Host: "nowhere", Port: 1, From: []string{HostClient}}}}
	if _, err := CompileNFT(bad, HostValkey, testAddrs, DenyReject); err == nil {
		t.Error("unknown target host accepted")
	}
	bad = Policy{Rules: []PolicyRule{{Name: "x", Host: HostValkey, Port: 0, From: []string{HostClient}}}}
	if err := bad.Validate(); err == nil {
		t.Error("port 0 accepted")
	}
	bad = Policy{Rules: []PolicyRule{{Name: "x", Host: HostValkey, Port: 1}}}
	if err := bad.Validate(); err == nil {
		t.Error("rule without sources accepted")
	}
}

func TestPolicyAllows(t *testing.T) {
	p := DefaultPolicy(netnsTestPorts, GatewayNames(2))
	P := netnsTestPorts
	cases := []struct {
		from, to string
		port     int
		want     bool
	}{
		{HostGatewayA, HostValkey, P.Valkey, true},
		{HostGatewayB, HostValkey, P.Valkey, true},
		{HostClient, HostValkey, P.Valkey, false},
		{HostProviderWest, HostValkey, P.Valkey, false},
		{HostObserver, HostValkey, P.Valkey, false},
		{HostGatewayA, HostValkey, P.GatewayData, false},
		{HostGatewayA, HostProviderWest, P.ProviderData, true},
		{HostGatewayB, HostProviderEast, P.ProviderData, true},
		{HostClient, HostProviderCentral, P.ProviderData, false},
		{HostObserver, HostProviderCentral, P.ProviderData, false},
		{HostProviderWest, HostProviderEast, P.ProviderData, false},
		{HostObserver, HostProviderWest, P.ProviderAdmin, true},
		{HostGatewayA, HostProviderWest, P.ProviderAdmin, false},
		{HostClient, HostProviderWest, P.ProviderAdmin, false},
		{HostClient, HostGatewayA, P.GatewayData, true},
		{HostObserver, HostGatewayB, P.GatewayData, true},
		{HostProviderWest, HostGatewayA, P.GatewayData, false},
		{HostGatewayB, HostGatewayA, P.GatewayData, false},
		{HostObserver, HostGatewayA, P.GatewayAdmin, true},
		{HostClient, HostGatewayA, P.GatewayAdmin, false},
		{HostGatewayB, HostGatewayA, P.GatewayAdmin, false},
		{HostValkey, HostGatewayA, P.GatewayData, false},
		{HostGatewayA, HostClient, 1234, false},
		{HostValkey, HostValkey, P.Valkey, true}, // loopback is not policed
	}
	for _, c := range cases {
		if got := p.Allows(c.from, c.to, c.port); got != c.want {
			t.Errorf("Allows(%s -> %s:%d) = %v, want %v", c.from, c.to, c.port, got, c.want)
		}
	}
	// Without the Valkey rule nothing reaches Valkey (the failing-policy setup of the
	// network-policy scenario's proof).
	var without Policy
	for _, r := range p.Rules {
		if r.Host != HostValkey {
			without.Rules = append(without.Rules, r)
		}
	}
	if without.Allows(HostGatewayA, HostValkey, P.Valkey) {
		t.Error("policy without the valkey rule still allows gateway-a -> valkey")
	}
}

func TestRunIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		id := NewRunID()
		if err := ValidateRunID(id); err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
	if len(seen) < 45 {
		t.Errorf("run ids repeat: %d distinct of 50", len(seen))
	}
	for _, bad := range []string{"", "-x", "Upper", "a_b", strings.Repeat("a", 25), "a b"} {
		if ValidateRunID(bad) == nil {
			t.Errorf("run id %q accepted", bad)
		}
	}
	if ValidateRunID(strings.Repeat("a", 24)) != nil {
		t.Error("24-character run id rejected")
	}
}

var netnsTestPorts = Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}

var testAddrs = map[string]string{
	HostObserver:        "198.18.0.1",
	HostClient:          "198.18.0.10",
	HostGatewayA:        "198.18.0.11",
	HostGatewayB:        "198.18.0.12",
	HostProviderWest:    "198.18.0.21",
	HostProviderCentral: "198.18.0.22",
	HostProviderEast:    "198.18.0.23",
	HostValkey:          "198.18.0.31",
}

// TestCompilePartitionNFT pins the docker store group's partition-only ruleset: the netns
// engine's table and set, input and output chains that accept by default and cut the set's
// addresses with nothing before them but the loopback (no established accept: a partition
// kills live connections), in both deny modes.
func TestCompilePartitionNFT(t *testing.T) {
	for _, mode := range []string{DenyReject, DenyDrop} {
		got, err := CompilePartitionNFT(mode)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", "nft-partition-"+mode+".golden")
		if *update {
			if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -run TestCompilePartitionNFT -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("partition ruleset (%s) differs from %s:\n--- got\n%s\n--- want\n%s", mode, golden, got, want)
		}
		if strings.Contains(got, "established") || !strings.Contains(got, "ip saddr @partition") || !strings.Contains(got, "ip daddr @partition drop") {
			t.Errorf("partition ruleset (%s) must cut both directions with no established accept:\n%s", mode, got)
		}
	}
	if _, err := CompilePartitionNFT("bounce"); err == nil || !strings.Contains(err.Error(), "deny mode") {
		t.Errorf("unknown deny mode: got %v", err)
	}
}

func TestGatewayNamesAndTheirRange(t *testing.T) {
	if got := GatewayNames(4); !slices.Equal(got, []string{"gateway-a", "gateway-b", "gateway-c", "gateway-d"}) {
		t.Errorf("GatewayNames(4) = %v", got)
	}
	if got := GatewayNames(MaxGateways); got[len(got)-1] != "gateway-p" {
		t.Errorf("the last of %d gateways is %s, want gateway-p", MaxGateways, got[len(got)-1])
	}
	for _, g := range GatewayNames(MaxGateways) {
		if !IsGateway(g) {
			t.Errorf("IsGateway(%s) is false", g)
		}
	}
	for _, h := range []string{"gateway-q", "gateway-", "gateway-ab", HostClient, HostValkey} {
		if IsGateway(h) {
			t.Errorf("IsGateway(%q) is true", h)
		}
	}
	if n, err := ValidateGateways(0); n != DefaultGateways || err != nil {
		t.Errorf("ValidateGateways(0) = %d, %v; want the default %d", n, err, DefaultGateways)
	}
	for _, n := range []int{2, 3, 16} {
		if got, err := ValidateGateways(n); got != n || err != nil {
			t.Errorf("ValidateGateways(%d) = %d, %v", n, got, err)
		}
	}
	for _, n := range []int{-1, 1, 17} {
		_, err := ValidateGateways(n)
		if err == nil || !strings.Contains(err.Error(), "--gateways") || !strings.Contains(err.Error(), "2 to 16") {
			t.Errorf("ValidateGateways(%d): %v, want an error naming --gateways and the range", n, err)
		}
	}
}

// TestDefaultPolicyCoversEveryGateway: with four gateways, gateway-c and gateway-d reach valkey
// and the providers and accept the client exactly as gateway-a does; a fifth name does not.
func TestDefaultPolicyCoversEveryGateway(t *testing.T) {
	P := netnsTestPorts
	pol := WithStorePolicy(DefaultPolicy(P, GatewayNames(4)), P.Valkey, GatewayNames(4))
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, g := range GatewayNames(4) {
		for _, c := range []struct {
			from, to string
			port     int
			want     bool
		}{
			{g, HostValkey, P.Valkey, true},
			{g, HostProviderEast, P.ProviderData, true},
			{g, HostStore1, P.Valkey, true},
			{g, HostSentinel2, SentinelPort, true},
			{HostClient, g, P.GatewayData, true},
			{HostObserver, g, P.GatewayAdmin, true},
			{HostClient, g, P.GatewayAdmin, false},
			{g, HostGatewayA, P.GatewayData, g == HostGatewayA},
		} {
			if got := pol.Allows(c.from, c.to, c.port); got != c.want {
				t.Errorf("%s → %s:%d allowed=%v, want %v", c.from, c.to, c.port, got, c.want)
			}
		}
	}
	if pol.Allows("gateway-e", HostValkey, P.Valkey) {
		t.Error("gateway-e, not in a four-gateway run, reaches valkey")
	}
}
