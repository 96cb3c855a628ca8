// Package k8s renders the kind topology's Kubernetes manifests from typed API values
// (k8s.io/api), never from text templates, and evaluates NetworkPolicies offline.
//
// What Render produces, in apply order:
//
//	Namespace        quotaqual-<run>, labelled with the run id, managed-by quotaqual and
//	                 pod-security enforce=restricted (every pod below is restricted)
//	Secret           valkey-auth: password, url (redis://:pw@valkey.<ns>.svc.<domain>:6379)
//	                 and auth.conf ("requirepass <pw>", the only secret line of Valkey's config)
//	Secret           gateway-credentials: the run's secret variables (topology.GatewaySecretEnv:
//	                 the Valkey URL, every Basic-auth password under the variable names the
//	                 gateway config references, the Valkey password alone); a gateway profile's
//	                 own variables copy them by Secret reference
//	ConfigMap        <gateway>-config per gateway: the gateway profile's config (undertest; no
//	                 secret) under its file name, mounted in /etc/quotaqual
//	PVC              valkey-data (default storage class) so the append-only file survives the
//	                 pod being deleted (scale to 0 and back); an emptyDir would not
//	NetworkPolicy    default-deny-ingress, then one allow-<rule> per rule of the policy
//	Service          one per component host (same port numbers as the containers)
//	Deployment       valkey, the providers, the gateways, and the client and observer probe
//	                 pods (the quotaqual image idling, for `quotaqual probe` by exec)
//
// With Input.Store (the replicated store group), also: a Secret store-auth (the data nodes'
// requirepass/masterauth and the Sentinels' auth-pass, as config files to include), a ConfigMap
// store-config (each data node's config, replicaof for all but the first, and the Sentinels'
// monitor lines; no secret), and a Service and Deployment per data node and Sentinel. The
// NetworkPolicies of the store hosts come from the same Rules as every other host.
//
// The package knows hosts only by name and role; package topology maps its engine-neutral
// Policy to Rules and supplies the rendered gateway configs and provider arguments.
package k8s

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Label keys and values on every object.
const (
	LabelRunID       = "org.quotaqual/run-id"
	LabelHost        = "org.quotaqual/host"
	LabelRole        = "role"
	LabelSite        = "site"
	LabelQuotaClient = "quotaqual.io/quota-client"
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	LabelName        = "app.kubernetes.io/name"
	LabelComponent   = "app.kubernetes.io/component"
	ManagedBy        = "quotaqual"

	// AnnotationRule names the policy rule a NetworkPolicy was rendered from.
	AnnotationRule = "quotaqual.io/policy-rule"
	// AnnotationRestartedAt is what a rollout restart patches (kubectl uses the same key).
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
)

// Roles of the pods.
const (
	RoleGateway  = "gateway"
	RoleProvider = "provider"
	RoleValkey   = "valkey"
	RoleClient   = "client"
	RoleObserver = "observer"
	RoleStore    = "store-node" // a data node of the replicated store group
	RoleSentinel = "sentinel"   // a Sentinel of the replicated store group
)

// Fixed names inside the namespace.
const (
	SecretValkey         = "valkey-auth"
	SecretGateway        = "gateway-credentials"
	PVCValkey            = "valkey-data"
	PolicyDefaultDeny    = "default-deny-ingress"
	GatewayConfigDir     = "/etc/quotaqual"
	ValkeyAuthKey        = "auth.conf"
	ValkeyAuthDir        = "/etc/valkey"
	ValkeyDataDir        = "/data"
	SecretStore          = "store-auth"
	ConfigMapStore       = "store-config"
	StoreAuthKey         = "auth.conf"          // in SecretStore: requirepass and masterauth
	SentinelAuthKey      = "sentinel-auth.conf" // in SecretStore: sentinel auth-pass
	SentinelConfKey      = "sentinel.conf"      // in ConfigMapStore; <node>.conf per data node
	StoreConfigDir       = "/etc/valkey-store"
	QuotaqualInContainer = "/quotaqual"
	// Placeholder stands for every secret value when Input.Placeholders is set.
	Placeholder = "REPLACE-generated-per-run"
)

// Storage kinds of Valkey's data volume.
const (
	StoragePVC      = "pvc"
	StorageEmptyDir = "emptyDir"
)

// Ports are the container (and Service) ports by role.
type Ports struct {
	GatewayData, GatewayAdmin, ProviderData, ProviderAdmin, Valkey int
}

// Gateway is one gateway host as its profile launches it (package topology's
// ContainerGatewayFor): its rendered config, image, command, environment and probes. The
// renderer adds nothing of its own but the config's mount and the Secret of the run's
// variables.
type Gateway struct {
	Host   string
	Config []byte
	// ConfigFile is the config's file name: its key in the <host>-config ConfigMap, mounted
	// in GatewayConfigDir.
	ConfigFile string
	// Image is the gateway's own image; "" means QuotaqualImage.
	Image string
	// Command, when set, replaces the image's entrypoint; Args are the container's arguments.
	Command, Args []string
	// Env are the profile's own variables, beside the SecretGateway variables every gateway
	// gets whole: each a plain Value, or a copy of one of those variables (SecretKey), which
	// stays a reference to the Secret so no secret value is written outside it.
	Env []EnvVar
	// Ready is the readiness probe; Live, when set, the liveness probe.
	Ready Probe
	Live  *Probe
}

// EnvVar is one environment variable of a gateway: Value, or SecretKey of SecretGateway. A
// Value may use Kubernetes' $(NAME) to embed one of the Secret's variables.
type EnvVar struct {
	Name, Value, SecretKey string
}

// Probe is an HTTP GET of Path on the container port named Port (data or admin).
type Probe struct {
	Port, Path string
}

// Provider is one provider host, its site and its `quotaqual provider` arguments.
type Provider struct {
	Host, Site string
	Args       []string
}

// Rule allows TCP to Host:Port from each host in From (topology.PolicyRule).
type Rule struct {
	Name string
	Host string
	Port int
	From []string
}

// StoreGroup is the replicated store group (package topology's store.go): data nodes, the
// first the primary at the start and the others its replicas, and Sentinels monitoring it.
// Its data nodes listen on Ports.Valkey.
type StoreGroup struct {
	Nodes, Sentinels []string
	MasterName       string
	SentinelPort     int
	// Monitor are the Sentinels' monitor lines (sentinel monitor, down-after-milliseconds,
	// failover-timeout, ...) without the password: Render adds auth-pass from the Secret.
	Monitor string
}

// Input is everything Render needs.
type Input struct {
	RunID         string
	Namespace     string // default "quotaqual-" + RunID
	ClusterDomain string // default "cluster.local"

	QuotaqualImage string
	ValkeyImage    string
	PullPolicy     corev1.PullPolicy // default IfNotPresent (images loaded into the nodes)
	QuotaqualUID   int64             // default 65532 (the image's USER)
	ValkeyUID      int64             // default 10001

	Ports      Ports
	ValkeyHost string // default "valkey"
	ClientHost string // default "client": role=client probe pods
	Observer   string // default "observer": role=observer probe pod (the harness's vantage)
	Gateways   []Gateway
	Providers  []Provider
	Rules      []Rule

	ValkeyPassword string
	GatewayEnv     []string // NAME=value, deployment.Deployment.GatewayEnv(ValkeyAddr())
	// Placeholders replaces every secret value by Placeholder (for review: `quotaqual render`).
	Placeholders bool

	// Store is the replicated store group, or nil when the deployment does not run it.
	Store *StoreGroup

	ValkeyStorage      string // StoragePVC (default) or StorageEmptyDir
	ValkeyStorageClass string // "" = the cluster's default class
	ValkeyStorageSize  string // default 256Mi
}

func (in *Input) defaults() {
	if in.Namespace == "" {
		in.Namespace = "quotaqual-" + in.RunID
	}
	if in.ClusterDomain == "" {
		in.ClusterDomain = "cluster.local"
	}
	if in.PullPolicy == "" {
		in.PullPolicy = corev1.PullIfNotPresent
	}
	if in.QuotaqualUID == 0 {
		in.QuotaqualUID = 65532
	}
	if in.ValkeyUID == 0 {
		in.ValkeyUID = 10001
	}
	if in.ValkeyHost == "" {
		in.ValkeyHost = "valkey"
	}
	if in.ClientHost == "" {
		in.ClientHost = "client"
	}
	if in.Observer == "" {
		in.Observer = "observer"
	}
	if in.ValkeyStorage == "" {
		in.ValkeyStorage = StoragePVC
	}
	if in.ValkeyStorageSize == "" {
		in.ValkeyStorageSize = "256Mi"
	}
}

// Defaulted returns in with its defaults filled in.
func (in Input) Defaulted() Input {
	in.defaults()
	return in
}

// ServiceHost is the DNS name of host's Service, e.g. valkey.quotaqual-r1.svc.cluster.local.
func (in Input) ServiceHost(host string) string {
	in.defaults()
	return host + "." + in.Namespace + ".svc." + in.ClusterDomain
}

// ServiceAddr is host:port of host's Service.
func (in Input) ServiceAddr(host string, port int) string {
	return net.JoinHostPort(in.ServiceHost(host), strconv.Itoa(port))
}

// Role returns the role of host, or "" when the input does not know it.
func (in Input) Role(host string) string {
	in.defaults()
	switch {
	case host == in.ValkeyHost:
		return RoleValkey
	case host == in.ClientHost:
		return RoleClient
	case host == in.Observer:
		return RoleObserver
	case slices.ContainsFunc(in.Gateways, func(g Gateway) bool { return g.Host == host }):
		return RoleGateway
	case slices.ContainsFunc(in.Providers, func(p Provider) bool { return p.Host == host }):
		return RoleProvider
	case in.Store != nil && slices.Contains(in.Store.Nodes, host):
		return RoleStore
	case in.Store != nil && slices.Contains(in.Store.Sentinels, host):
		return RoleSentinel
	}
	return ""
}

// Selector is the pod selector of host in NetworkPolicies: the vantage points client and
// observer by role (any pod of that role is that vantage), every component by its host label.
func (in Input) Selector(host string) map[string]string {
	switch r := in.Role(host); r {
	case RoleClient, RoleObserver:
		return map[string]string{LabelRole: r}
	case "":
		return nil
	}
	return map[string]string{LabelHost: host}
}

// PodLabels are the labels of host's pods.
func (in Input) PodLabels(host string) map[string]string {
	in.defaults()
	role := in.Role(host)
	l := map[string]string{
		LabelName:      "quotaqual",
		LabelComponent: role,
		LabelManagedBy: ManagedBy,
		LabelRunID:     in.RunID,
		LabelHost:      host,
		LabelRole:      role,
	}
	switch role {
	case RoleGateway:
		l[LabelQuotaClient] = "true"
	case RoleProvider:
		for _, p := range in.Providers {
			if p.Host == host {
				l[LabelSite] = p.Site
			}
		}
	}
	return l
}

func (in Input) meta(name string, labels map[string]string) metav1.ObjectMeta {
	if labels == nil {
		labels = map[string]string{LabelName: "quotaqual", LabelManagedBy: ManagedBy, LabelRunID: in.RunID}
	}
	return metav1.ObjectMeta{Name: name, Namespace: in.Namespace, Labels: labels}
}

func (in Input) validate() error {
	var errs []error
	if len(validation.IsDNS1123Label(in.Namespace)) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q is not a DNS label: use a run id of a-z, 0-9 and '-'", in.Namespace))
	}
	if len(validation.IsValidLabelValue(in.RunID)) > 0 || in.RunID == "" {
		errs = append(errs, fmt.Errorf("run id %q is not a valid label value", in.RunID))
	}
	if in.QuotaqualImage == "" || in.ValkeyImage == "" {
		errs = append(errs, errors.New("both images are required: QuotaqualImage and ValkeyImage"))
	}
	if len(in.Gateways) == 0 || len(in.Providers) == 0 {
		errs = append(errs, errors.New("at least one gateway and one provider are required"))
	}
	for _, g := range in.Gateways {
		if g.ConfigFile == "" || strings.ContainsAny(g.ConfigFile, "/\\") || len(validation.IsConfigMapKey(g.ConfigFile)) > 0 {
			errs = append(errs, fmt.Errorf("gateway %s: config file %q is not a plain file name usable as a ConfigMap key", g.Host, g.ConfigFile))
		}
		if len(g.Args) == 0 && len(g.Command) == 0 {
			errs = append(errs, fmt.Errorf("gateway %s: no command: give its arguments (Args) and, in an image of its own, its Command", g.Host))
		}
		probes := []Probe{g.Ready}
		if g.Live != nil {
			probes = append(probes, *g.Live)
		}
		for _, p := range probes {
			if (p.Port != "data" && p.Port != "admin") || !strings.HasPrefix(p.Path, "/") {
				errs = append(errs, fmt.Errorf("gateway %s: probe %s %q: the port must be data or admin and the path absolute", g.Host, p.Port, p.Path))
			}
		}
		for _, e := range g.Env {
			if len(validation.IsEnvVarName(e.Name)) > 0 || (e.SecretKey != "" && e.Value != "") {
				errs = append(errs, fmt.Errorf("gateway %s: environment variable %q: a valid name with a Value or a SecretKey, not both", g.Host, e.Name))
			}
		}
	}
	hosts := map[string]bool{}
	for _, h := range in.hosts() {
		if len(validation.IsDNS1123Label(h)) > 0 {
			errs = append(errs, fmt.Errorf("host %q is not a DNS label: it names a Service", h))
		}
		if hosts[h] {
			errs = append(errs, fmt.Errorf("host %q is listed twice", h))
		}
		hosts[h] = true
	}
	for _, p := range []int{in.Ports.GatewayData, in.Ports.GatewayAdmin, in.Ports.ProviderData, in.Ports.ProviderAdmin, in.Ports.Valkey} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("port %d is out of range: set every port of Input.Ports", p))
		}
	}
	for _, r := range in.Rules {
		if in.Role(r.Host) == "" || in.Role(r.Host) == RoleClient || in.Role(r.Host) == RoleObserver {
			errs = append(errs, fmt.Errorf("policy rule %q targets %q, which is no component here", r.Name, r.Host))
		}
		for _, f := range r.From {
			if in.Role(f) == "" {
				errs = append(errs, fmt.Errorf("policy rule %q allows %q, which is no host here", r.Name, f))
			}
		}
		if len(validation.IsDNS1123Subdomain("allow-"+r.Name)) > 0 {
			errs = append(errs, fmt.Errorf("policy rule name %q does not make a valid object name", r.Name))
		}
	}
	if st := in.Store; st != nil {
		if len(st.Nodes) == 0 || len(st.Sentinels) == 0 {
			errs = append(errs, errors.New("the store group needs at least one data node and one Sentinel"))
		}
		if st.SentinelPort < 1 || st.SentinelPort > 65535 {
			errs = append(errs, fmt.Errorf("sentinel port %d is out of range: set StoreGroup.SentinelPort", st.SentinelPort))
		}
		if st.MasterName == "" || strings.ContainsAny(st.MasterName, " \t\n\"") || st.Monitor == "" {
			errs = append(errs, errors.New("the store group needs a master name (one word) and the Sentinels' monitor lines"))
		}
	}
	switch in.ValkeyStorage {
	case StoragePVC, StorageEmptyDir:
	default:
		errs = append(errs, fmt.Errorf("valkey storage %q is unknown: use %q or %q", in.ValkeyStorage, StoragePVC, StorageEmptyDir))
	}
	if _, err := resource.ParseQuantity(in.ValkeyStorageSize); err != nil {
		errs = append(errs, fmt.Errorf("valkey storage size %q: %w", in.ValkeyStorageSize, err))
	}
	return errors.Join(errs...)
}

// hosts lists every host that gets a Deployment: valkey, providers, gateways, client, observer.
func (in Input) hosts() []string {
	out := []string{in.ValkeyHost}
	for _, p := range in.Providers {
		out = append(out, p.Host)
	}
	for _, g := range in.Gateways {
		out = append(out, g.Host)
	}
	out = append(out, in.ClientHost, in.Observer)
	if in.Store != nil {
		out = append(append(out, in.Store.Nodes...), in.Store.Sentinels...)
	}
	return out
}

// storeNodeConf is a data node's config: every node may replicate another after a failover,
// hence masterauth (in the included Secret file) everywhere; all but the first start as
// replicas of the first.
func (in Input) storeNodeConf(i int) string {
	lines := []string{
		"port " + strconv.Itoa(in.Ports.Valkey), "bind * -::*", "protected-mode no", "dir " + ValkeyDataDir,
		`save ""`, "appendonly yes", "loglevel notice",
		// A full sync otherwise waits 5 s for more replicas to share one transfer.
		"repl-diskless-sync-delay 0",
		"include " + ValkeyAuthDir + "/" + StoreAuthKey,
	}
	if i > 0 {
		lines = append(lines, "replicaof "+in.ServiceHost(in.Store.Nodes[0])+" "+strconv.Itoa(in.Ports.Valkey))
	}
	return strings.Join(lines, "\n") + "\n"
}

// sentinelConf is the Sentinels' config without the password: the monitor names the primary by
// its Service name, so hostnames must resolve.
func (in Input) sentinelConf() string {
	return strings.Join([]string{"port " + strconv.Itoa(in.Store.SentinelPort), "bind * -::*", "protected-mode no",
		"dir " + ValkeyDataDir, "loglevel notice", "sentinel resolve-hostnames yes"}, "\n") + "\n" + in.Store.Monitor
}

// Render returns the manifests in apply order (see the package comment).
func Render(in Input) ([]runtime.Object, error) {
	in.defaults()
	if err := in.validate(); err != nil {
		return nil, fmt.Errorf("rendering the kind manifests: %w", err)
	}
	secret := func(s string) string {
		if in.Placeholders {
			return Placeholder
		}
		return s
	}
	var objs []runtime.Object

	ns := &corev1.Namespace{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: in.Namespace, Labels: map[string]string{
			LabelName: "quotaqual", LabelManagedBy: ManagedBy, LabelRunID: in.RunID,
			"pod-security.kubernetes.io/enforce": "restricted",
		}},
	}
	objs = append(objs, ns)

	pw := secret(in.ValkeyPassword)
	objs = append(objs, &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: in.meta(SecretValkey, nil),
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{
			"password":    pw,
			"url":         "redis://:" + pw + "@" + in.ServiceAddr(in.ValkeyHost, in.Ports.Valkey),
			ValkeyAuthKey: "requirepass " + pw + "\n",
		},
	})
	genv := map[string]string{}
	for _, kv := range in.GatewayEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || len(validation.IsEnvVarName(k)) > 0 {
			return nil, fmt.Errorf("rendering the kind manifests: gateway environment entry %q is not NAME=value", redactKV(kv))
		}
		genv[k] = secret(v)
	}
	objs = append(objs, &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: in.meta(SecretGateway, nil),
		Type:       corev1.SecretTypeOpaque,
		StringData: genv,
	})
	for _, g := range in.Gateways {
		objs = append(objs, &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: in.meta(g.Host+"-config", in.PodLabels(g.Host)),
			Data:       map[string]string{g.ConfigFile: string(g.Config)},
		})
	}
	if st := in.Store; st != nil {
		objs = append(objs, &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: in.meta(SecretStore, nil),
			Type:       corev1.SecretTypeOpaque,
			StringData: map[string]string{
				StoreAuthKey:    "requirepass " + strconv.Quote(pw) + "\nmasterauth " + strconv.Quote(pw) + "\n",
				SentinelAuthKey: "sentinel auth-pass " + st.MasterName + " " + strconv.Quote(pw) + "\n",
			},
		})
		data := map[string]string{SentinelConfKey: in.sentinelConf()}
		for i, n := range st.Nodes {
			data[n+".conf"] = in.storeNodeConf(i)
		}
		objs = append(objs, &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: in.meta(ConfigMapStore, nil),
			Data:       data,
		})
	}
	if in.ValkeyStorage == StoragePVC {
		pvc := &corev1.PersistentVolumeClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: in.meta(PVCValkey, in.PodLabels(in.ValkeyHost)),
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse(in.ValkeyStorageSize),
				}},
			},
		}
		if in.ValkeyStorageClass != "" {
			pvc.Spec.StorageClassName = &in.ValkeyStorageClass
		}
		objs = append(objs, pvc)
	}
	for _, np := range in.NetworkPolicies() {
		objs = append(objs, np)
	}
	for _, h := range in.hosts() {
		if svc := in.service(h); svc != nil {
			objs = append(objs, svc)
		}
	}
	for _, h := range in.hosts() {
		objs = append(objs, in.deployment(h))
	}
	return objs, nil
}

// NetworkPolicies renders default-deny-ingress and one allow-<rule> per rule.
func (in Input) NetworkPolicies() []*networkingv1.NetworkPolicy {
	in.defaults()
	tcp := corev1.ProtocolTCP
	out := []*networkingv1.NetworkPolicy{{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: in.meta(PolicyDefaultDeny, nil),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}}
	for _, r := range in.Rules {
		port := intstr.FromInt32(int32(r.Port))
		var peers []networkingv1.NetworkPolicyPeer
		for _, f := range r.From {
			peers = append(peers, networkingv1.NetworkPolicyPeer{
				PodSelector: &metav1.LabelSelector{MatchLabels: in.Selector(f)},
			})
		}
		m := in.meta("allow-"+r.Name, nil)
		m.Annotations = map[string]string{AnnotationRule: fmt.Sprintf("%s: %s:%d from %s", r.Name, r.Host, r.Port, strings.Join(r.From, ", "))}
		out = append(out, &networkingv1.NetworkPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: m,
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: in.Selector(r.Host)},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
					From:  peers,
				}},
			},
		})
	}
	return out
}

// containerPorts are the named ports host's container listens on.
func (in Input) containerPorts(host string) []corev1.ContainerPort {
	p := func(name string, n int) corev1.ContainerPort {
		return corev1.ContainerPort{Name: name, ContainerPort: int32(n), Protocol: corev1.ProtocolTCP}
	}
	switch in.Role(host) {
	case RoleValkey, RoleStore:
		return []corev1.ContainerPort{p("valkey", in.Ports.Valkey)}
	case RoleSentinel:
		return []corev1.ContainerPort{p("sentinel", in.Store.SentinelPort)}
	case RoleGateway:
		return []corev1.ContainerPort{p("data", in.Ports.GatewayData), p("admin", in.Ports.GatewayAdmin)}
	case RoleProvider:
		return []corev1.ContainerPort{p("data", in.Ports.ProviderData), p("admin", in.Ports.ProviderAdmin)}
	}
	return nil
}

func (in Input) service(host string) *corev1.Service {
	cps := in.containerPorts(host)
	if len(cps) == 0 {
		return nil
	}
	var ports []corev1.ServicePort
	for _, cp := range cps {
		ports = append(ports, corev1.ServicePort{Name: cp.Name, Port: cp.ContainerPort, Protocol: corev1.ProtocolTCP,
			TargetPort: intstr.FromString(cp.Name)})
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: in.meta(host, in.PodLabels(host)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{LabelHost: host},
			Ports:    ports,
		},
	}
}

func ptr[T any](v T) *T { return &v }

// restricted is the container security context every container gets (Pod Security
// "restricted": non-root, no privilege escalation, all capabilities dropped, RuntimeDefault
// seccomp) plus a read-only root filesystem.
func restricted(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr(true),
		RunAsUser:                ptr(uid),
		RunAsGroup:               ptr(uid),
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func httpProbe(path, port string, period int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString(port), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds: period, TimeoutSeconds: 2, FailureThreshold: 3,
	}
}

func (in Input) deployment(host string) *appsv1.Deployment {
	role := in.Role(host)
	uid := in.QuotaqualUID
	c := corev1.Container{
		Name:            role,
		Image:           in.QuotaqualImage,
		ImagePullPolicy: in.PullPolicy,
		Ports:           in.containerPorts(host),
		Env:             []corev1.EnvVar{{Name: "QUOTAQUAL_RUN_ID", Value: in.RunID}},
		SecurityContext: restricted(uid),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
	}
	vols := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	var initContainers []corev1.Container
	strategy := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
	grace := int64(5)
	switch role {
	case RoleValkey:
		uid = in.ValkeyUID
		c.Image = in.ValkeyImage
		c.SecurityContext = restricted(uid)
		// The password comes from the Secret as a config file, never on a command line (where
		// `ps` on the node would show it); the rest of the config is on the command line.
		c.Args = []string{"valkey-server", ValkeyAuthDir + "/" + ValkeyAuthKey,
			"--port", strconv.Itoa(in.Ports.Valkey), "--bind", "0.0.0.0", "--protected-mode", "no",
			"--dir", ValkeyDataDir, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("valkey")}},
			PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3,
		}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: "data", MountPath: ValkeyDataDir},
			{Name: "auth", MountPath: ValkeyAuthDir, ReadOnly: true},
		}
		data := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if in.ValkeyStorage == StoragePVC {
			data = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: PVCValkey}}
		}
		vols = []corev1.Volume{
			{Name: "data", VolumeSource: data},
			{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: SecretValkey, DefaultMode: ptr(int32(0o440)),
				Items: []corev1.KeyToPath{{Key: ValkeyAuthKey, Path: ValkeyAuthKey}},
			}}},
		}
		// One writer of the append-only file at a time: the old pod is gone before a new one starts.
		strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		grace = 10
	case RoleStore, RoleSentinel:
		uid = in.ValkeyUID
		c.Image = in.ValkeyImage
		c.SecurityContext = restricted(uid)
		authKey, confKey := StoreAuthKey, host+".conf"
		// The config comes from the ConfigMap and includes the password file from the Secret.
		c.Args = []string{"valkey-server", StoreConfigDir + "/" + confKey}
		port := "valkey"
		if role == RoleSentinel {
			authKey, confKey, port = SentinelAuthKey, SentinelConfKey, "sentinel"
			// A Sentinel rewrites its config file with what it learns, so it runs from a writable
			// copy: the ConfigMap's monitor lines plus the Secret's auth-pass, joined by an init
			// container. The images are FROM scratch (no shell): the quotaqual image joins them.
			c.Args = []string{"valkey-server", ValkeyDataDir + "/" + SentinelConfKey, "--sentinel"}
			initContainers = []corev1.Container{{
				Name:            "sentinel-config",
				Image:           in.QuotaqualImage,
				ImagePullPolicy: in.PullPolicy,
				Args: []string{"concat", "--out", ValkeyDataDir + "/" + SentinelConfKey,
					StoreConfigDir + "/" + SentinelConfKey, ValkeyAuthDir + "/" + SentinelAuthKey},
				SecurityContext: restricted(uid),
			}}
		}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(port)}},
			PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 3,
		}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: "data", MountPath: ValkeyDataDir},
			{Name: "auth", MountPath: ValkeyAuthDir, ReadOnly: true},
			{Name: "config", MountPath: StoreConfigDir, ReadOnly: true},
		}
		for i := range initContainers {
			initContainers[i].VolumeMounts = c.VolumeMounts
		}
		// The group's state lives in its replicas, not in a volume: a node that comes back
		// empty resyncs from the primary.
		vols = []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: SecretStore, DefaultMode: ptr(int32(0o440)),
				Items: []corev1.KeyToPath{{Key: authKey, Path: authKey}},
			}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapStore},
				Items:                []corev1.KeyToPath{{Key: confKey, Path: confKey}},
			}}},
		}
		strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		grace = 10
	case RoleGateway:
		// Everything but the config's mount and the Secret comes from the gateway's profile.
		g := in.gateway(host)
		if g.Image != "" {
			c.Image = g.Image
		}
		c.Command, c.Args = g.Command, g.Args
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: SecretGateway}}}}
		for _, e := range g.Env {
			ev := corev1.EnvVar{Name: e.Name, Value: e.Value}
			if e.SecretKey != "" {
				ev.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: SecretGateway}, Key: e.SecretKey}}
			}
			c.Env = append(c.Env, ev)
		}
		c.ReadinessProbe = httpProbe(g.Ready.Path, g.Ready.Port, 1)
		if g.Live != nil {
			c.LivenessProbe = httpProbe(g.Live.Path, g.Live.Port, 5)
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: GatewayConfigDir, ReadOnly: true})
		vols = append(vols, corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: host + "-config"},
		}}})
		grace = 15 // quotaqual's gateway drains for up to its shutdown_timeout (10s)
	case RoleProvider:
		for _, p := range in.Providers {
			if p.Host == host {
				c.Args = p.Args
			}
		}
		c.ReadinessProbe = httpProbe("/readyz", "admin", 1)
	case RoleClient, RoleObserver:
		// Idles until SIGTERM; probes run in it by exec (`quotaqual probe --to host:port`).
		c.Args = []string{"sleep"}
		grace = 2
	}
	labels := in.PodLabels(host)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: in.meta(host, labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelHost: host}},
			Strategy: strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr(false),
					EnableServiceLinks:            ptr(false),
					TerminationGracePeriodSeconds: &grace,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr(true),
						RunAsUser:      ptr(uid),
						RunAsGroup:     ptr(uid),
						FSGroup:        ptr(uid),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: initContainers,
					Containers:     []corev1.Container{c},
					Volumes:        vols,
				},
			},
		},
	}
}

// gateway is host's entry in Gateways.
func (in Input) gateway(host string) Gateway {
	for _, g := range in.Gateways {
		if g.Host == host {
			return g
		}
	}
	return Gateway{}
}

// redactKV shows the name of a NAME=value entry only.
func redactKV(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k + "=…"
}

// YAML renders objs as one multi-document YAML stream: no status, no creationTimestamp.
func YAML(objs []runtime.Object) ([]byte, error) {
	var b strings.Builder
	for i, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, err
		}
		clean(m)
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}

// clean drops the fields the typed values always marshal empty: the top-level status and
// every metadata's creationTimestamp: null.
func clean(m map[string]any) {
	delete(m, "status")
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if md, ok := x["metadata"].(map[string]any); ok {
				if ts, ok := md["creationTimestamp"]; ok && ts == nil {
					delete(md, "creationTimestamp")
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(m)
}
