package deploy

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/deploy/crds"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// chartDir is the Helm chart of deploy/, relative to this package.
const chartDir = "helm/plexus"

// valueSet is one way to install the chart: its values, as --set-json
// arguments, and what its Deployments must be.
type valueSet struct {
	name       string
	set        []string
	components []component
}

// valueSets are the installs the chart is tested with: the defaults (what
// deploy/ is), the allocator on etcd with three replicas (what deploy/ is
// with etcd/10-allocator.yaml), and a member cluster with its own TLS
// Secrets, settings and sources file.
func valueSets() []valueSet {
	etcd := append([]component(nil), components...)
	etcd[0].replicas = 3
	return []valueSet{
		{name: "defaults", components: components},
		{name: "etcd", set: []string{`allocator.store="etcd"`, `allocator.replicas=3`}, components: etcd},
		{name: "tls", set: []string{
			`allocator.store="etcd"`, `allocator.replicas=2`, `allocator.etcd.tlsSecret="etcd-client"`,
			`allocator.etcd.endpoints=["https://10.0.0.1:2379","https://10.0.0.2:2379","https://10.0.0.3:2379"]`,
			`tls.secrets={"allocator":"a-tls","membership":"m-tls","importer":"i-tls","repair":"r-tls"}`,
			`clusterName="cluster-a"`, `clusterset="prod"`, `allocatorAddress="plexus-allocator.example.net:7401"`,
			`members.sources=[{"name":"cluster-a","address":"m.cluster-a.example.net:7402"},{"name":"cluster-b","address":"m.cluster-b.example.net:7402"}]`,
			`importer.vipPools=["vips-v4","vips-v6"]`, `importer.manageServiceCIDRs=false`,
			`image.prefix="registry.example/plexus/"`, `image.tag="v0.1.0"`, `image.pullPolicy="IfNotPresent"`,
		}},
	}
}

// helm runs the helm of hack/helm.sh with args and returns its output.
func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(kubetest.RequireHelm(t), args...).Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "helm %s:\n%s", strings.Join(args, " "), stderr)
	return out
}

// render is `helm template` of the chart in the namespace of deploy/ with
// the values set.
func render(t *testing.T, set ...string) []Object {
	t.Helper()
	args := []string{"template", "plexus", chartDir, "--namespace", Namespace}
	for _, s := range set {
		args = append(args, "--set-json", s)
	}
	objs, err := DecodeFile("helm template", helm(t, args...))
	require.NoError(t, err)
	return objs
}

// requireSameObjects fails unless want and got hold the same objects (by
// kind and name, whatever their order), each equal field by field.
func requireSameObjects(t *testing.T, want, got []Object) {
	t.Helper()
	byName := func(objs []Object) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, o := range objs {
			out[o.GetKind()+" "+o.GetName()] = o.Object
		}
		return out
	}
	w, g := byName(want), byName(got)
	require.ElementsMatch(t, slices.Collect(maps.Keys(w)), slices.Collect(maps.Keys(g)), "the same objects")
	for k, o := range w {
		require.Equal(t, o, g[k], k)
	}
}

// TestChartRendersDeploy: the chart's default rendering is deploy/ (but
// for the namespace, which comes first and which the chart makes only
// when asked, as 00-namespace.yaml does), and with the allocator on etcd
// it is deploy/ with etcd/10-allocator.yaml: the two cannot drift apart.
func TestChartRendersDeploy(t *testing.T) {
	t.Parallel()
	objs, err := Objects()
	require.NoError(t, err)
	var ns []Object
	var rest []Object
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			ns = append(ns, o)
		} else {
			rest = append(rest, o)
		}
	}
	require.Len(t, ns, 1)
	requireSameObjects(t, rest, render(t))
	requireSameObjects(t, objs, render(t, "namespace.create=true"))
	requireSameObjects(t, etcdObjects(t), render(t, `allocator.store="etcd"`, "allocator.replicas=3", "namespace.create=true"))
}

// TestChartValues: what the values of a member cluster set lands where the
// services read it.
func TestChartValues(t *testing.T) {
	t.Parallel()
	m := index(t, render(t, valueSets()[2].set...))
	cm := typed[corev1.ConfigMap](t, m, "ConfigMap", "plexus-cluster")
	require.Equal(t, map[string]string{
		"cluster-name": "cluster-a", "manage-service-cidrs": "false",
		"sources-file": "/etc/plexus/sources/sources.yaml",
	}, cm.Data, "two VIP pools are arguments, not the key")
	alloc := typed[corev1.ConfigMap](t, m, "ConfigMap", "plexus-allocator-config")
	require.Equal(t, map[string]string{"clusterset": "prod"}, alloc.Data)
	sources := typed[corev1.ConfigMap](t, m, "ConfigMap", "plexus-sources")
	var file struct {
		Clusters []struct{ Name, Address string } `json:"clusters"`
	}
	require.NoError(t, yaml.UnmarshalStrict([]byte(sources.Data["sources.yaml"]), &file))
	require.Len(t, file.Clusters, 2)
	require.Equal(t, "cluster-b", file.Clusters[1].Name)

	for _, c := range components {
		d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-"+c.name)
		ctr := d.Spec.Template.Spec.Containers[0]
		require.Equal(t, "registry.example/plexus/"+c.name+":v0.1.0", ctr.Image)
		require.Equal(t, corev1.PullIfNotPresent, ctr.ImagePullPolicy)
		require.Equal(t, c.name[:1]+"-tls", volume(t, d.Spec.Template.Spec, "tls").Secret.SecretName)
		if c.name != "allocator" {
			addr, _ := envValue(ctr, "PLEXUS_ALLOCATOR_ADDR")
			require.Equal(t, "plexus-allocator.example.net:7401", addr)
		}
		if c.name == "importer" {
			require.Equal(t, []string{"--vip-pool=vips-v4", "--vip-pool=vips-v6"}, ctr.Args)
		}
		checkRealFlags(t, c.name, ctr)
	}
	d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-allocator")
	require.Equal(t, "etcd-client", volume(t, d.Spec.Template.Spec, "etcd-tls").Secret.SecretName)
	store, _ := envValue(d.Spec.Template.Spec.Containers[0], "PLEXUS_STORE")
	require.Equal(t, "etcd:https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379", store)

	// A bolt allocator is one replica; the chart refuses more.
	args := []string{"template", "plexus", chartDir, "--set", "allocator.replicas=2"}
	out, err := exec.Command(kubetest.RequireHelm(t), args...).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "the bolt store is one replica")
}

// TestChartLint: helm lint, strict, with every value set.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets() {
		args := []string{"lint", "--strict", chartDir, "--namespace", Namespace}
		for _, s := range vs.set {
			args = append(args, "--set-json", s)
		}
		helm(t, args...)
	}
}

// TestChartMetadata: the chart is the release the build is (VERSION), and
// its crds/ are the CRDs of plexusctl crds, no more.
func TestChartMetadata(t *testing.T) {
	version, err := os.ReadFile(filepath.Join("..", "VERSION"))
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	require.NoError(t, err)
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &chart))
	require.Equal(t, strings.TrimSpace(string(version)), chart.Version)
	require.Equal(t, chart.Version, chart.AppVersion)

	want, err := crds.ChartFiles()
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Join(chartDir, "crds"))
	require.NoError(t, err)
	require.Len(t, entries, len(want), "crds/ holds exactly the CRDs of plexusctl crds")
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", name))
		require.NoError(t, err, "run make generate")
		require.True(t, bytes.Equal(data, got), "crds/%s is stale: run make generate", name)
	}
}

// TestChartAgainstAPIServer applies each value set's rendering (after the
// namespace, as the guide installs) to a real kube-apiserver with the
// checks deploy/ gets, and checks its Deployments as deploy/'s are.
func TestChartAgainstAPIServer(t *testing.T) {
	t.Parallel()
	ns, err := FileObjects("00-namespace.yaml")
	require.NoError(t, err)
	for _, vs := range valueSets() {
		t.Run(vs.name, func(t *testing.T) {
			objs := render(t, vs.set...)
			if vs.components != nil {
				m := index(t, objs)
				t.Run("workloads", func(t *testing.T) { checkWorkloads(t, m, vs.components) })
				t.Run("mutual TLS and policy", func(t *testing.T) { checkMutualTLSAndPolicy(t, m, vs.components) })
			}
			m := index(t, objs)
			for name := range m["Deployment"] {
				d := typed[appsv1.Deployment](t, m, "Deployment", name)
				checkRealFlags(t, strings.TrimPrefix(name, "plexus-"), d.Spec.Template.Spec.Containers[0])
			}
			checkAgainstAPIServer(t, append(ns, objs...))
		})
	}
}

// TestChartRefusesUnknownValues: values.schema.json makes helm refuse a
// value the chart does not have (a misspelled key would otherwise be
// ignored without a word) or one of the wrong kind, naming it.
func TestChartRefusesUnknownValues(t *testing.T) {
	t.Parallel()
	bin := kubetest.RequireHelm(t)
	for _, tc := range []struct{ set, says string }{
		{`importer.vipPool=["vips"]`, "vipPool"},
		{`allocator.storage="etcd"`, "storage"},
		{`members.sources=[{"name":"a","adress":"m:7402"}]`, "adress"},
		{`allocator.store="etc"`, "store"},
		{`importer.manageServiceCIDRs="yes"`, "manageServiceCIDRs"},
		{`membership.replicas=-1`, "replicas"},
	} {
		out, err := exec.Command(bin, "template", "plexus", chartDir, "--namespace", Namespace, "--set-json", tc.set).CombinedOutput()
		require.Error(t, err, "helm template --set-json %s must fail:\n%s", tc.set, out)
		require.Contains(t, string(out), "schema", tc.set)
		require.Contains(t, string(out), tc.says, tc.set)
	}
}
