package matrix_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
)

// TestRepresentativeMutantsAreCaught runs a subset of the matrix in CI: one mutant per defect
// class the qualification was sharpened for, each against the one scenario that must catch
// it, after a control run of the unmutated tagged binary that must pass those scenarios.
// The full matrix is `make mutants`.
func TestRepresentativeMutantsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds a tagged binary and runs the qualification seven times; not in -short")
	}
	if engine, reason := topology.Detect(); engine != topology.EngineNetns {
		t.Skip("the matrix runs on the netns topology, unavailable here: " + reason)
	}
	bin := filepath.Join(t.TempDir(), "quotaqual-mutants")
	if err := testbin.Build(bin, mutant.Tag); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mutant   mutant.Name
		scenario string
	}{
		{mutant.ReadThenWriteReserve, "concurrency"},  // atomic admission
		{mutant.NoLeaseRenewal, "concurrency"},        // leases under a hold longer than the lease
		{mutant.RetryAfterOneSecond, "window-expiry"}, // header truth
		{mutant.CredentialsForwarded, "valid-auth"},   // credential isolation
		{mutant.FailOpen, "valkey-outage"},            // fail closed
		{mutant.SweepUnreadKey, "gateway-crash"},      // the upstream expiry-sweep bug
	}
	var scen []string
	for _, c := range cases {
		if !slices.Contains(scen, c.scenario) {
			scen = append(scen, c.scenario)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	opts := matrix.RunOptions{Tagged: bin, Topology: topology.EngineNetns, Scenarios: scen}
	view := matrix.View{Name: matrix.WhiteBox}
	control, err := matrix.RunCatalogued(ctx, opts, "", view)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scen {
		if control.Status[s] != evidence.Passed {
			t.Fatalf("control (no mutant): %s %s (%s); the subset means nothing until it passes", s, control.Status[s], control.Reasons[s])
		}
	}
	for _, c := range cases {
		t.Run(string(c.mutant), func(t *testing.T) {
			opts := opts
			opts.Scenarios = []string{c.scenario}
			row, err := matrix.RunCatalogued(ctx, opts, string(c.mutant), view)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status[c.scenario] != evidence.Failed {
				t.Errorf("%s not caught: %s %s", c.mutant, c.scenario, row.Status[c.scenario])
			} else {
				t.Logf("%s caught by %s: %s (%s)", c.mutant, c.scenario, row.Reasons[c.scenario], row.Elapsed.Round(time.Millisecond))
			}
		})
	}
}

// TestBlackBoxPathsCatchMutants runs quotaqual's own gateway through a profile that declares
// no quota inspection (undertest/testdata/quotaqual-blackbox.yaml), so the scenarios take
// their black-box paths, and proves those paths catch defects the white-box paths catch by
// reading the ledger: a dead gateway's expired hold that vanishes uncharged (seen only as one
// admission too many after the lease), a cut stream charged its estimate (seen only as the
// next request admitted) and probes that charge the subject admitted last (seen only as the
// one request the rule still had room for denied after the probes). The control must pass those scenarios at the
// black-box evidence level, or the catch would prove nothing about the black-box paths.
func TestBlackBoxPathsCatchMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds a tagged binary and runs the qualification four times; not in -short")
	}
	if engine, reason := topology.Detect(); engine != topology.EngineNetns {
		t.Skip("the matrix runs on the netns topology, unavailable here: " + reason)
	}
	bin := filepath.Join(t.TempDir(), "quotaqual-mutants")
	if err := testbin.Build(bin, mutant.Tag); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mutant   mutant.Name
		scenario string
	}{
		{mutant.SweepUnreadKey, "gateway-crash"},          // white-box: the ledger's settled figure after the lease
		{mutant.EstimateOnDisconnect, "usage-accounting"}, // white-box: the settled charge of the cut stream
		{mutant.ProbesConsumeQuota, "probe-no-quota"},     // white-box: settled before and after the probes
	}
	var scen []string
	for _, c := range cases {
		scen = append(scen, c.scenario)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	opts := matrix.RunOptions{Tagged: bin, Topology: topology.EngineNetns, Scenarios: scen}
	view := matrix.View{Name: matrix.BlackBox, Profile: filepath.Join("..", "..", "..", "undertest", "testdata", "quotaqual-blackbox.yaml")}
	control, err := matrix.RunCatalogued(ctx, opts, "", view)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scen {
		if control.Status[s] != evidence.Passed || !strings.HasPrefix(control.Evidence[s], "black-box") {
			t.Fatalf("control (no mutant): %s %s at evidence %q (%s); want passed at the black-box level", s, control.Status[s], control.Evidence[s], control.Reasons[s])
		}
	}
	for _, c := range cases {
		t.Run(string(c.mutant), func(t *testing.T) {
			opts := opts
			opts.Scenarios = []string{c.scenario}
			row, err := matrix.RunCatalogued(ctx, opts, string(c.mutant), view)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status[c.scenario] != evidence.Failed || !strings.HasPrefix(row.Evidence[c.scenario], "black-box") {
				t.Errorf("%s not caught by the black-box path: %s %s at evidence %q", c.mutant, c.scenario, row.Status[c.scenario], row.Evidence[c.scenario])
			} else {
				t.Logf("%s caught by %s's black-box path: %s (%s)", c.mutant, c.scenario, row.Reasons[c.scenario], row.Elapsed.Round(time.Millisecond))
			}
		})
	}
}
