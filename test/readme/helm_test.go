package readme

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/plexusnet/plexus/deploy"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// TestDeployGuideHelmInstall runs each `helm install` line of section 11
// of docs/deploy.md, as written, against a fresh kube-apiserver of its
// own, after what the guide makes first there: the namespace of section
// 1 (its `kubectl apply` of deploy/00-namespace.yaml) and, for a release
// with members, the guide's `kubectl create namespace` of the inventory
// namespace. Helm must install the chart's crds/ (established), every
// object `helm template` renders for the same arguments must exist, the
// release must be listed as deployed, and `helm upgrade` with the same
// arguments must succeed as revision 2 and leave the objects in place.
// Nothing runs the pods, so the Secrets of section 2 are not made.
func TestDeployGuideHelmInstall(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	path := filepath.Join(root, "docs", "deploy.md")
	exs, err := examples(path)
	require.NoError(t, err)
	sections := guideSections(t, path)
	var installs, kubectls []example
	for _, ex := range exs {
		switch {
		case sections(ex.line) == 11 && strings.HasPrefix(ex.command, "helm install "):
			installs = append(installs, ex)
		case strings.HasPrefix(ex.command, "kubectl "):
			kubectls = append(kubectls, ex)
		}
	}
	require.Len(t, installs, 2, "docs/deploy.md, section 11: an allocator's release and a member's")

	helm := kubetest.RequireHelm(t)
	bin := t.TempDir() // helm on PATH as the guide's `helm`
	require.NoError(t, os.Symlink(helm, filepath.Join(bin, "helm")))
	etcd := kubetest.StartEtcd(t)
	for _, ex := range installs {
		t.Run(releaseName(ex), func(t *testing.T) {
			c := kubetest.StartAPIServer(t, etcd, kubetest.WithName("cluster-a"))
			f := &guideFleet{t: t, ctx: t.Context(), root: root, work: t.TempDir(),
				kube: map[string]*kubetest.Cluster{"cluster-a": c}, procs: map[string]*proctest.Proc{}, names: map[string]string{}}
			for _, pre := range helmPrerequisites(t, ex, kubectls) {
				f.kubectl(pre, "cluster-a", shellWords(pre.command)[1:])
			}
			h := &helmRun{t: t, ex: ex, root: root, helm: helm, env: helmEnv(t, bin, c.Kubeconfig)}
			h.run("install")
			waitCRDsEstablished(t, f, root)
			want := h.rendered()
			h.requireExist(c, want)
			h.requireEtcdEndpoints(want)
			h.requireListed("1")
			h.run("upgrade")
			h.requireListed("2")
			h.requireExist(c, want)
		})
	}
}

// releaseName is the release a `helm install` line names.
func releaseName(ex example) string {
	return shellWords(ex.command)[2]
}

// helmPrerequisites are the guide's kubectl lines that make what a helm
// install line needs first: the namespace of section 1 and, when the line
// sets members.inventoryNamespace, the guide's creation of that namespace.
func helmPrerequisites(t *testing.T, ex example, kubectls []example) []example {
	t.Helper()
	want := []string{"kubectl apply -f deploy/00-namespace.yaml"}
	for _, a := range shellWords(ex.command) {
		if ns, ok := strings.CutPrefix(a, "members.inventoryNamespace="); ok {
			want = append(want, "kubectl create namespace "+ns)
		}
	}
	var out []example
	for _, w := range want {
		found := false
		for _, k := range kubectls {
			if k.command == w {
				out, found = append(out, k), true
				break
			}
		}
		require.True(t, found, "docs/deploy.md:%d: the guide runs %q before it", ex.line, w)
	}
	return out
}

// helmEnv is the environment helm runs in: the cluster's kubeconfig and
// helm's own folders in the test's.
func helmEnv(t *testing.T, bin, kubeconfig string) []string {
	home := t.TempDir()
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"KUBECONFIG=" + kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}
	return env
}

// helmRun runs one `helm install` line of the guide and its variants.
type helmRun struct {
	t    *testing.T
	ex   example
	root string
	helm string
	env  []string
}

// command runs the guide's line with `helm install` made `helm verb`,
// with bash in the repository (where deploy/ is), and returns its output.
func (h *helmRun) command(verb string) ([]byte, error) {
	line, ok := strings.CutPrefix(h.ex.command, "helm install ")
	require.True(h.t, ok)
	cmd := exec.CommandContext(h.t.Context(), "bash", "-c", "helm "+verb+" "+line)
	cmd.Dir = h.root
	cmd.Env = h.env
	return cmd.CombinedOutput()
}

// run runs the line as helm verb; it must exit 0.
func (h *helmRun) run(verb string) {
	h.t.Helper()
	out, err := h.command(verb)
	require.NoError(h.t, err, "docs/deploy.md:%d: helm %s:\n%s", h.ex.line, verb, out)
}

// rendered are the objects `helm template` renders for the line.
func (h *helmRun) rendered() []deploy.Object {
	h.t.Helper()
	out, err := h.command("template")
	require.NoError(h.t, err, "docs/deploy.md:%d: helm template:\n%s", h.ex.line, out)
	objs, err := deploy.DecodeFile("helm template", out)
	require.NoError(h.t, err)
	require.NotEmpty(h.t, objs)
	return objs
}

// requireExist checks that every object of want exists in cluster c,
// namespaced ones in their namespace (the release's when unset).
func (h *helmRun) requireExist(c *kubetest.Cluster, want []deploy.Object) {
	t := h.t
	t.Helper()
	disco, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	for _, o := range want {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "docs/deploy.md:%d: %s %s", h.ex.line, gvk.Kind, o.GetName())
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = h.namespace()
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		got, err := ri.Get(t.Context(), o.GetName(), metav1.GetOptions{})
		require.NoError(t, err, "docs/deploy.md:%d: %s %s/%s, rendered, is in the cluster", h.ex.line, gvk.Kind, o.GetNamespace(), o.GetName())
		require.Equal(t, releaseName(h.ex), got.GetAnnotations()["meta.helm.sh/release-name"], "%s %s belongs to the release", gvk.Kind, o.GetName())
	}
}

// requireEtcdEndpoints checks that a line which sets
// allocator.etcd.endpoints renders the allocator's store with those
// endpoints, in their order: the shell must not have split the list.
func (h *helmRun) requireEtcdEndpoints(objs []deploy.Object) {
	t := h.t
	t.Helper()
	const key = "allocator.etcd.endpoints={"
	i := strings.Index(h.ex.command, key)
	if i < 0 {
		return
	}
	list, _, ok := strings.Cut(h.ex.command[i+len(key):], "}")
	require.True(t, ok, "docs/deploy.md:%d: the endpoints' list is closed", h.ex.line)
	store := `"etcd:` + list + `"`
	for _, o := range objs {
		if o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet" {
			continue
		}
		b, err := json.Marshal(o.Object)
		require.NoError(t, err)
		if strings.Contains(string(b), store) {
			return
		}
	}
	t.Fatalf("docs/deploy.md:%d: no allocator rendered with the store %s", h.ex.line, store)
}

// namespace is the --namespace of the line.
func (h *helmRun) namespace() string {
	args := shellWords(h.ex.command)
	for i, a := range args {
		if a == "--namespace" || a == "-n" {
			require.Less(h.t, i+1, len(args))
			return args[i+1]
		}
	}
	h.t.Fatalf("docs/deploy.md:%d: helm install names its namespace", h.ex.line)
	return ""
}

// requireListed checks that `helm list` in the release's namespace shows
// the release deployed at revision.
func (h *helmRun) requireListed(revision string) {
	t := h.t
	t.Helper()
	cmd := exec.CommandContext(t.Context(), h.helm, "list", "-n", h.namespace(), "-o", "json")
	cmd.Env = h.env
	out, err := cmd.Output()
	require.NoError(t, err, "helm list")
	var releases []struct {
		Name, Namespace, Revision, Status string
	}
	require.NoError(t, json.Unmarshal(out, &releases), "%s", out)
	require.Len(t, releases, 1, "%s", out)
	r := releases[0]
	require.Equal(t, releaseName(h.ex), r.Name)
	require.Equal(t, h.namespace(), r.Namespace)
	require.Equal(t, "deployed", r.Status)
	require.Equal(t, revision, r.Revision)
}

// waitCRDsEstablished waits until every CRD of the chart's crds/ is
// established in the cluster helm installed into.
func waitCRDsEstablished(t *testing.T, f *guideFleet, root string) {
	t.Helper()
	dir := filepath.Join(root, "deploy", "helm", "plexus", "crds")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		objs, err := deploy.DecodeFile(e.Name(), raw)
		require.NoError(t, err)
		for _, o := range objs {
			require.Equal(t, "CustomResourceDefinition", o.GetKind(), e.Name())
			names = append(names, o.GetName())
		}
	}
	require.NotEmpty(t, names)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, kubetest.WaitCRDsEstablished(ctx, f.kube["cluster-a"].Config, names...), "the chart's crds/")
}
