package e2e_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
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
// clients' connections spread over them), one allocator on that etcd (what
// the spread over three costs), one allocator on its bolt file,
// and the Kubernetes-native way, one networking.k8s.io/v1 IPAddress object
// per allocation created on a kube-apiserver. The load tool
// (services/allocator/cmd/allocload) runs as its own process, as a client
// fleet would; every etcd fsyncs. Each system is started for its own
// measurement and stopped after it, so none pays for another's idle work
// (an idle kube-apiserver still runs its controllers and watches).
//
//	go test -run '^$' -bench ScaleOut -benchtime 1x -count 5 ./services/allocator/e2e/
func BenchmarkScaleOut(b *testing.B) {
	allocload := buildAllocload(b)

	// A system starts, and returns the load tool's arguments for it, its
	// server processes (whose CPU time is read) and how to stop it.
	type system func() (args []string, pids []int, stop func())
	// replicas starts n allocators on one etcd; the load tool spreads two
	// connections per replica over them.
	replicas := func(n int) system {
		return func() ([]string, []int, func()) {
			e := fsyncEtcd(b)
			var reps []*allocator
			var addrs []string
			pids := []int{e.Pid()}
			for range n {
				a := startAllocator(b, "--store=etcd:"+e.Endpoints()[0])
				reps = append(reps, a)
				addrs = append(addrs, a.grpcAddr)
				pids = append(pids, a.cmd.Process.Pid)
			}
			return []string{"--addr=" + strings.Join(addrs, ","), "--conns=" + strconv.Itoa(2*n), "--pool=scale"}, pids, func() {
				for _, a := range reps {
					a.kill()
				}
				_ = e.Stop()
			}
		}
	}
	bolt := func() ([]string, []int, func()) {
		a := startAllocator(b, "--store=bolt:"+filepath.Join(b.TempDir(), "bench.db"))
		return []string{"--addr=" + a.grpcAddr, "--conns=4", "--pool=scale"}, []int{a.cmd.Process.Pid}, a.kill
	}
	ipAddress := func() ([]string, []int, func()) {
		e := fsyncEtcd(b)
		cluster := kubetest.StartAPIServer(b, e)
		return []string{"--mode=ipaddress", "--kubeconfig=" + cluster.Kubeconfig}, []int{e.Pid(), cluster.Pid()}, func() {
			_ = cluster.Stop()
			_ = e.Stop()
		}
	}
	run := func(start system) (perSec float64, p99, cpuPerCall time.Duration) {
		b.Helper()
		args, pids, stop := start()
		defer stop()
		return measureLoad(b, allocload, args, pids)
	}
	for b.Loop() {
		etcdRate, etcdP99, etcdCPU := run(replicas(3))
		oneRate, oneP99, oneCPU := run(replicas(1))
		boltRate, boltP99, boltCPU := run(bolt)
		ipRate, ipP99, ipCPU := run(ipAddress)
		b.ReportMetric(etcdRate, "etcd3-allocs/s")
		b.ReportMetric(float64(etcdP99)/1e6, "etcd3-p99-ms")
		b.ReportMetric(float64(etcdCPU)/1e3, "etcd3-cpu-us/alloc")
		b.ReportMetric(oneRate, "etcd1-allocs/s")
		b.ReportMetric(float64(oneP99)/1e6, "etcd1-p99-ms")
		b.ReportMetric(float64(oneCPU)/1e3, "etcd1-cpu-us/alloc")
		b.ReportMetric(boltRate, "bolt-allocs/s")
		b.ReportMetric(float64(boltP99)/1e6, "bolt-p99-ms")
		b.ReportMetric(float64(boltCPU)/1e3, "bolt-cpu-us/alloc")
		b.ReportMetric(ipRate, "ipaddress-allocs/s")
		b.ReportMetric(float64(ipP99)/1e6, "ipaddress-p99-ms")
		b.ReportMetric(float64(ipCPU)/1e3, "ipaddress-cpu-us/alloc")
		b.ReportMetric(etcdRate/ipRate, "etcd3/ipaddress")
		b.ReportMetric(etcdRate/boltRate, "etcd3/bolt")
		// What one process on a local file reaches against the same
		// peer: a ceiling for any set of replicas on this machine.
		b.ReportMetric(boltRate/ipRate, "bolt/ipaddress")
		// Server CPU per allocation, IPAddress over three replicas: how
		// much more work the Kubernetes-native way does for the same
		// allocation, whatever the cores it shares with the load tool.
		b.ReportMetric(float64(ipCPU)/float64(etcdCPU), "ipaddress-cpu/etcd3-cpu")
	}
}

// buildAllocload builds the load tool (services/allocator/cmd/allocload).
func buildAllocload(b *testing.B) string {
	allocload := filepath.Join(b.TempDir(), "allocload")
	out, err := exec.Command("go", "build", "-o", allocload, "github.com/plexusnet/plexus/services/allocator/cmd/allocload").CombinedOutput()
	require.NoError(b, err, "%s", out)
	return allocload
}

// measureLoad runs the load tool with args, 64 clients, and returns its
// rate and p99, and the CPU time the server processes pids spent per
// call, read over the measured part of the run (from the end of the
// warm-up until the tool exits).
func measureLoad(b *testing.B, allocload string, args []string, pids []int) (perSec float64, p99, cpuPerCall time.Duration) {
	b.Helper()
	const warmup, measured = 2 * time.Second, 10 * time.Second
	cmd := exec.Command(allocload, append([]string{"--clients=64", "--duration=" + measured.String(), "--warmup=" + warmup.String(), "--format=json"}, args...)...)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	require.NoError(b, cmd.Start())
	time.Sleep(warmup)
	cpu0, err := processesCPU(pids)
	require.NoError(b, err)
	require.NoError(b, cmd.Wait(), "allocload %s", strings.Join(args, " "))
	cpu1, err := processesCPU(pids)
	require.NoError(b, err)
	var rep loadReport
	require.NoError(b, json.Unmarshal([]byte(stdout.String()), &rep), "%s", stdout.String())
	require.Len(b, rep.Ops, 1, "%s", stdout.String())
	require.Empty(b, rep.Ops[0].Errors, "allocload %s: no call may fail", strings.Join(args, " "))
	require.Positive(b, rep.Ops[0].Calls)
	return rep.Ops[0].PerSec, rep.Ops[0].P99, (cpu1 - cpu0) / time.Duration(rep.Ops[0].Calls)
}
