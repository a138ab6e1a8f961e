// Package e2e holds multi-process tests of the whole system: the real
// binaries, a real kube-apiserver and etcd.
package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// TestServicesServeHealthAndReflection starts each of the four services and
// checks that grpcurl, with no proto files, lists its v1 service and health
// and describes its messages with their documentation.
func TestServicesServeHealthAndReflection(t *testing.T) {
	grpcurl := proctest.Tool(t, "grpcurl")
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd)
	kubetest.InstallCRDs(t, cluster.Config)

	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"})
	for _, tc := range []struct {
		pkg, service, message, doc string
		args                       []string
	}{
		{"./services/allocator", "plexus.allocator.v1.AllocatorService", "plexus.allocator.v1.Pool", "// Pool is a named set of CIDRs", []string{"--store", "memory"}},
		{"./services/membership", "plexus.membership.v1.MembershipService", "plexus.membership.v1.Workload", "// Workload is an external workload", []string{"--cluster-name", "a", "--kubeconfig", cluster.Kubeconfig, "--allocator-addr", alloc.GRPCAddr}},
		{"./services/importer", "plexus.importer.v1.ImporterService", "plexus.importer.v1.ServiceImport", "// ServiceImport is an imported service", []string{"--cluster-name", "b", "--kubeconfig", cluster.Kubeconfig, "--allocator-addr", alloc.GRPCAddr}},
		{"./services/repair", "plexus.repair.v1.RepairService", "plexus.repair.v1.Finding", "// Finding is one problem", []string{"--cluster-name", "b", "--kubeconfig", cluster.Kubeconfig, "--allocator-addr", alloc.GRPCAddr}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			p := alloc
			if tc.pkg != "./services/allocator" {
				p = proctest.Start(t, proctest.Build(t, tc.pkg), tc.args)
			}
			out, err := exec.Command(grpcurl, "-plaintext", p.GRPCAddr, "list").CombinedOutput()
			require.NoError(t, err, string(out))
			require.Contains(t, string(out), tc.service)
			require.Contains(t, string(out), "grpc.health.v1.Health")

			out, err = exec.Command(grpcurl, "-plaintext", p.GRPCAddr, "describe", tc.message).CombinedOutput()
			require.NoError(t, err, string(out))
			require.True(t, strings.Contains(string(out), tc.doc), "describe shows no documentation:\n%s", out)

			out, err = exec.Command(grpcurl, "-plaintext", p.GRPCAddr, "grpc.health.v1.Health/Check").CombinedOutput()
			require.NoError(t, err, string(out))
			require.Contains(t, string(out), "SERVING")
		})
	}
}
