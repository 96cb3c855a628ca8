package peerbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers"
)

// A brief real run: one valkey-server, quotaqual's admission and every peer built here
// (`make peers`); the peers not built are named as skipped, never dropped silently.
func TestBriefRunMeasuresEveryBuiltEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Rounds: 1, PerRound1: 50, PerRound64: 256})
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	if peers.Built(peers.EnvoyRatelimit) == nil {
		want++
	}
	if peers.Built(peers.Gubernator) == nil {
		want += 2
	}
	if len(res.Rows) != want {
		t.Fatalf("%d rows (%v), want %d; skipped: %q", len(res.Rows), rowNames(res), want, res.Skipped)
	}
	if len(res.Rows)+len(res.Skipped) < 3 {
		t.Errorf("rows %v and skipped %q do not account for every engine", rowNames(res), res.Skipped)
	}
	for _, r := range res.Rows {
		if r.P50[0] <= 0 || r.P99[1] < r.P50[1] || r.Rate[0] <= 0 || r.Rate[1] <= 0 || r.Decisions != 50+256 {
			t.Errorf("%s: implausible figures %+v", r.Engine, r)
		}
	}
	// quotaqual's decisions run scripts on the store: it must have seen them.
	if res.Rows[0].StoreCmdUs <= 0 {
		t.Errorf("quotaqual: store command µs/decision %v, want > 0", res.Rows[0].StoreCmdUs)
	}
	var b bytes.Buffer
	if err := Print(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "BenchmarkPeerAdmission/quotaqual\t") {
		t.Errorf("no bench line for quotaqual:\n%s", b.String())
	}
	t.Logf("\n%s", b.String())
}

func rowNames(r Result) []string {
	var out []string
	for _, x := range r.Rows {
		out = append(out, x.Engine)
	}
	return out
}
