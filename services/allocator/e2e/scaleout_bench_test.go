package e2e_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/kubetest"
)

// loadReport is the part of allocload's JSON report the benchmark reads.
type loadReport struct {
	Ops []struct {
		Method string         `json:"method"`
		Calls  int            `json:"calls"`
		Errors map[string]int `json:"errors"`
		PerSec float64        `json:"per_sec"`
		P50    time.Duration  `json:"p50_ns"`
		P99    time.Duration  `json:"p99_ns"`
	} `json:"ops"`
}

// fsyncEtcd starts an etcd that fsyncs every commit, as production etcd
// does, so durable allocations are compared with durable allocations.
func fsyncEtcd(b *testing.B) *kubetest.Etcd {
	b.Helper()
	e, err := kubetest.LaunchEtcd(context.Background(), kubetest.EtcdConfig{Binaries: kubetest.RequireBinaries(b), Dir: b.TempDir(), Fsync: true})
	require.NoError(b, err)
	b.Cleanup(func() { _ = e.Stop() })
	return e
}

// BenchmarkScaleOut measures durable allocations per second with 64
// clients, in one run, against: three allocator replicas on one etcd (the
// clients' connections spread over them), one allocator on its bolt file,
// and the Kubernetes-native way, one networking.k8s.io/v1 IPAddress object
// per allocation created on a kube-apiserver. The load tool
// (services/allocator/cmd/allocload) runs as its own process, as a client
// fleet would; every etcd fsyncs.
//
//	go test -run '^$' -bench ScaleOut -benchtime 1x -count 3 ./services/allocator/e2e/
func BenchmarkScaleOut(b *testing.B) {
	allocload := filepath.Join(b.TempDir(), "allocload")
	out, err := exec.Command("go", "build", "-o", allocload, "github.com/plexusnet/plexus/services/allocator/cmd/allocload").CombinedOutput()
	require.NoError(b, err, "%s", out)

	storeEtcd := fsyncEtcd(b)
	var addrs []string
	for range 3 {
		addrs = append(addrs, startAllocator(b, "--store=etcd:"+storeEtcd.Endpoints()[0]).grpcAddr)
	}
	bolt := startAllocator(b, "--store=bolt:"+filepath.Join(b.TempDir(), "bench.db"))
	cluster := kubetest.StartAPIServer(b, fsyncEtcd(b))

	run := func(args ...string) (perSec float64, p99 time.Duration) {
		b.Helper()
		out, err := exec.Command(allocload, append([]string{"--clients=64", "--duration=10s", "--warmup=2s", "--format=json"}, args...)...).Output()
		require.NoError(b, err, "allocload %s", strings.Join(args, " "))
		var rep loadReport
		require.NoError(b, json.Unmarshal(out, &rep), "%s", out)
		require.Len(b, rep.Ops, 1, "%s", out)
		require.Empty(b, rep.Ops[0].Errors, "allocload %s: no call may fail", strings.Join(args, " "))
		return rep.Ops[0].PerSec, rep.Ops[0].P99
	}
	for b.Loop() {
		etcdRate, etcdP99 := run("--addr="+strings.Join(addrs, ","), "--conns=6", "--pool=scale")
		boltRate, boltP99 := run("--addr="+bolt.grpcAddr, "--conns=4", "--pool=scale")
		ipRate, ipP99 := run("--mode=ipaddress", "--kubeconfig="+cluster.Kubeconfig)
		b.ReportMetric(etcdRate, "etcd3-allocs/s")
		b.ReportMetric(float64(etcdP99)/1e6, "etcd3-p99-ms")
		b.ReportMetric(boltRate, "bolt-allocs/s")
		b.ReportMetric(float64(boltP99)/1e6, "bolt-p99-ms")
		b.ReportMetric(ipRate, "ipaddress-allocs/s")
		b.ReportMetric(float64(ipP99)/1e6, "ipaddress-p99-ms")
		b.ReportMetric(etcdRate/ipRate, "etcd3/ipaddress")
		b.ReportMetric(etcdRate/boltRate, "etcd3/bolt")
	}
}
