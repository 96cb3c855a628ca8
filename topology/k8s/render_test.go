package k8s_test

// Offline tests of the kind topology's manifests. They live here (not in package topology)
// because package topology's TestMain builds the binary and re-executes into namespaces; these
// need neither and run in well under a second.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
	"github.com/quotaqual/quotaqual/topology/kindengine"
)

var update = flag.Bool("update", false, "rewrite the golden files in topology/testdata/kind")

const goldenRunID = "golden-1"

var ports = topology.Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}

func testDeployment(t *testing.T) *deployment.Deployment {
	t.Helper()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment(goldenRunID, p, deployment.Named("valid-auth", "shared-budget"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func render(t *testing.T, d *deployment.Deployment, o kindengine.ManifestOptions) []runtime.Object {
	t.Helper()
	o.RunID = goldenRunID
	objs, err := kindengine.Render(d, o)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func TestManifestsMatchGoldenFiles(t *testing.T) {
	d := testDeployment(t)
	cases := []struct {
		file string
		opts kindengine.ManifestOptions
	}{
		{"manifests.yaml", kindengine.ManifestOptions{Placeholders: true}},
		{"manifests-emptydir-never.yaml", kindengine.ManifestOptions{Placeholders: true, EmptyDir: true,
			PullPolicy: corev1.PullNever, QuotaqualImage: "quotaqual:bin-0123456789ab", ValkeyImage: "valkey/valkey:8"}},
		{"manifests-store-group.yaml", kindengine.ManifestOptions{Placeholders: true, StoreGroup: true}},
		// Another gateway through its profile alone (gateway_seam_test.go checks its parts).
		{"manifests-altgateway.yaml", kindengine.ManifestOptions{Placeholders: true, Gateway: shipped(t, "altgateway")}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			y, err := k8s.YAML(render(t, d, c.opts))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "testdata", "kind", c.file)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, y, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./topology/k8s -run Golden -update)", err)
			}
			if !bytes.Equal(y, want) {
				t.Errorf("rendered manifests differ from %s (run with -update and review the diff):\n%s", path, firstDiff(string(want), string(y)))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  golden:   %q\n  rendered: %q", i+1, x, y)
		}
	}
	return ""
}

// typed returns an empty value of the API type of kind.
func typed(kind string) runtime.Object {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}
	case "Secret":
		return &corev1.Secret{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}
	case "Service":
		return &corev1.Service{}
	case "NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "Deployment":
		return &appsv1.Deployment{}
	}
	return nil
}

// Every rendered document decodes strictly (no unknown or duplicate field) into its
// Kubernetes API type, and decodes to exactly the object that was rendered.
func TestEveryDocumentDecodesStrictlyIntoItsAPIType(t *testing.T) {
	d := testDeployment(t)
	for _, o := range withAndWithoutStore(kindengine.ManifestOptions{Placeholders: true}, kindengine.ManifestOptions{}) {
		objs := render(t, d, o)
		y, err := k8s.YAML(objs)
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(string(y), "\n---\n")
		if len(docs) != len(objs) {
			t.Fatalf("%d documents for %d objects", len(docs), len(objs))
		}
		kinds := map[string]int{}
		for i, doc := range docs {
			var tm struct {
				Kind       string `json:"kind"`
				APIVersion string `json:"apiVersion"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("document %d: %v", i, err)
			}
			kinds[tm.Kind]++
			got := typed(tm.Kind)
			if got == nil {
				t.Fatalf("document %d has kind %q, which the renderer should not produce", i, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), got); err != nil {
				t.Errorf("document %d (%s) does not decode strictly: %v", i, tm.Kind, err)
				continue
			}
			// The same through encoding/json with unknown fields refused.
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			again := typed(tm.Kind)
			if err := dec.Decode(again); err != nil {
				t.Errorf("document %d (%s): %v", i, tm.Kind, err)
			}
			if !equality.Semantic.DeepEqual(got, objs[i]) {
				t.Errorf("document %d (%s) decodes to a different object than was rendered", i, tm.Kind)
			}
			gvk := objs[i].GetObjectKind().GroupVersionKind()
			if gvk.Kind != tm.Kind || gvk.GroupVersion().String() != tm.APIVersion {
				t.Errorf("document %d: apiVersion/kind %s/%s, object says %s", i, tm.APIVersion, tm.Kind, gvk)
			}
		}
		want := map[string]int{"Namespace": 1, "Secret": 2, "ConfigMap": 2, "PersistentVolumeClaim": 1,
			"NetworkPolicy": 1 + len(topology.DefaultPolicy(ports, topology.GatewayNames(2)).Rules), "Service": 6, "Deployment": 8}
		if o.StoreGroup {
			// One Secret and one ConfigMap of the group; a policy, Service and Deployment per host.
			n := len(topology.StoreHosts)
			want["Secret"], want["ConfigMap"], want["NetworkPolicy"], want["Service"], want["Deployment"] = 3, 3, want["NetworkPolicy"]+n, 6+n, 8+n
		}
		for k, n := range want {
			if kinds[k] != n {
				t.Errorf("store group %v: %d %s objects, want %d", o.StoreGroup, kinds[k], k, n)
			}
		}
	}
}

// Names, labels and namespaces are what the API server accepts.
func TestNamesAndLabelsAreValid(t *testing.T) {
	for _, o := range renderBoth(t, testDeployment(t), kindengine.ManifestOptions{}) {
		m := o.(interface {
			GetName() string
			GetNamespace() string
			GetLabels() map[string]string
		})
		if errs := validation.IsDNS1123Subdomain(m.GetName()); len(errs) > 0 {
			t.Errorf("name %q: %v", m.GetName(), errs)
		}
		if _, isNS := o.(*corev1.Namespace); !isNS && m.GetNamespace() != "quotaqual-"+goldenRunID {
			t.Errorf("%s is in namespace %q, want the run's", m.GetName(), m.GetNamespace())
		}
		for k, v := range m.GetLabels() {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Errorf("%s: label key %q: %v", m.GetName(), k, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("%s: label %s=%q: %v", m.GetName(), k, v, errs)
			}
		}
		if m.GetLabels()[k8s.LabelRunID] != goldenRunID || m.GetLabels()[k8s.LabelManagedBy] != "quotaqual" {
			t.Errorf("%s lacks the run-id / managed-by labels: %v", m.GetName(), m.GetLabels())
		}
	}
}

// Every pod is "restricted": non-root, no privilege escalation, ALL capabilities dropped,
// RuntimeDefault seccomp, read-only root filesystem, no service account token, local images —
// with every shipped gateway profile, foreign images included.
func TestEveryPodIsRestricted(t *testing.T) {
	for _, o := range renderEveryGateway(t, testDeployment(t), kindengine.ManifestOptions{}) {
		dep, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		ps := dep.Spec.Template.Spec
		if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token", dep.Name)
		}
		if ps.SecurityContext == nil || ps.SecurityContext.SeccompProfile == nil ||
			ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod security context is not restricted: %+v", dep.Name, ps.SecurityContext)
		}
		for _, v := range ps.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: hostPath volume %s", dep.Name, v.Name)
			}
		}
		if len(ps.EphemeralContainers) > 0 {
			t.Errorf("%s has ephemeral containers, which this test does not check", dep.Name)
		}
		for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
				sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s/%s: container security context is not restricted: %+v", dep.Name, c.Name, sc)
			}
			if c.ImagePullPolicy == corev1.PullAlways {
				t.Errorf("%s/%s pulls Always: local images must be IfNotPresent or Never", dep.Name, c.Name)
			}
		}
	}
}

// The gateways get exactly the run's secret variables (GatewayEnv and the store's password
// alone, as on every engine), from a Secret, and every password_env their config names is
// among them; Valkey gets its password from a Secret file.
func TestSecretsCarryTheGatewayEnvironment(t *testing.T) {
	d := testDeployment(t)
	objs := render(t, d, kindengine.ManifestOptions{})
	var gwSecret, vkSecret *corev1.Secret
	configs := map[string]string{}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.Secret:
			switch x.Name {
			case k8s.SecretGateway:
				gwSecret = x
			case k8s.SecretValkey:
				vkSecret = x
			}
		case *corev1.ConfigMap:
			configs[x.Name] = x.Data["gateway.yaml"] // quotaqual's profile names its file so
		}
	}
	if gwSecret == nil || vkSecret == nil {
		t.Fatal("missing secrets")
	}
	valkeyAddr := "valkey.quotaqual-" + goldenRunID + ".svc.cluster.local:6379"
	env := append(d.GatewayEnv(valkeyAddr), d.StoreEnv()...)
	if len(gwSecret.StringData) != len(env) {
		t.Errorf("gateway secret has %d keys, GatewayEnv and StoreEnv %d", len(gwSecret.StringData), len(env))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if gwSecret.StringData[k] != v {
			t.Errorf("gateway secret %s differs from GatewayEnv", k)
		}
	}
	if vkSecret.StringData["url"] != d.ValkeyURL(valkeyAddr) || vkSecret.StringData["password"] != d.ValkeyPassword ||
		vkSecret.StringData[k8s.ValkeyAuthKey] != "requirepass "+d.ValkeyPassword+"\n" {
		t.Error("valkey secret does not carry the run's password, URL and auth.conf")
	}
	ref := regexp.MustCompile(`password_env: (\S+)`)
	for name, cfg := range configs {
		if !strings.Contains(cfg, "url: ${"+deployment.ValkeyURLEnv+"}") || !strings.Contains(cfg, "http://provider-west.quotaqual-"+goldenRunID+".svc.cluster.local:8000") {
			t.Errorf("%s: config does not use the Service names and the Valkey URL variable:\n%s", name, cfg)
		}
		for _, m := range ref.FindAllStringSubmatch(cfg, -1) {
			if _, ok := gwSecret.StringData[m[1]]; !ok {
				t.Errorf("%s names %s, which the gateway secret lacks", name, m[1])
			}
		}
	}
}

// With the real secrets rendered, no secret appears outside the two Secrets (not in a
// ConfigMap, an argument, an environment value or an annotation); with placeholders, none
// appears at all — with every shipped gateway profile (litellm copies one into a variable).
func TestSecretsAppearOnlyInSecrets(t *testing.T) {
	d := testDeployment(t)
	for _, placeholders := range []bool{false, true} {
		for _, o := range renderEveryGateway(t, d, kindengine.ManifestOptions{Placeholders: placeholders}) {
			b, _ := json.Marshal(o)
			_, isSecret := o.(*corev1.Secret)
			for _, s := range d.Secrets() {
				if bytes.Contains(b, []byte(s)) && (placeholders || !isSecret) {
					t.Errorf("placeholders=%v: a generated secret appears in %T %s", placeholders, o, o.(interface{ GetName() string }).GetName())
				}
			}
		}
	}
}

// withAndWithoutStore returns each option set as given and with the store group.
func withAndWithoutStore(opts ...kindengine.ManifestOptions) []kindengine.ManifestOptions {
	var out []kindengine.ManifestOptions
	for _, o := range opts {
		o.StoreGroup = false
		out = append(out, o)
		o.StoreGroup = true
		out = append(out, o)
	}
	return out
}

// renderBoth renders o without and with the store group, one list after the other.
func renderBoth(t *testing.T, d *deployment.Deployment, o kindengine.ManifestOptions) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, oo := range withAndWithoutStore(o) {
		objs = append(objs, render(t, d, oo)...)
	}
	return objs
}

// reachability evaluates the rendered NetworkPolicies for every (from, to, port) and
// compares with what the policy allows.
// With the store group rendered, its hosts are sources and targets too.
func checkReachability(t *testing.T, objs []runtime.Object, pol topology.Policy) {
	t.Helper()
	cluster, pods := k8s.ClusterOf(objs)
	// The run's gateways: every gateway host the rendered pods have.
	var gateways []string
	for _, g := range topology.GatewayNames(topology.MaxGateways) {
		if _, ok := pods[g]; ok {
			gateways = append(gateways, g)
		}
	}
	targets := topology.ComponentHosts(gateways)
	if _, ok := pods[topology.HostStore1]; ok {
		targets = append(targets, topology.StoreHosts...)
	}
	from := append(slices.Clone(targets), topology.HostObserver)
	portList := []int{ports.GatewayData, ports.GatewayAdmin, ports.ProviderData, ports.ProviderAdmin, ports.Valkey, topology.SentinelPort, 22, 8081}
	checked := 0
	for _, f := range from {
		fp, ok := pods[f]
		if !ok {
			t.Fatalf("no pod renders host %s", f)
		}
		for _, to := range targets {
			tp, ok := pods[to]
			if !ok {
				t.Fatalf("no pod renders host %s", to)
			}
			for _, port := range portList {
				got, err := cluster.Evaluate(fp, tp, port)
				if err != nil {
					t.Fatal(err)
				}
				if want := pol.Allows(f, to, port); got != want {
					t.Errorf("%s → %s:%d: NetworkPolicies allow=%v, policy allows=%v", f, to, port, got, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d (from, to, port) triples agree", checked)
}

func TestNetworkPoliciesGiveExactlyThePolicysReachability(t *testing.T) {
	pol := topology.DefaultPolicy(ports, topology.GatewayNames(2))
	checkReachability(t, render(t, testDeployment(t), kindengine.ManifestOptions{}), pol)

	// A second client pod (e.g. an ad-hoc negative probe pod with role=client) is the client.
	objs := render(t, testDeployment(t), kindengine.ManifestOptions{})
	cluster, pods := k8s.ClusterOf(objs)
	extra := pods[topology.HostClient]
	extra.Name = "client-2"
	if ok, _ := cluster.Evaluate(extra, pods[topology.HostGatewayA], ports.GatewayData); !ok {
		t.Error("a second role=client pod cannot reach the gateway's data port")
	}
	if ok, _ := cluster.Evaluate(extra, pods[topology.HostValkey], ports.Valkey); ok {
		t.Error("a second role=client pod reaches valkey")
	}
	// A pod of another namespace with the gateway's labels is not a gateway.
	foreign := pods[topology.HostGatewayA]
	foreign.Namespace = "elsewhere"
	if ok, _ := cluster.Evaluate(foreign, pods[topology.HostValkey], ports.Valkey); ok {
		t.Error("a pod of another namespace reaches valkey")
	}
}

// TestManifestsScaleToTheRunsGateways renders five gateways: a Deployment, a Service, a
// config and the policy rules for each, and NetworkPolicies whose reachability is exactly the
// policy's for all five (gateway-e reaches valkey and the providers, the client reaches its
// data port only, the observer its admin port).
func TestManifestsScaleToTheRunsGateways(t *testing.T) {
	gateways := topology.GatewayNames(5)
	in, err := kindengine.Input(testDeployment(t), kindengine.ManifestOptions{RunID: goldenRunID, Gateways: 5})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, g := range in.Gateways {
		hosts = append(hosts, g.Host)
		if !strings.Contains(string(g.Config), "8080") {
			t.Errorf("%s's config does not listen on the data port:\n%s", g.Host, g.Config)
		}
	}
	if !slices.Equal(hosts, gateways) {
		t.Errorf("gateway configs for %v, want %v", hosts, gateways)
	}
	objs := render(t, testDeployment(t), kindengine.ManifestOptions{Gateways: 5})
	kinds := map[string]int{}
	names := map[string]bool{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		kinds[kind]++
		if m, ok := o.(interface{ GetName() string }); ok {
			names[kind+"/"+m.GetName()] = true
		}
	}
	if kinds["Deployment"] != 8+3 || kinds["Service"] != 6+3 {
		t.Errorf("%d Deployments and %d Services, want %d and %d (three gateways more than two)", kinds["Deployment"], kinds["Service"], 11, 9)
	}
	for _, g := range gateways {
		for _, k := range []string{"Deployment", "Service"} {
			if !names[k+"/"+g] {
				t.Errorf("no %s %s", k, g)
			}
		}
	}
	checkReachability(t, objs, topology.DefaultPolicy(ports, gateways))

	for _, n := range []int{1, 17} {
		if _, err := kindengine.Input(testDeployment(t), kindengine.ManifestOptions{RunID: goldenRunID, Gateways: n}); err == nil || !strings.Contains(err.Error(), "--gateways") {
			t.Errorf("%d gateways: error %v, want one naming --gateways", n, err)
		}
	}
}

func TestWithoutTheValkeyRuleGatewaysCannotReachValkey(t *testing.T) {
	full := topology.DefaultPolicy(ports, topology.GatewayNames(2))
	var pol topology.Policy
	for _, r := range full.Rules {
		if r.Host != topology.HostValkey {
			pol.Rules = append(pol.Rules, r)
		}
	}
	objs := render(t, testDeployment(t), kindengine.ManifestOptions{Policy: &pol})
	checkReachability(t, objs, pol)
	cluster, pods := k8s.ClusterOf(objs)
	for _, g := range topology.GatewayNames(2) {
		if ok, _ := cluster.Evaluate(pods[g], pods[topology.HostValkey], ports.Valkey); ok {
			t.Errorf("%s reaches valkey without the valkey rule", g)
		}
	}
}

// The kind engine partitions by rendering the policy without the pair's allowances.
func TestPartitionedPolicyCutsOnlyThePair(t *testing.T) {
	pol := kindengine.PartitionedPolicy(topology.DefaultPolicy(ports, topology.GatewayNames(2)), [][2]string{{topology.HostValkey, topology.HostGatewayA}})
	if pol.Allows(topology.HostGatewayA, topology.HostValkey, ports.Valkey) || !pol.Allows(topology.HostGatewayB, topology.HostValkey, ports.Valkey) {
		t.Fatal("partitioned policy must deny gateway-a → valkey and keep gateway-b → valkey")
	}
	checkReachability(t, render(t, testDeployment(t), kindengine.ManifestOptions{Policy: &pol}), pol)
}

// The evaluator itself, on hand-made policies: isolation, ports, named ports, endPort,
// namespace selectors, egress-only policies.
func TestEvaluatorSemantics(t *testing.T) {
	a := k8s.Pod{Name: "a", Namespace: "ns1", Labels: map[string]string{"app": "a"}}
	b := k8s.Pod{Name: "b", Namespace: "ns1", Labels: map[string]string{"app": "b"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}
	other := k8s.Pod{Name: "c", Namespace: "ns2", Labels: map[string]string{"app": "a"}}
	mustYAML := func(s string) networkingv1.NetworkPolicy {
		var np networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(s), &np); err != nil {
			t.Fatal(err)
		}
		return np
	}
	cases := []struct {
		name   string
		pols   []string
		from   k8s.Pod
		port   int
		allows bool
	}{
		{"no policy: not isolated", nil, a, 80, true},
		{"egress-only policy does not isolate for ingress", []string{`{metadata: {name: e, namespace: ns1}, spec: {podSelector: {}, policyTypes: [Egress]}}`}, a, 80, true},
		{"default deny", []string{`{metadata: {name: d, namespace: ns1}, spec: {podSelector: {}, policyTypes: [Ingress]}}`}, a, 80, false},
		{"policy in another namespace does not isolate", []string{`{metadata: {name: d, namespace: ns2}, spec: {podSelector: {}}}`}, a, 80, true},
		{"allow by label and number", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {matchLabels: {app: b}}, ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 80}]}]}}`}, a, 80, true},
		{"wrong port", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {matchLabels: {app: b}}, ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: 81}]}]}}`}, a, 80, false},
		{"named port", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{ports: [{port: http}]}]}}`}, a, 80, true},
		{"port range", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{ports: [{port: 70, endPort: 90}]}]}}`}, a, 80, true},
		{"UDP only", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{ports: [{port: 80, protocol: UDP}]}]}}`}, a, 80, false},
		{"podSelector peer is same-namespace only", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{from: [{podSelector: {matchLabels: {app: a}}}]}]}}`}, other, 80, false},
		{"namespaceSelector peer", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {team: ns2}}}]}]}}`}, other, 80, true},
		{"matchExpressions", []string{`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {matchExpressions: [{key: app, operator: In, values: [b]}]}, ingress: [{from: [{podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [a]}]}}]}]}}`}, a, 80, false},
		{"union of policies", []string{
			`{metadata: {name: d, namespace: ns1}, spec: {podSelector: {}, policyTypes: [Ingress]}}`,
			`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {matchLabels: {app: b}}, ingress: [{from: [{podSelector: {}}]}]}}`}, a, 80, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := k8s.Cluster{Namespace: map[string]map[string]string{"ns1": {"team": "ns1"}, "ns2": {"team": "ns2"}}}
			for _, p := range c.pols {
				cl.Policies = append(cl.Policies, mustYAML(p))
			}
			got, err := cl.Evaluate(c.from, b, c.port)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.allows {
				t.Errorf("allowed=%v, want %v", got, c.allows)
			}
		})
	}
	if _, err := (k8s.Cluster{Policies: []networkingv1.NetworkPolicy{mustYAML(`{metadata: {name: p, namespace: ns1}, spec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`)}}).Evaluate(a, b, 80); err == nil {
		t.Error("ipBlock peers must be an error, not a guess")
	}
}

// The store group's NetworkPolicies give exactly the reachability of the policy every engine
// runs the group under (DefaultPolicy plus the group's rules), on every triple of every host.
func TestKindStoreGroupNetworkPoliciesGiveExactlyThePolicysReachability(t *testing.T) {
	pol := topology.WithStorePolicy(topology.DefaultPolicy(ports, topology.GatewayNames(2)), ports.Valkey, topology.GatewayNames(2))
	objs := render(t, testDeployment(t), kindengine.ManifestOptions{StoreGroup: true})
	checkReachability(t, objs, pol)
	cluster, pods := k8s.ClusterOf(objs)
	for _, h := range topology.StoreHosts {
		if _, ok := pods[h]; !ok {
			t.Fatalf("no pod renders %s", h)
		}
	}
	// Spot checks the policy must have, in case both sides were wrong the same way.
	for _, c := range []struct {
		from, to string
		port     int
		want     bool
	}{
		{topology.HostStore2, topology.HostStore1, ports.Valkey, true},    // replication
		{topology.HostSentinel1, topology.HostStore3, ports.Valkey, true}, // Sentinel asks a node
		{topology.HostSentinel1, topology.HostSentinel2, topology.SentinelPort, true},
		{topology.HostGatewayA, topology.HostSentinel3, topology.SentinelPort, true},
		{topology.HostClient, topology.HostStore1, ports.Valkey, false},
		{topology.HostProviderWest, topology.HostSentinel1, topology.SentinelPort, false},
		{topology.HostStore1, topology.HostSentinel1, topology.SentinelPort, false},
		{topology.HostStore1, topology.HostValkey, ports.Valkey, false},
	} {
		got, err := cluster.Evaluate(pods[c.from], pods[c.to], c.port)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s → %s:%d allowed=%v, want %v", c.from, c.to, c.port, got, c.want)
		}
	}
	// A partition of a store node from a Sentinel is rendered and cuts only that pair.
	cut := kindengine.PartitionedPolicy(pol, [][2]string{{topology.HostStore1, topology.HostSentinel1}})
	if cut.Allows(topology.HostSentinel1, topology.HostStore1, ports.Valkey) || !cut.Allows(topology.HostSentinel2, topology.HostStore1, ports.Valkey) {
		t.Fatal("partitioned policy must deny sentinel-1 → valkey-1 and keep sentinel-2 → valkey-1")
	}
	checkReachability(t, render(t, testDeployment(t), kindengine.ManifestOptions{StoreGroup: true, Policy: &cut}), cut)
}

// The group's configs: valkey-1 primary, valkey-2/3 its replicas by Service name, the Sentinels
// monitoring valkey-1 with quorum 2, down-after 1000 ms and failover-timeout 3000 ms; every
// password only in the store-auth Secret, included from there; each pod mounts what it uses.
func TestKindStoreGroupConfigs(t *testing.T) {
	d := testDeployment(t)
	objs := render(t, d, kindengine.ManifestOptions{StoreGroup: true})
	var cm *corev1.ConfigMap
	var sec *corev1.Secret
	deps := map[string]*appsv1.Deployment{}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.ConfigMap:
			if x.Name == k8s.ConfigMapStore {
				cm = x
			}
		case *corev1.Secret:
			if x.Name == k8s.SecretStore {
				sec = x
			}
		case *appsv1.Deployment:
			deps[x.Name] = x
		}
	}
	if cm == nil || sec == nil {
		t.Fatal("no store-config ConfigMap or store-auth Secret")
	}
	primary := "valkey-1.quotaqual-" + goldenRunID + ".svc.cluster.local"
	sent := cm.Data[k8s.SentinelConfKey]
	for _, want := range []string{"port 26379\n", "sentinel resolve-hostnames yes\n",
		"sentinel monitor quotaqual " + primary + " 6379 2\n",
		"sentinel down-after-milliseconds quotaqual 1000\n", "sentinel failover-timeout quotaqual 3000\n"} {
		if !strings.Contains(sent, want) {
			t.Errorf("sentinel.conf lacks %q:\n%s", want, sent)
		}
	}
	for i, n := range topology.StoreNodes {
		conf := cm.Data[n+".conf"]
		if !strings.Contains(conf, "include "+k8s.ValkeyAuthDir+"/"+k8s.StoreAuthKey+"\n") || !strings.Contains(conf, "port 6379\n") {
			t.Errorf("%s.conf does not listen on 6379 or include the auth file:\n%s", n, conf)
		}
		if isReplica := strings.Contains(conf, "replicaof "+primary+" 6379\n"); isReplica != (i > 0) {
			t.Errorf("%s.conf: replicaof of valkey-1 is %v, want %v:\n%s", n, isReplica, i > 0, conf)
		}
	}
	if strings.Contains(strings.Join(slices.Collect(func(yield func(string) bool) {
		for _, v := range cm.Data {
			yield(v)
		}
	}), ""), "requirepass") || strings.Contains(sent, "auth-pass") {
		t.Error("a password directive is in the ConfigMap")
	}
	pw := strconv.Quote(d.ValkeyPassword)
	if sec.StringData[k8s.StoreAuthKey] != "requirepass "+pw+"\nmasterauth "+pw+"\n" ||
		sec.StringData[k8s.SentinelAuthKey] != "sentinel auth-pass quotaqual "+pw+"\n" {
		t.Errorf("store-auth does not carry the run's password as requirepass, masterauth and auth-pass")
	}
	for _, h := range topology.StoreHosts {
		dep := deps[h]
		if dep == nil {
			t.Fatalf("no Deployment %s", h)
		}
		c := dep.Spec.Template.Spec.Containers[0]
		cmd := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
		wantConf, wantAuth, wantPort := h+".conf", k8s.StoreAuthKey, 6379
		confFrom := cmd // the command that reads the ConfigMap's file
		if slices.Contains(topology.StoreSentinels, h) {
			wantConf, wantAuth, wantPort = k8s.SentinelConfKey, k8s.SentinelAuthKey, topology.SentinelPort
			// A Sentinel runs from a writable copy its init container joins from the ConfigMap's
			// file and the Secret's auth-pass, with the quotaqual image (the images have no shell).
			writable := k8s.ValkeyDataDir + "/" + k8s.SentinelConfKey
			if !strings.Contains(cmd, "--sentinel") || !strings.Contains(cmd, "valkey-server "+writable) {
				t.Errorf("%s does not run as a Sentinel from %s: %s", h, writable, cmd)
			}
			inits := dep.Spec.Template.Spec.InitContainers
			if len(inits) != 1 || len(inits[0].Command) != 0 {
				t.Fatalf("%s: want one init container that joins the config, got %+v", h, inits)
			}
			confFrom = strings.Join(inits[0].Args, " ")
			want := "concat --out " + writable + " " + k8s.StoreConfigDir + "/" + wantConf + " " + k8s.ValkeyAuthDir + "/" + wantAuth
			if confFrom != want {
				t.Errorf("%s's init container runs %q, want %q", h, confFrom, want)
			}
		}
		if !strings.Contains(confFrom, k8s.StoreConfigDir+"/"+wantConf) {
			t.Errorf("%s does not run its config %s: %s", h, wantConf, confFrom)
		}
		if len(c.Ports) != 1 || int(c.Ports[0].ContainerPort) != wantPort {
			t.Errorf("%s listens on %v, want %d", h, c.Ports, wantPort)
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			switch {
			case v.Secret != nil:
				if v.Secret.SecretName != k8s.SecretStore || len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != wantAuth {
					t.Errorf("%s mounts %+v, want only %s of %s", h, v.Secret, wantAuth, k8s.SecretStore)
				}
			case v.ConfigMap != nil:
				if len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != wantConf {
					t.Errorf("%s mounts %+v of the ConfigMap, want only %s", h, v.ConfigMap.Items, wantConf)
				}
			}
		}
	}
}
