package k8s_test

// The gateway under test on kind comes from its profile alone: image, command, config file,
// environment (secrets by Secret reference) and probes. These tests render the shipped
// profiles offline.

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
	"github.com/quotaqual/quotaqual/topology/kindengine"
	"github.com/quotaqual/quotaqual/undertest"
)

func shipped(t *testing.T, name string) *undertest.Profile {
	t.Helper()
	p, err := undertest.Shipped(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// renderEveryGateway renders o (without and with the store group) once per shipped gateway
// profile, one list after the other.
func renderEveryGateway(t *testing.T, d *deployment.Deployment, o kindengine.ManifestOptions) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, name := range undertest.ShippedNames() {
		o.Gateway = shipped(t, name)
		objs = append(objs, renderBoth(t, d, o)...)
	}
	return objs
}

// gatewayObjects returns gateway-a's Deployment container and ConfigMap.
func gatewayObjects(t *testing.T, objs []runtime.Object) (corev1.Container, corev1.PodSpec, *corev1.ConfigMap) {
	t.Helper()
	var dep *appsv1.Deployment
	var cm *corev1.ConfigMap
	for _, o := range objs {
		switch x := o.(type) {
		case *appsv1.Deployment:
			if x.Name == topology.HostGatewayA {
				dep = x
			}
		case *corev1.ConfigMap:
			if x.Name == topology.HostGatewayA+"-config" {
				cm = x
			}
		}
	}
	if dep == nil || cm == nil {
		t.Fatal("no gateway-a Deployment or ConfigMap rendered")
	}
	ps := dep.Spec.Template.Spec
	return ps.Containers[0], ps, cm
}

func probeOf(p *corev1.Probe) string {
	if p == nil || p.HTTPGet == nil {
		return ""
	}
	return p.HTTPGet.Port.String() + " " + p.HTTPGet.Path
}

// mountedAt reports whether the ConfigMap's key file is mounted at path in the container.
func mountedAt(c corev1.Container, ps corev1.PodSpec, cm *corev1.ConfigMap, file, path string) bool {
	if _, ok := cm.Data[file]; !ok {
		return false
	}
	for _, m := range c.VolumeMounts {
		for _, v := range ps.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.MountPath+"/"+file == path {
				return true
			}
		}
	}
	return false
}

// Each shipped gateway's pod is what its profile says: quotaqual's own unchanged (in the
// quotaqual image, `gateway --config`, /readyz and /healthz), the altgateway as
// `altgateway --config <its JSON>` with its own probes, and LiteLLM in its own image with its
// whole argv as the command and the Valkey password copied by Secret reference, never by value.
func TestGatewayPodsComeFromTheirProfiles(t *testing.T) {
	d := testDeployment(t)
	cases := []struct {
		profile       string
		image         string
		command, args []string
		file          string
		ready, live   string
		env           map[string]string // name → "secret:KEY" or the value
		configHas     string
	}{
		{profile: "quotaqual", image: "quotaqual:dev", args: []string{"gateway", "--config", "/etc/quotaqual/gateway.yaml"},
			file: "gateway.yaml", ready: "admin /readyz", live: "admin /healthz", configHas: "url: ${QUOTAQUAL_VALKEY_URL}"},
		{profile: "altgateway", image: "quotaqual:dev", args: []string{"altgateway", "--config", "/etc/quotaqual/altgateway.json"},
			file: "altgateway.json", ready: "admin /ready", live: "admin /live", configHas: `"password_variable": "QUOTAQUAL_VALKEY_PASSWORD"`},
		{profile: "litellm", image: "ghcr.io/berriai/litellm:main-stable", command: []string{"litellm"},
			args: []string{"--config", "/etc/quotaqual/litellm.yaml", "--host", "0.0.0.0", "--port", "8080"},
			file: "litellm.yaml", ready: "data /health/readiness", live: "data /health/liveliness",
			env: map[string]string{"REDIS_PASSWORD": "secret:" + deployment.ValkeyPasswordEnv}, configHas: "redis_password: os.environ/REDIS_PASSWORD"},
	}
	for _, c := range cases {
		t.Run(c.profile, func(t *testing.T) {
			ctr, ps, cm := gatewayObjects(t, render(t, d, kindengine.ManifestOptions{Gateway: shipped(t, c.profile)}))
			if ctr.Image != c.image || !slices.Equal(ctr.Command, c.command) || !slices.Equal(ctr.Args, c.args) {
				t.Errorf("image %s command %q args %q, want %s %q %q", ctr.Image, ctr.Command, ctr.Args, c.image, c.command, c.args)
			}
			path := "/etc/quotaqual/" + c.file
			if !slices.Contains(append(slices.Clone(ctr.Command), ctr.Args...), path) || !mountedAt(ctr, ps, cm, c.file, path) {
				t.Errorf("the config is not mounted where the command reads it (%s): ConfigMap keys %v, mounts %v", path, keys(cm.Data), ctr.VolumeMounts)
			}
			if !strings.Contains(cm.Data[c.file], c.configHas) {
				t.Errorf("config %s lacks %q:\n%s", c.file, c.configHas, cm.Data[c.file])
			}
			if got := probeOf(ctr.ReadinessProbe); got != c.ready {
				t.Errorf("readiness probe %q, want %q", got, c.ready)
			}
			if got := probeOf(ctr.LivenessProbe); got != c.live {
				t.Errorf("liveness probe %q, want %q", got, c.live)
			}
			if len(ctr.EnvFrom) != 1 || ctr.EnvFrom[0].SecretRef == nil || ctr.EnvFrom[0].SecretRef.Name != k8s.SecretGateway {
				t.Errorf("envFrom %v, want the %s Secret", ctr.EnvFrom, k8s.SecretGateway)
			}
			got := map[string]string{}
			for _, e := range ctr.Env {
				if e.Name == topology.EnvRunID {
					continue
				}
				switch {
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == k8s.SecretGateway:
					got[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Key
				default:
					got[e.Name] = e.Value
				}
			}
			if len(got) != len(c.env) {
				t.Errorf("environment %v, want %v", got, c.env)
			}
			for k, v := range c.env {
				if got[k] != v {
					t.Errorf("environment %s = %q, want %q", k, got[k], v)
				}
			}
			for _, name := range []string{"data", "admin"} {
				if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == name }) {
					t.Errorf("no %s port: the probes name ports data and admin", name)
				}
			}
		})
	}
}

// A profile variable mixing text with a copy of a secret becomes Kubernetes' $(NAME)
// expansion of the Secret's variable (never the value), and a literal "$(" is escaped.
func TestMixedProfileVariableIsExpandedByKubernetes(t *testing.T) {
	y, err := undertest.ShippedYAML("altgateway")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(y), "launch:\n", "launch:\n  env:\n    STORE: \"redis://:$QUOTAQUAL_VALKEY_PASSWORD@{{.Store.Addr}}/$(x)\"\n", 1)
	p, err := undertest.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	d := testDeployment(t)
	ctr, _, _ := gatewayObjects(t, render(t, d, kindengine.ManifestOptions{Gateway: p}))
	want := "redis://:$(" + deployment.ValkeyPasswordEnv + ")@valkey.quotaqual-" + goldenRunID + ".svc.cluster.local:6379/$$(x)"
	var got string
	for _, e := range ctr.Env {
		if e.Name == "STORE" {
			got = e.Value
		}
	}
	if got != want {
		t.Errorf("STORE = %q, want %q", got, want)
	}
}

// A foreign argv without an image of its own cannot run in the quotaqual image: the render
// says so and names the fix.
func TestForeignArgvWithoutImageIsRefused(t *testing.T) {
	y, err := undertest.ShippedYAML("litellm")
	if err != nil {
		t.Fatal(err)
	}
	p, err := undertest.Parse([]byte(strings.Replace(string(y), "  image: ghcr.io/berriai/litellm:main-stable\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	o := kindengine.ManifestOptions{RunID: goldenRunID, Gateway: p}
	if _, err := kindengine.Render(testDeployment(t), o); err == nil || !strings.Contains(err.Error(), "launch.image") || !strings.Contains(err.Error(), "--gateway-image") {
		t.Errorf("err = %v, want one naming launch.image and --gateway-image", err)
	}
	// --gateway-image supplies it.
	o.GatewayImage = "registry.example/litellm:1"
	ctr, _, _ := gatewayObjects(t, render(t, testDeployment(t), o))
	if ctr.Image != o.GatewayImage || !slices.Equal(ctr.Command, []string{"litellm"}) {
		t.Errorf("image %s command %q, want %s [litellm]", ctr.Image, ctr.Command, o.GatewayImage)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
