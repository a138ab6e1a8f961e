package app_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// freeDNSPort returns a port that nobody uses right now for UDP or TCP:
// CoreDNS listens on both, on every address (this build of it has no bind
// plugin), and is only asked on loopback.
func freeDNSPort(t *testing.T) int {
	t.Helper()
	for {
		c, err := net.ListenPacket("udp", ":0")
		require.NoError(t, err)
		port := c.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		_ = c.Close()
		if err == nil {
			_ = l.Close()
			return port
		}
	}
}

// startCoreDNS runs CoreDNS with the Corefile that corefile writes for a
// port and returns the port once it answers over TCP on loopback. A
// free port can be taken between its choice and CoreDNS's bind (the
// ephemeral ports of the other tests' connections): CoreDNS then exits
// with "address already in use", and another port is tried.
func startCoreDNS(t *testing.T, bin string, corefile func(port int) string) int {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port := freeDNSPort(t)
		path := filepath.Join(t.TempDir(), "Corefile")
		require.NoError(t, os.WriteFile(path, []byte(corefile(port)), 0o600))
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "-conf", path, "-dns.port", fmt.Sprint(port))
		logPath := filepath.Join(t.TempDir(), "coredns.log")
		logFile, err := os.Create(logPath)
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			cancel()
			<-exited
			_ = logFile.Close()
		}
		serving := false
		for deadline := time.Now().Add(waitFor); !serving && time.Now().Before(deadline); {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			case <-time.After(50 * time.Millisecond):
			}
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				_ = c.Close()
				serving = true
			}
		}
		if serving {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					out, _ := os.ReadFile(logPath)
					t.Logf("CoreDNS log:\n%s", out)
				}
			})
			return port
		}
		stop()
		out, _ := os.ReadFile(logPath)
		if !strings.Contains(string(out), "address already in use") || attempt == 4 {
			t.Fatalf("CoreDNS did not serve on 127.0.0.1:%d:\n%s", port, out)
		}
		t.Logf("CoreDNS lost port %d to another process; another port", port)
	}
}

// TestClusterSetDNSThroughCoreDNS: a real CoreDNS, its kubernetes plugin
// serving the clusterset.local zone from what the importer writes
// (ServiceImports and MCS EndpointSlices, `multicluster clusterset.local`),
// answers a real DNS client: <svc>.<ns>.svc.clusterset.local is the
// clusterset VIP, SRV records carry the ports, a headless service's name
// is its ready endpoints and <hostname>.<cluster>.<svc>... one endpoint.
func TestClusterSetDNSThroughCoreDNS(t *testing.T) {
	bin := kubetest.RequireCoreDNS(t)
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "cart", []string{"http=80"}, "10.1.0.1", "10.1.0.2"))
	db := sourcetest.Endpoints("shop", "db", []string{"sql=5432"}, "10.1.0.7", "10.1.0.8")
	db.Export.Type = membershipv1.ServiceType_SERVICE_TYPE_HEADLESS
	db.Groups[0].Endpoints[0].Hostname = "db-0"
	east.Set(db)
	e.startImporter(t, e.options("vips"), east)

	var vip string
	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "cart")
		if err != nil || len(si.Spec.IPs) == 0 {
			return false
		}
		vip = si.Spec.IPs[0]
		return len(e.slicesOf(t, "shop", "db")) > 0
	}, waitFor, tick)

	port := startCoreDNS(t, bin, func(port int) string {
		return fmt.Sprintf(`.:%d {
    errors
    kubernetes cluster.local clusterset.local {
        kubeconfig %s %s
        multicluster clusterset.local
    }
}
`, port, e.cluster.Kubeconfig, e.cluster.Name)
	})

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", fmt.Sprintf("127.0.0.1:%d", port))
	}}
	lookup := func(name string) []string {
		qctx, qcancel := context.WithTimeout(context.Background(), time.Second)
		defer qcancel()
		addrs, _ := r.LookupHost(qctx, name)
		slices.Sort(addrs)
		return addrs
	}
	require.Eventually(t, func() bool {
		return slices.Equal(lookup("cart.shop.svc.clusterset.local"), []string{vip})
	}, waitFor, 100*time.Millisecond, "cart.shop.svc.clusterset.local does not resolve to the VIP %s", vip)

	_, srvs, err := r.LookupSRV(context.Background(), "http", "tcp", "cart.shop.svc.clusterset.local")
	require.NoError(t, err)
	require.Len(t, srvs, 1)
	require.EqualValues(t, 80, srvs[0].Port)

	require.Equal(t, []string{"10.1.0.7", "10.1.0.8"}, lookup("db.shop.svc.clusterset.local"), "a headless service is its endpoints")
	require.Equal(t, []string{"10.1.0.7"}, lookup("db-0.east.db.shop.svc.clusterset.local"), "an endpoint by hostname and cluster")
}
