package undertest_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/quotaqual/quotaqual/undertest"
)

// TestBlackBoxProfileDeclaresLessOfTheSameGateway checks the black-box test profile
// (testdata/quotaqual-blackbox.yaml, which the mutant tests run quotaqual's gateway through) is
// quotaqual.yaml with quota inspection and the gateway's own counters declared absent and
// nothing else changed — the same config, scenario rules included: a catch on it is the
// black-box paths' doing, not another gateway's or another rule's.
func TestBlackBoxProfileDeclaresLessOfTheSameGateway(t *testing.T) {
	bb, err := undertest.Load(filepath.Join("testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def := undertest.Default()
	if !reflect.DeepEqual(bb.Launch, def.Launch) || !reflect.DeepEqual(bb.Config, def.Config) ||
		!reflect.DeepEqual(bb.Readiness, def.Readiness) || !reflect.DeepEqual(bb.Liveness, def.Liveness) || !reflect.DeepEqual(bb.Expect, def.Expect) {
		t.Errorf("launch, config, readiness, liveness or expectations differ from quotaqual.yaml")
	}
	want := def.Caps
	want.QuotaInspection = undertest.InspectNone
	want.Metrics = undertest.Metrics{} // a gateway's counters are its own view of itself
	if !reflect.DeepEqual(bb.Caps, want) {
		t.Errorf("capabilities %+v, want quotaqual.yaml's with no inspection and no counters: %+v", bb.Caps, want)
	}
	if bb.Inspects() {
		t.Error("the black-box profile inspects")
	}
	for _, f := range undertest.RuleFeatures {
		if !bb.Expresses(f) {
			t.Errorf("the black-box profile cannot express %s: the scenarios needing it would skip there", f)
		}
	}
}
