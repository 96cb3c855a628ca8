package topology

// KindOptions are the kind engine's choices (Spec.Kind).
type KindOptions struct {
	// NodeImage is the kind node image ("" = QUOTAQUAL_KIND_NODE_IMAGE, else kind's default).
	NodeImage string
	// ClusterName names the cluster to create ("" = qq-<run id>).
	ClusterName string
	// Kubeconfig and Context select an existing cluster instead of creating one; the run then
	// only creates (and Down only deletes) its namespace there. When the context is a kind
	// cluster's (kind-<name>), the images are loaded into its nodes; otherwise the cluster
	// must be able to pull Spec.QuotaqualImage and Spec.ValkeyImage itself.
	Kubeconfig string
	Context    string
	// Keep leaves the cluster (or namespace) in place on Down.
	Keep bool
	// StorageClass of Valkey's PVC ("" = the cluster's default); EmptyDir uses no PVC (then
	// Valkey's state does not survive StopValkey).
	StorageClass string
	EmptyDir     bool
}
