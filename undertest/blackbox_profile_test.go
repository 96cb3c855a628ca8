package undertest_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/quotaqual/quotaqual/undertest"
)

// TestBlackBoxProfileDeclaresLessOfTheSameGateway checks the black-box test profile
// (testdata/quotaqual-blackbox.yaml, which the mutant tests run quotaqual's gateway through) is
// quotaqual.yaml with quota inspection and the scenarios' rules declared absent and nothing else
// changed: a catch on it is the black-box paths' doing, not another gateway's.
func TestBlackBoxProfileDeclaresLessOfTheSameGateway(t *testing.T) {
	bb, err := undertest.Load(filepath.Join("testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	def := undertest.Default()
	if !reflect.DeepEqual(bb.Launch, def.Launch) || !reflect.DeepEqual(bb.Readiness, def.Readiness) || !reflect.DeepEqual(bb.Expect, def.Expect) {
		t.Errorf("launch, readiness or expectations differ from quotaqual.yaml")
	}
	want := def.Caps
	want.QuotaInspection, want.ScenarioRules = undertest.InspectNone, false
	if !reflect.DeepEqual(bb.Caps, want) {
		t.Errorf("capabilities %+v, want quotaqual.yaml's with no inspection and no scenario rules: %+v", bb.Caps, want)
	}
	if bb.Inspects() {
		t.Error("the black-box profile inspects")
	}
}
