package kubetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Controllers are the kube-controller-manager controllers a local cluster
// runs: what turns Deployments and StatefulSets into Pods, Services into
// EndpointSlices, and deletes what owners and namespaces leave behind. With the PodRunner
// standing in for the scheduler and kubelets, a Deployment gets Running
// Pods and its Service real EndpointSlices.
var Controllers = []string{
	"deployment-controller", "replicaset-controller", "statefulset-controller", "endpointslice-controller",
	"endpointslice-mirroring-controller", "garbage-collector-controller", "namespace-controller",
}

// ControllerManager is the path of the kube-controller-manager executable.
func (b Binaries) ControllerManager() string { return filepath.Join(b.Dir, "kube-controller-manager") }

// HasControllerManager reports whether kube-controller-manager was built
// (hack/kube-binaries.sh builds it; a cache from before it did lacks it).
func (b Binaries) HasControllerManager() bool {
	info, err := os.Stat(b.ControllerManager())
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// ControllerManagerProcess is a running kube-controller-manager.
type ControllerManagerProcess struct{ proc *process }

// Stop terminates it and returns once it is gone.
func (m *ControllerManagerProcess) Stop() error { return m.proc.stop(DefaultStopGrace) }

// LaunchControllerManager runs kube-controller-manager against c with the
// Controllers, logging to dir. It serves nothing (--secure-port=0) and
// elects no leader, so several clusters' managers run side by side.
func LaunchControllerManager(b Binaries, c *Cluster, dir string) (*ControllerManagerProcess, error) {
	if !b.HasControllerManager() {
		return nil, fmt.Errorf("%w: no executable %s (build it with %s)", ErrBinariesMissing, b.ControllerManager(), BuildCommand)
	}
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--controllers=" + strings.Join(Controllers, ","),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--concurrent-service-endpoint-syncs=5",
		"--v=1",
	}
	p, err := startProcess("kube-controller-manager "+c.Name, b.ControllerManager(), args, filepath.Join(dir, "kube-controller-manager.log"))
	if err != nil {
		return nil, err
	}
	return &ControllerManagerProcess{proc: p}, nil
}

// StartControllers runs, until the test ends, kube-controller-manager with
// the Controllers against c and a PodRunner standing in for the scheduler
// and kubelets (node "<cluster>-node", Pod addresses from podCIDR): a
// Deployment created in c gets Running, Ready Pods with addresses, and a
// Service selecting them gets the EndpointSlice controller's own slices.
// The binary is required like kube-apiserver (RequireBinaries).
func StartControllers(t testing.TB, c *Cluster, podCIDR netip.Prefix) {
	t.Helper()
	StartControllerManager(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r := NewPodRunner(c.Clientset, c.Name+"-node", podCIDR, slog.New(slog.DiscardHandler))
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("pod runner of %s: %v", c.Name, err)
		}
	})
}

// StartControllerManager runs kube-controller-manager with the Controllers
// against c until the test ends; what runs the Pods is the caller's (the
// data plane's runtime, or StartControllers' runner).
func StartControllerManager(t testing.TB, c *Cluster) {
	t.Helper()
	m, err := LaunchControllerManager(RequireBinaries(t), c, t.TempDir())
	if err != nil {
		t.Fatalf("start kube-controller-manager: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("stop kube-controller-manager of %s: %v", c.Name, err)
		}
	})
}

// KubeProxy is the path of the kube-proxy executable (the data plane's).
func (b Binaries) KubeProxy() string { return filepath.Join(b.Dir, "kube-proxy") }

// HasKubeProxy reports whether kube-proxy was built (a cache from before
// hack/kube-binaries.sh built it lacks it).
func (b Binaries) HasKubeProxy() bool {
	info, err := os.Stat(b.KubeProxy())
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}
