// Package kubetest runs a real Kubernetes control plane (etcd and
// kube-apiserver, built by hack/kube-binaries.sh) for integration tests, the
// local demo and end-to-end tests.
//
// Tests call StartEtcd, StartAPIServer and InstallCRDs; everything they start
// stops when the test ends. Programs outside go test use LaunchEtcd,
// LaunchAPIServer and ApplyCRDs and stop what they started themselves (see
// cmd/localkube).
//
// Several API servers can share one etcd, each under its own key prefix:
// that is how a test gets two clusters for little more than the cost of one.
// There is no controller manager, scheduler or kubelet: nothing garbage
// collects owned objects, finishes namespace deletion or runs Pods. Tests set
// Pod status through the status subresource themselves.
//
// The binaries are found through PLEXUS_KUBE_BIN or the default cache folder.
// When they are missing a test fails and names the command that builds them
// (make kube-binaries, make coredns), so no run can pass without the tests
// that need them; only `go test -short` skips those tests.
package kubetest
