// Package v1alpha1 holds ClusterSetPolicy (group policy.plexus.dev, version
// v1alpha1): which member clusters may export the services of which
// namespaces to the clusterset, and which member clusters import them.
//
// The policy is one cluster-scoped object named "clusterset", applied alike
// to every member cluster, the way the clusterset's ClusterProperty is:
// membership reads the copy in its cluster to refuse an export there, the
// importer reads the copy in its cluster to decide what it imports. The
// rules themselves are checked by package internal/exportpolicy, which
// both services use.
//
// +kubebuilder:object:generate=true
// +groupName=policy.plexus.dev
package v1alpha1
