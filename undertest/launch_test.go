package undertest_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/undertest"
)

// TestEnvVarsKeepSecretCopiesAsReferences: for an engine that passes secrets by reference, a
// profile variable splits into literal text and copies of the run's variables, in name order,
// and Env (the resolved form) is exactly their concatenation with the values filled in.
func TestEnvVarsKeepSecretCopiesAsReferences(t *testing.T) {
	y, _ := undertest.ShippedYAML("altgateway")
	text := strings.Replace(string(y), "launch:\n", "launch:\n  env:\n"+
		"    B_URL: \"redis://:${PW}@{{.Store.Addr}}/$(x)\"\n"+
		"    A_COPY: $PW\n"+
		"    C_PLAIN: \"{{.Name}}\"\n", 1)
	p, err := undertest.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	f := undertest.Facts{Name: "gateway-a", Store: undertest.Store{Addr: "valkey:6379"}}
	vars, err := p.EnvVars(f, []string{"PW"})
	if err != nil {
		t.Fatal(err)
	}
	want := []undertest.EnvVar{
		{Name: "A_COPY", Parts: []undertest.EnvPart{{Copy: "PW"}}},
		{Name: "B_URL", Parts: []undertest.EnvPart{{Text: "redis://:"}, {Copy: "PW"}, {Text: "@valkey:6379/$(x)"}}},
		{Name: "C_PLAIN", Parts: []undertest.EnvPart{{Text: "gateway-a"}}},
	}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("EnvVars = %+v\nwant %+v", vars, want)
	}
	if name, ok := vars[0].CopiesOnly(); !ok || name != "PW" {
		t.Errorf("A_COPY copies only %q %v, want PW", name, ok)
	}
	if _, ok := vars[1].CopiesOnly(); ok {
		t.Error("B_URL is not a whole copy")
	}
	env, err := p.Env(f, []string{"PW=s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PW=s3cret", "A_COPY=s3cret", "B_URL=redis://:s3cret@valkey:6379/$(x)", "C_PLAIN=gateway-a"}; !slices.Equal(env, want) {
		t.Errorf("Env = %q, want %q", env, want)
	}
	if _, err := p.EnvVars(f, []string{"OTHER"}); err == nil || !strings.Contains(err.Error(), "copies $PW") {
		t.Errorf("a copy of a variable the run does not set: %v", err)
	}
}

// TestLaunchImageAndLivenessAreValidated: a malformed image reference and a liveness probe
// without an absolute path or a known listener are errors naming their path.
func TestLaunchImageAndLivenessAreValidated(t *testing.T) {
	good, _ := undertest.ShippedYAML("altgateway")
	for _, c := range []struct{ from, to, wantPath string }{
		{"launch:\n", "launch:\n  image: \"Not An Image\"\n", "launch.image"},
		{"path: /live", "path: live", "liveness.path"},
		{"liveness:\n  listener: admin", "liveness:\n  listener: side", "liveness.listener"},
	} {
		bad := strings.Replace(string(good), c.from, c.to, 1)
		if bad == string(good) {
			t.Fatalf("%q not in the profile", c.from)
		}
		if _, err := undertest.Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.wantPath+": ") {
			t.Errorf("%s: %v, want an error naming %s", c.to, err, c.wantPath)
		}
	}
	ok := strings.Replace(string(good), "launch:\n", "launch:\n  image: registry.example:5000/team/gw:1.2@sha256:"+strings.Repeat("a", 64)+"\n", 1)
	if _, err := undertest.Parse([]byte(ok)); err != nil {
		t.Errorf("a registry image with a port, tag and digest: %v", err)
	}
}
