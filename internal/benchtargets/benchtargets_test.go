package benchtargets

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkValkeyVsFloor-2   	       1	     16657 commands-pairs/s	        14.14 commands-server-µs/script	     16209 ledger-pairs/s	         0.9104 x-commands-floor
BenchmarkOverhead/clients=1-2         	    2000	      0 ns/op	 120.5 reserve-p50-µs	 1.036 p50-vs-reserve	 0.876 p99-vs-reserve
PASS
`

func TestJudgeReadsRatiosAndNamesWhatDidNotRun(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := res["BenchmarkValkeyVsFloor"]["x-commands-floor"]; got != 0.9104 {
		t.Fatalf("x-commands-floor = %v, want 0.9104", got)
	}
	vs := Judge(res, Targets())
	byKey := map[string]Verdict{}
	for _, v := range vs {
		byKey[v.Bench+" "+v.Metric] = v
	}
	if v := byKey["BenchmarkValkeyVsFloor x-commands-floor"]; !v.Ran || !v.Met || v.FloorValue != 16657 {
		t.Errorf("ledger target: %+v, want measured, met (0.91 ≥ 0.9), floor 16657", v)
	}
	if v := byKey["BenchmarkOverhead/clients=1 p50-vs-reserve"]; !v.Ran || v.Met {
		t.Errorf("gateway p50 @1: %+v, want measured and not met (1.036 > 1.0)", v)
	}
	if v := byKey["BenchmarkOverhead/clients=1 p99-vs-reserve"]; !v.Met {
		t.Errorf("gateway p99 @1: %+v, want met (0.876 ≤ 1.0)", v)
	}
	if v := byKey["BenchmarkOverhead/clients=32 p50-vs-reserve"]; v.Ran || v.Met {
		t.Errorf("gateway @32 did not run: %+v, want neither measured nor met", v)
	}
	var b strings.Builder
	if err := Print(&b, vs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "not measured") || !strings.Contains(b.String(), "NO") {
		t.Errorf("table lacks a 'not measured' or 'NO' row:\n%s", b.String())
	}
}
