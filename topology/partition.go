package topology

import (
	"fmt"
	"slices"
	"strings"
)

// CheckPair checks the two sides of a partition (or a heal) before an engine cuts anything:
// each must be one of the run's hosts (the observer is none: it is the harness), and they must
// differ. Every engine asks the same of its arguments; only its host list differs.
func CheckPair(host, peer string, hosts []string) error {
	for _, h := range []string{host, peer} {
		if h == HostObserver || !slices.Contains(hosts, h) {
			return fmt.Errorf("partition %s from %s: unknown host %q: use one of %s", host, peer, h, strings.Join(hosts, ", "))
		}
	}
	if host == peer {
		return fmt.Errorf("partition %s from itself: name two different hosts", host)
	}
	return nil
}

// PairKey is the key of the pair {a, b} whichever side is named first: a partition of a from b
// is healed by a heal of b and a.
func PairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}
