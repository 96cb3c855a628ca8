package topology

import (
	"fmt"
	"sort"
	"strings"
)

// Deny modes: how a denied connection attempt fails.
const (
	// DenyReject answers a denied TCP SYN with a reset: the client fails in well under a
	// millisecond ("connection refused").
	DenyReject = "reject"
	// DenyDrop silently drops it, as most CNIs do: the client waits out its connect timeout.
	DenyDrop = "drop"
)

// nftTable and nftPartitionSet name what CompileNFT creates in every host namespace.
const (
	nftTable        = "qq"
	nftPartitionSet = "partition"
)

// CompileNFT renders the nftables ruleset of one host's namespace from the policy: table inet qq
// with an input chain (policy drop) that accepts loopback, then rejects or drops anything from
// a source in the partition set (before the established accept, so a partition also kills live
// connections), then accepts established and related traffic, then accepts each allowed
// source address to each allowed port, and finally rejects TCP with a reset (mode reject) or
// lets the chain policy drop it (mode drop). addrs maps host names (observer included) to IPv4
// addresses. Feed the result to `nft -f -` inside the namespace.
func CompileNFT(p Policy, host string, addrs map[string]string, mode string) (string, error) {
	mode, err := denyMode(mode)
	if err != nil {
		return "", err
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(nftHead)
	b.WriteString("\tchain input {\n")
	b.WriteString("\t\ttype filter hook input priority filter; policy drop;\n")
	b.WriteString("\t\tiif \"lo\" accept\n")
	b.WriteString(denyLines("\t\tip saddr @"+nftPartitionSet+" ", mode, true))
	b.WriteString("\t\tct state established,related accept\n")
	for _, r := range p.RulesFor(host) {
		var srcs []string
		for _, f := range r.From {
			a, ok := addrs[f]
			if !ok {
				return "", fmt.Errorf("policy rule %q: no address for source host %q", r.Name, f)
			}
			srcs = append(srcs, a)
		}
		sort.Strings(srcs)
		set := srcs[0]
		if len(srcs) > 1 {
			set = "{ " + strings.Join(srcs, ", ") + " }"
		}
		fmt.Fprintf(&b, "\t\tip saddr %s tcp dport %d accept comment %q\n", set, r.Port, r.Name)
		if r.UDP {
			fmt.Fprintf(&b, "\t\tip saddr %s udp dport %d accept comment %q\n", set, r.Port, r.Name+"-udp")
		}
	}
	b.WriteString(denyLines("\t\t", mode, false))
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// nftHead opens the table and declares the partition set.
var nftHead = fmt.Sprintf("table inet %s {\n\tset %s {\n\t\ttype ipv4_addr\n\t}\n\n", nftTable, nftPartitionSet)

// ValidDenyMode reports whether mode is DenyReject or DenyDrop.
func ValidDenyMode(mode string) bool { return mode == DenyReject || mode == DenyDrop }

// denyMode defaults an empty deny mode to DenyReject and rejects unknown ones.
func denyMode(mode string) (string, error) {
	if mode == "" {
		return DenyReject, nil
	}
	if !ValidDenyMode(mode) {
		return "", fmt.Errorf("deny mode %q is unknown: use %q or %q", mode, DenyReject, DenyDrop)
	}
	return mode, nil
}

// denyLines renders the deny rules for prefix (an indentation plus an optional match). In
// reject mode TCP gets a reset; everything else is dropped (explicitly for the partition set,
// by the chain policy otherwise).
func denyLines(prefix, mode string, partition bool) string {
	var b strings.Builder
	if mode == DenyReject {
		b.WriteString(prefix + "meta l4proto tcp reject with tcp reset\n")
	}
	if partition {
		b.WriteString(prefix + "drop\n")
	}
	return b.String()
}

// nftPartitionCmd is the nft command that adds (or deletes) peerAddr to the partition set.
func NFTPartitionCommand(add bool, peerAddr string) string {
	verb := "add"
	if !add {
		verb = "delete"
	}
	return fmt.Sprintf("%s element inet %s %s { %s }\n", verb, nftTable, nftPartitionSet, peerAddr)
}

// CompilePartitionNFT renders a ruleset that enforces partitions only, for a namespace whose
// reachability is otherwise left to its engine (docker's network membership): the same table
// and partition set as CompileNFT, an input chain that accepts everything except sources in
// the set, and an output chain that drops what the namespace sends to them — so one side's
// set cuts both directions even when the peer's namespace cannot be changed, live
// connections included (no established-connection accept comes first).
func CompilePartitionNFT(mode string) (string, error) {
	mode, err := denyMode(mode)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(nftHead)
	b.WriteString("\tchain input {\n")
	b.WriteString("\t\ttype filter hook input priority filter; policy accept;\n")
	b.WriteString("\t\tiif \"lo\" accept\n")
	b.WriteString(denyLines("\t\tip saddr @"+nftPartitionSet+" ", mode, true))
	b.WriteString("\t}\n\n\tchain output {\n")
	b.WriteString("\t\ttype filter hook output priority filter; policy accept;\n")
	b.WriteString("\t\toif \"lo\" accept\n")
	b.WriteString("\t\tip daddr @" + nftPartitionSet + " drop\n")
	b.WriteString("\t}\n}\n")
	return b.String(), nil
}

// LossNFT is the nft script behind Lossy.SetLoss: table (family inet, of its own) drops
// percent of the packets from peerAddrs (nftables numgen; tc netem is not in this kernel) at a
// priority before the policy table qq, so an established connection loses its share too. The
// table is declared (so the delete never fails) and deleted, then created again when
// percent > 0: percent 0 removes it.
func LossNFT(table string, peerAddrs []string, percent int) string {
	s := fmt.Sprintf("table inet %s {}\ndelete table inet %s\n", table, table)
	if percent <= 0 || len(peerAddrs) == 0 {
		return s
	}
	src := peerAddrs[0]
	if len(peerAddrs) > 1 {
		src = "{ " + strings.Join(peerAddrs, ", ") + " }"
	}
	// numgen's value is 0..99: "< 100" is out of its range, so all of it is a plain drop.
	match := fmt.Sprintf("numgen random mod 100 < %d ", percent)
	if percent >= 100 {
		match = ""
	}
	return s + fmt.Sprintf("table inet %s {\n\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n"+
		"\t\tip saddr %s %scounter drop\n\t}\n}\n", table, src, match)
}
