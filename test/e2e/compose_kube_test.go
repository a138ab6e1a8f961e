package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// plexusServices are the Dockerfile targets of the four services.
var plexusServices = map[string]bool{"allocator": true, "membership": true, "importer": true, "repair": true}

// TestComposeKubeAPIServer runs each of docker-compose.yaml's clusters the
// way compose would, without an engine: kube-pki-X's command (localkube
// pki), then the real kube-apiserver with exactly the flags compose gives
// kube-apiserver-X (only its paths, port and etcd address rewritten to
// this test's), then kube-crds-X's command (localkube crds). The API server
// must come up on those files, answer the admin kubeconfig, and serve the
// Plexus CRDs.
func TestComposeKubeAPIServer(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yaml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	etcd := kubetest.StartEtcd(t)
	for cluster, apiPort := range map[string]string{"a": "6443", "b": "6444"} {
		t.Run(cluster, func(t *testing.T) {
			pki, api, crds := f.Services["kube-pki-"+cluster], f.Services["kube-apiserver-"+cluster], f.Services["kube-crds-"+cluster]
			composeCluster(t, etcd, apiPort, pki.Command, api.Image, api.Command, crds.Command)
		})
	}
}

// composeCluster runs one compose cluster's three commands.
func composeCluster(t *testing.T, etcd *kubetest.Etcd, apiPort string, pki []string, image string, api []string, crds []string) {
	require.NotEmpty(t, pki)
	require.NotEmpty(t, crds)
	require.NotEmpty(t, api)
	require.Equal(t, "kube-apiserver", api[0])
	require.True(t, strings.HasSuffix(image, ":"+kubetest.KubeVersion), "compose runs the kube-apiserver version the tests build (%s), not %s", kubetest.KubeVersion, image)

	dir := t.TempDir()
	_, port, err := net.SplitHostPort(proctest.FreeAddr(t))
	require.NoError(t, err)
	// Compose's paths and addresses → this test's.
	rewrite := func(arg string) string {
		for _, r := range [][2]string{
			{"/home/nonroot/kube", dir}, {"/kube/", dir + "/"},
			{"127.0.0.1:" + apiPort, "127.0.0.1:" + port}, {"--secure-port=" + apiPort, "--secure-port=" + port},
			{"http://127.0.0.1:2379", etcd.Endpoint()},
		} {
			arg = strings.ReplaceAll(arg, r[0], r[1])
		}
		return arg
	}
	localkube := proctest.Build(t, "./internal/testing/kubetest/cmd/localkube")
	run := func(args []string) {
		t.Helper()
		var rewritten []string
		for _, a := range args {
			rewritten = append(rewritten, rewrite(a))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, localkube, rewritten...).CombinedOutput()
		require.NoError(t, err, "localkube %s:\n%s", strings.Join(rewritten, " "), out)
	}
	run(pki)

	var args []string
	for _, a := range api[1:] {
		args = append(args, rewrite(a))
	}
	kubetest.RunAPIServerArgs(t, args)

	run(crds) // waits for the API server, then installs the CRDs

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the admin kubeconfig works")
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"},
		{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceimports"},
		{Group: "workload.plexus.dev", Version: "v1alpha1", Resource: "externalworkloads"},
	} {
		_, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
		require.NoError(t, err, "%s is served", gvr.Resource)
	}
}
