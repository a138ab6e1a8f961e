package readme

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/plexusnet/plexus/clients/plexusctl/cmd"
	"github.com/plexusnet/plexus/deploy"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
	"github.com/plexusnet/plexus/internal/tlsconf"
)

// The guide's fleet: two member clusters, the allocator in the first.
var guideClusters = []string{"cluster-a", "cluster-b"}

// guideNames are the names the guide gives the services other clusters
// reach, which the test serves on loopback ports instead ("exposing" them).
const (
	guideAllocatorName  = "plexus-allocator.example.net:7401"
	guideMembershipName = "plexus-membership.%s.example.net:7402"
)

// guideFleet is the state of a fleet installed by the guide: the clusters,
// the processes that stand in for the Deployments' pods, and the
// addresses the guide's names stand for.
type guideFleet struct {
	t      *testing.T
	ctx    context.Context
	root   string // the repository, where deploy/ is
	work   string // the reader's folder (.certs)
	kube   map[string]*kubetest.Cluster
	procs  map[string]*proctest.Proc // "cluster/deployment"
	names  map[string]string         // guide name → loopback address
	etcd   string                    // the client URL of the allocator's etcd
	onEtcd bool                      // an allocator was pointed at it
}

// TestDeployGuideFollowed installs a two-cluster clusterset by following
// docs/deploy.md literally: every command of its ```sh blocks in sections 1
// to 5, run against two local clusters (kubectl's commands through the
// API, plexusctl's through its command tree), each Deployment of the
// manifests it applies run as a local process with exactly its
// container's environment (ConfigMap keys, the downward API, Secret and
// ConfigMap volumes written out as the kubelet would) under a kubeconfig
// with its own ServiceAccount's token. Only what a local run cannot be is
// stood in for: the images (the binaries), the pods' network (loopback
// ports, so the processes get --grpc-addr and --http-addr; one replica of
// each Deployment), the addresses the guide exposes (example.net names) and
// the etcd the reader runs (one member on loopback, client TLS required,
// whose certificates the guide's Secret is made from). Then a Service
// exported in cluster-a is imported in cluster-b with a VIP of the guide's
// pool and its EndpointSlices, and no process logged an RBAC denial.
func TestDeployGuideFollowed(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	f := &guideFleet{t: t, ctx: t.Context(), root: root, work: t.TempDir(),
		kube: map[string]*kubetest.Cluster{}, procs: map[string]*proctest.Proc{}, names: map[string]string{}}
	etcd := kubetest.StartEtcd(t)
	for _, c := range guideClusters {
		f.kube[c] = kubetest.StartAPIServer(t, etcd, kubetest.WithName(c))
	}
	f.startAllocatorEtcd()
	for _, svc := range []string{"allocator", "membership", "importer", "repair"} {
		proctest.Build(t, "./services/"+svc) // from the module, before leaving it
	}
	t.Chdir(f.work)

	exs, err := examples(filepath.Join(root, "docs", "deploy.md"))
	require.NoError(t, err)
	sections := guideSections(t, filepath.Join(root, "docs", "deploy.md"))
	steps := 0
	var membersChange []example
	for _, ex := range exs {
		switch sec := sections(ex.line); {
		case sec <= 4:
			for _, c := range f.clustersOf(sec) {
				f.run(ex, c)
			}
		case sec == 5:
			// Each step of section 5 in every member cluster, the
			// guide's cluster-a being the one it is run in.
			for _, c := range guideClusters {
				f.run(ex, c)
			}
		case sec == 8:
			membersChange = append(membersChange, ex) // once the fleet imports
			continue
		default:
			continue // upgrading; Helm instead of deploy/
		}
		steps++
	}
	require.GreaterOrEqual(t, steps, 15, "the guide's commands were run")
	for _, c := range guideClusters {
		for _, d := range []string{"plexus-membership", "plexus-importer", "plexus-repair"} {
			require.Contains(t, f.procs, c+"/"+d, "the guide runs %s in %s", d, c)
		}
	}
	require.Contains(t, f.procs, "cluster-a/plexus-allocator")
	require.True(t, f.onEtcd, "the guide's allocator runs on etcd")

	f.exportAndImport()
	f.addAndRemoveCluster(membersChange)
	f.checkCoreDNSRole()
	require.Empty(t, f.denials(), "no process logged an RBAC denial")
}

// denialRE matches what client-go and the API server say when RBAC
// refuses a request.
var denialRE = regexp.MustCompile(`(?i)forbidden|cannot (list|watch|get|create|update|patch|delete) resource`)

// denials are the log lines of every process that report an RBAC denial.
func (f *guideFleet) denials() []string {
	var out []string
	for name, p := range f.procs {
		for _, l := range strings.Split(p.Log(), "\n") {
			if denialRE.MatchString(l) {
				out = append(out, name+": "+l)
			}
		}
	}
	return out
}

// guideSections returns the section number ("## N.") of each line of the
// guide.
func guideSections(t *testing.T, path string) func(line int) int {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	heading := regexp.MustCompile(`^## (\d+)\.`)
	var starts []int // starts[i]: the line section i+1 starts at
	for i, l := range strings.Split(string(raw), "\n") {
		if m := heading.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			require.Equal(t, len(starts)+1, n, "docs/deploy.md:%d: sections in order", i+1)
			starts = append(starts, i+1)
		}
	}
	return func(line int) int {
		n := 0
		for n < len(starts) && starts[n] <= line {
			n++
		}
		return n
	}
}

// clustersOf returns where the commands of a section before 5 run:
// sections 1 and 3 in every cluster, 2 on the reader's machine, 4 in the
// allocator's cluster.
func (f *guideFleet) clustersOf(section int) []string {
	switch section {
	case 2:
		return []string{""}
	case 4:
		return guideClusters[:1]
	}
	return guideClusters
}

// run runs one command of the guide in cluster c: the guide's cluster-a
// stands for c, but in `clusters join`, which names every member.
func (f *guideFleet) run(ex example, c string) {
	t := f.t
	t.Helper()
	command := ex.command
	if c != "" && !strings.Contains(command, "clusters join") {
		command = strings.ReplaceAll(command, "cluster-a", c)
	}
	for name, addr := range f.names {
		command = strings.ReplaceAll(command, name, addr)
	}
	for _, part := range strings.Split(command, "|") {
		require.NotContains(t, part, "\\", "docs/deploy.md:%d: one command a line", ex.line)
	}
	args := shellWords(command)
	switch {
	case args[0] == "make" && args[1] == "images":
		// The images: the test runs the binaries instead.
	case command == "plexusctl crds | kubectl apply --server-side -f -":
		out := f.plexusctl(ex, c, "crds")
		f.apply(ex, c, "crds", out)
		kubetest.InstallCRDs(t, f.kube[c].Config) // waits until they are served
	case args[0] == "plexusctl":
		f.plexusctl(ex, c, args[1:]...)
	case args[0] == "kubectl":
		f.kubectl(ex, c, args[1:])
	default:
		t.Fatalf("docs/deploy.md:%d: this test does not know how to run %q", ex.line, command)
	}
}

// plexusctl runs plexusctl with args against cluster c (its kubeconfig)
// and returns its output.
func (f *guideFleet) plexusctl(ex example, c string, args ...string) []byte {
	f.t.Helper()
	if c != "" {
		f.t.Setenv("KUBECONFIG", f.kube[c].Kubeconfig)
	}
	out, err := plexusctlOutput(args...)
	require.NoError(f.t, err, "docs/deploy.md:%d: plexusctl %s\n%s", ex.line, strings.Join(args, " "), out)
	return out
}

// plexusctlOutput runs plexusctl with args and returns what it printed.
func plexusctlOutput(args ...string) ([]byte, error) {
	var out bytes.Buffer
	root := cmd.NewRoot(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.Bytes(), err
}

// kubectl runs the kubectl commands the guide uses, in cluster c.
func (f *guideFleet) kubectl(ex example, c string, args []string) {
	t := f.t
	t.Helper()
	client := f.kube[c].Clientset
	ns := ""
	if args[0] == "-n" {
		ns, args = args[1], args[2:]
	}
	where := fmt.Sprintf("docs/deploy.md:%d in %s", ex.line, c)
	switch {
	case args[0] == "apply":
		for i, a := range args {
			if a == "-f" {
				f.applyFile(ex, c, args[i+1])
			}
		}
	case len(args) > 3 && args[0] == "create" && args[1] == "secret" && args[2] == "generic":
		data := map[string][]byte{}
		for _, a := range args[4:] {
			from, ok := strings.CutPrefix(a, "--from-file=")
			require.True(t, ok, "%s: %s", where, a)
			if key, file, ok := strings.Cut(from, "="); ok {
				var err error
				data[key], err = os.ReadFile(file)
				require.NoError(t, err, where)
				continue
			}
			entries, err := os.ReadDir(from)
			require.NoError(t, err, where)
			for _, e := range entries {
				data[e.Name()], err = os.ReadFile(filepath.Join(from, e.Name()))
				require.NoError(t, err)
			}
		}
		_, err := client.CoreV1().Secrets(ns).Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: args[3]}, Data: data}, metav1.CreateOptions{})
		require.NoError(t, err, where)
	case len(args) > 2 && args[0] == "create" && args[1] == "configmap":
		data := map[string]string{}
		for _, a := range args[3:] {
			kv, ok := strings.CutPrefix(a, "--from-literal=")
			require.True(t, ok, "%s: %s", where, a)
			k, v, _ := strings.Cut(kv, "=")
			data[k] = v
		}
		_, err := client.CoreV1().ConfigMaps(ns).Create(f.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: args[2]}, Data: data}, metav1.CreateOptions{})
		require.NoError(t, err, where)
	case len(args) == 3 && args[0] == "create" && args[1] == "namespace":
		_, err := client.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: args[2]}}, metav1.CreateOptions{})
		require.NoError(t, err, where)
	default:
		t.Fatalf("%s: this test does not know how to run kubectl %s", where, strings.Join(args, " "))
	}
}

// applyFile applies a file of deploy/ to cluster c as the guide has the
// reader edit it, and runs its Deployments.
func (f *guideFleet) applyFile(ex example, c, file string) {
	f.t.Helper()
	raw, err := os.ReadFile(filepath.Join(f.root, file))
	require.NoError(f.t, err, "docs/deploy.md:%d", ex.line)
	f.apply(ex, c, file, raw)
}

// apply server-side applies the objects of data to cluster c and starts
// a process for every Deployment among them.
func (f *guideFleet) apply(ex example, c, file string, data []byte) {
	t := f.t
	t.Helper()
	objs, err := deploy.DecodeFile(file, data)
	require.NoError(t, err)
	cfg := f.kube[c].Config
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			f.edit(o)
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "docs/deploy.md:%d: %s %s", ex.line, gvk.Kind, o.GetName())
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = ri.Apply(f.ctx, o.GetName(), o.Unstructured, metav1.ApplyOptions{FieldManager: "kubectl", Force: true})
		require.NoError(t, err, "docs/deploy.md:%d: apply %s %s in %s", ex.line, gvk.Kind, o.GetName(), c)
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			var d appsv1.Deployment
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
			f.runDeployment(c, &d)
		}
	}
}

// edit makes the edits of a Deployment the guide asks for: section 4's
// PLEXUS_STORE names the reader's etcd, section 5's PLEXUS_ALLOCATOR_ADDR
// the allocator.
func (f *guideFleet) edit(o deploy.Object) {
	containers, _, _ := unstructuredSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		env, _, _ := unstructuredSlice(c.(map[string]any), "env")
		for _, e := range env {
			e := e.(map[string]any)
			switch value, _ := e["value"].(string); {
			case e["name"] == "PLEXUS_ALLOCATOR_ADDR" && f.names[guideAllocatorName] != "":
				e["value"] = f.names[guideAllocatorName]
			case e["name"] == "PLEXUS_STORE" && strings.HasPrefix(value, "etcd:"):
				e["value"], f.onEtcd = "etcd:"+f.etcd, true
			}
		}
	}
}

// startAllocatorEtcd runs the etcd of section 4 (one member): clients over
// https only, each with a certificate of its CA, and writes that CA and a
// client certificate for the allocator where the guide's Secret is made
// from.
func (f *guideFleet) startAllocatorEtcd() {
	t := f.t
	ca := testcerts.NewCA(t, "etcd")
	serverCert, serverKey := ca.Issue("etcd-server", testcerts.Loopback("etcd"))
	clientCert, clientKey := ca.Issue("allocator-etcd", testcerts.Leaf{CommonName: "plexus-allocator"})
	for src, dst := range map[string]string{ca.File: "etcd-ca.crt", clientCert: "allocator-etcd.crt", clientKey: "allocator-etcd.key"} {
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(f.work, dst), data, 0o600))
	}
	client, peer := proctest.FreeAddr(t), proctest.FreeAddr(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "etcd.log"))
	require.NoError(t, err)
	cmd := exec.Command(kubetest.RequireBinaries(t).Etcd(), "--name=guide", "--data-dir="+t.TempDir(),
		"--listen-client-urls=https://"+client, "--advertise-client-urls=https://"+client,
		"--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer, "--initial-cluster=guide=http://"+peer,
		"--cert-file="+serverCert, "--key-file="+serverKey, "--trusted-ca-file="+ca.File, "--client-cert-auth",
		"--log-level=warn", "--unsafe-no-fsync")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	// The allocator is SERVING only once it has read its state from etcd
	// over TLS: its start waits for this etcd.
	f.etcd = "https://" + client
}

// unstructuredSlice is the list at path in obj.
func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// runDeployment runs one replica of d in cluster c as a local process:
// its container's environment as the kubelet would give it, its volumes
// written to a folder (paths rewritten to it), and a kubeconfig with a
// token of its ServiceAccount unless the pod mounts none.
func (f *guideFleet) runDeployment(c string, d *appsv1.Deployment) {
	t := f.t
	t.Helper()
	spec := d.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	dir := t.TempDir()
	paths := map[string]string{} // mount path → local folder
	for _, vm := range ctr.VolumeMounts {
		local := filepath.Join(dir, vm.Name)
		require.NoError(t, os.MkdirAll(local, 0o700))
		f.writeVolume(c, d.Namespace, volumeNamed(t, spec, vm.Name), local)
		paths[vm.MountPath] = local
	}
	var env []string
	for _, e := range ctr.Env {
		if v, ok := f.envValue(c, d.Namespace, e); ok {
			for mount, local := range paths {
				// A file of a volume, alone or in a value (bolt:PATH).
				v = strings.ReplaceAll(v, mount+"/", local+"/")
			}
			env = append(env, e.Name+"="+v)
		}
	}
	args := slices.Clone(ctr.Args)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		args = append(args, "--kubeconfig", f.serviceAccountKubeconfig(c, d.Namespace, spec.ServiceAccountName, dir))
	}
	svc := strings.TrimPrefix(d.Name, "plexus-")
	operator := filepath.Join(f.work, ".certs", "fleet", "operator")
	health, err := tlsconf.Client(filepath.Join(operator, "ca.crt"), filepath.Join(operator, "tls.crt"), filepath.Join(operator, "tls.key"))
	require.NoError(t, err)
	p := proctest.Start(t, proctest.Build(t, "./services/"+svc), args, proctest.WithEnv(env...), proctest.WithHealthTLS(health))
	f.procs[c+"/"+d.Name] = p
	switch svc {
	case "allocator":
		f.names[guideAllocatorName] = p.GRPCAddr
	case "membership":
		f.names[fmt.Sprintf(guideMembershipName, c)] = p.GRPCAddr
	}
}

// volumeNamed is the pod's volume name.
func volumeNamed(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

// writeVolume writes what volume v holds in cluster c into dir: a
// Secret's or ConfigMap's keys as files (nothing for a missing optional
// one), nothing for a claim (an empty, writable folder).
func (f *guideFleet) writeVolume(c, ns string, v corev1.Volume, dir string) {
	t := f.t
	client := f.kube[c].Clientset
	files := map[string][]byte{}
	switch {
	case v.Secret != nil:
		s, err := client.CoreV1().Secrets(ns).Get(f.ctx, v.Secret.SecretName, metav1.GetOptions{})
		require.NoError(t, err, "Secret %s in %s", v.Secret.SecretName, c)
		files = s.Data
	case v.ConfigMap != nil:
		cm, err := client.CoreV1().ConfigMaps(ns).Get(f.ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ptr.Deref(v.ConfigMap.Optional, false) {
			return
		}
		require.NoError(t, err, "ConfigMap %s in %s", v.ConfigMap.Name, c)
		for k, s := range cm.Data {
			files[k] = []byte(s)
		}
	case v.PersistentVolumeClaim != nil:
	default:
		t.Fatalf("volume %s: a kind this test does not write", v.Name)
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
	}
}

// envValue is variable e as the kubelet sets it in cluster c, and whether
// it is set at all.
func (f *guideFleet) envValue(c, ns string, e corev1.EnvVar) (string, bool) {
	t := f.t
	switch {
	case e.ValueFrom == nil:
		return e.Value, true
	case e.ValueFrom.FieldRef != nil:
		require.Equal(t, "metadata.namespace", e.ValueFrom.FieldRef.FieldPath, e.Name)
		return ns, true
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		cm, err := f.kube[c].Clientset.CoreV1().ConfigMaps(ns).Get(f.ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && ptr.Deref(ref.Optional, false) {
			return "", false
		}
		require.NoError(t, err, "ConfigMap %s in %s", ref.Name, c)
		v, ok := cm.Data[ref.Key]
		require.True(t, ok || ptr.Deref(ref.Optional, false), "%s: key %s of %s", e.Name, ref.Key, ref.Name)
		return v, ok
	}
	t.Fatalf("%s: a source this test does not know", e.Name)
	return "", false
}

// serviceAccountKubeconfig writes a kubeconfig for cluster c with a token
// of the ServiceAccount sa (TokenRequest), as a pod gets it, and returns
// its path.
func (f *guideFleet) serviceAccountKubeconfig(c, ns, sa, dir string) string {
	t := f.t
	tr, err := f.kube[c].Clientset.CoreV1().ServiceAccounts(ns).CreateToken(f.ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "a token of %s/%s in %s", ns, sa, c)
	cfg := f.kube[c].Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[c] = &clientcmdapi.Context{Cluster: c, AuthInfo: sa}
	kc.CurrentContext = c
	path := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// exportAndImport exports shop/web, a Service with one ready Pod, from
// cluster-a and waits for cluster-b to import it: a ServiceImport with a
// VIP of the guide's pool, Ready, and the importer's EndpointSlices with
// the Pod's address.
func (f *guideFleet) exportAndImport() {
	t := f.t
	a, b := f.kube["cluster-a"].Clientset, f.kube["cluster-b"].Clientset
	for _, client := range []*kubetest.Cluster{f.kube["cluster-a"], f.kube["cluster-b"]} {
		_, err := client.Clientset.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := a.CoreV1().Services("shop").Create(f.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := a.CoreV1().Pods("shop").Create(f.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	const podIP = "10.128.0.10"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	_, err = a.CoreV1().Pods("shop").UpdateStatus(f.ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = mcsclient.NewForConfigOrDie(f.kube["cluster-a"].Config).MulticlusterV1beta1().ServiceExports("shop").Create(f.ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	pool := f.guidePool()
	imports := mcsclient.NewForConfigOrDie(f.kube["cluster-b"].Config).MulticlusterV1beta1().ServiceImports("shop")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.Empty(c, f.denials(), "RBAC denials")
		si, err := imports.Get(f.ctx, "web", metav1.GetOptions{})
		require.NoError(c, err)
		require.Len(c, si.Spec.IPs, 1)
		require.True(c, pool.Contains(netip.MustParseAddr(si.Spec.IPs[0])), "the VIP %s is of the guide's pool %s", si.Spec.IPs[0], pool)
		ready := meta.FindStatusCondition(si.Status.Conditions, "Ready")
		require.NotNil(c, ready, "conditions %+v", si.Status.Conditions)
		require.Equal(c, metav1.ConditionTrue, ready.Status, "Ready: %s %s", ready.Reason, ready.Message)
	}, 2*time.Minute, 100*time.Millisecond, "cluster-b imports shop/web")
	require.Eventually(t, func() bool {
		list, err := b.DiscoveryV1().EndpointSlices("shop").List(f.ctx, metav1.ListOptions{LabelSelector: mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
		if err != nil {
			return false
		}
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				if slices.Contains(ep.Addresses, podIP) && ptr.Deref(ep.Conditions.Ready, false) && s.AddressType == discoveryv1.AddressTypeIPv4 {
					return true
				}
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "cluster-b's EndpointSlices of shop/web hold %s", podIP)
}

// addAndRemoveCluster follows section 8 in every member cluster: cluster-c
// joins (its membership's name stands for a loopback address where
// nothing listens: c's own install is sections 3 and 5 again) and every
// importer follows it, as plexusctl clusters list shows with the
// operator's certificate; then it leaves, and every importer has it as
// left. The import of shop/web stays Ready throughout.
func (f *guideFleet) addAndRemoveCluster(exs []example) {
	t := f.t
	require.Len(t, exs, 2, "section 8 joins cluster-c and removes it")
	addr := proctest.FreeAddr(t)
	f.names[fmt.Sprintf(guideMembershipName, "cluster-c")] = addr
	for i, ex := range exs {
		for _, c := range guideClusters {
			f.run(ex, c)
		}
		want := []string{"SOURCE_STATE_CONNECTING", "SOURCE_STATE_DISCONNECTED"}
		if i == 1 {
			want = []string{"SOURCE_STATE_LEFT"}
		}
		for _, c := range guideClusters {
			require.EventuallyWithT(t, func(co *assert.CollectT) {
				src, err := f.source(c, "cluster-c")
				require.NoError(co, err)
				require.NotNil(co, src, "%s's importer follows cluster-c", c)
				require.Equal(co, addr, src["address"])
				require.Contains(co, want, src["state"])
			}, time.Minute, 200*time.Millisecond, "docs/deploy.md:%d in %s", ex.line, c)
			src, err := f.source(c, "cluster-a")
			require.NoError(t, err)
			require.Equal(t, "SOURCE_STATE_CONNECTED", src["state"], "%s still follows cluster-a", c)
		}
	}
	si, err := mcsclient.NewForConfigOrDie(f.kube["cluster-b"].Config).MulticlusterV1beta1().ServiceImports("shop").Get(f.ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, meta.IsStatusConditionTrue(si.Status.Conditions, "Ready"), "cluster-b's import of shop/web: %+v", si.Status.Conditions)
}

// source is what the importer of cluster c says of its source cluster,
// through plexusctl clusters list with the operator's certificate of
// section 2 (nil when it does not follow it). It touches no testing.T: it
// runs inside EventuallyWithT.
func (f *guideFleet) source(c, cluster string) (map[string]any, error) {
	out, err := plexusctlOutput("--importer-addr", f.procs[c+"/plexus-importer"].GRPCAddr, "--tls-ca", ".certs/ca.crt",
		"--tls-cert", ".certs/fleet/operator/tls.crt", "--tls-key", ".certs/fleet/operator/tls.key", "-o", "json", "clusters", "list")
	var list struct {
		Sources []map[string]any `json:"sources"`
	}
	if err == nil {
		err = json.Unmarshal(out, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("plexusctl clusters list in %s: %w: %s", c, err, out)
	}
	for _, s := range list.Sources {
		if s["cluster"] == cluster {
			return s, nil
		}
	}
	return nil, nil
}

// guidePool is the CIDR of the clusterset VIP pool the guide creates.
func (f *guideFleet) guidePool() netip.Prefix {
	raw, err := os.ReadFile(filepath.Join(f.root, "docs", "deploy.md"))
	require.NoError(f.t, err)
	m := regexp.MustCompile(`pool create clusterset-vips --cidr (\S+)`).FindSubmatch(raw)
	require.NotNil(f.t, m)
	return netip.MustParsePrefix(string(m[1]))
}

// checkCoreDNSRole applies section 7's RBAC for CoreDNS, the ```yaml block
// that names its ClusterRole, and asks the API server whether CoreDNS's
// ServiceAccount may now list and watch ServiceImports.
func (f *guideFleet) checkCoreDNSRole() {
	t := f.t
	raw, err := os.ReadFile(filepath.Join(f.root, "docs", "deploy.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```yaml\n(apiVersion: rbac[^`]*?plexus-coredns-serviceimports.*?)```").FindSubmatch(raw)
	require.NotNil(t, m, "section 7 gives CoreDNS's RBAC")
	c := "cluster-b"
	f.apply(example{line: bytes.Count(raw[:bytes.Index(raw, m[1])], []byte("\n")) + 1}, c, "section 7", m[1])
	objs, err := deploy.DecodeFile("section 7", m[1])
	require.NoError(t, err)
	var subject string
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" {
			subjects, _, _ := unstructuredSlice(o.Object, "subjects")
			require.Len(t, subjects, 1)
			s := subjects[0].(map[string]any)
			subject = fmt.Sprintf("system:serviceaccount:%s:%s", s["namespace"], s["name"])
		}
	}
	require.Equal(t, "system:serviceaccount:kube-system:coredns", subject)
	// The API server's authorizer learns of a new binding through its own
	// watch: the review is asked until it does.
	for _, verb := range []string{"list", "watch"} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			sar, err := f.kube[c].Clientset.AuthorizationV1().SubjectAccessReviews().Create(f.ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: subject, Groups: []string{"system:serviceaccounts", "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: mcsv1beta1.GroupName, Resource: "serviceimports"}},
			}, metav1.CreateOptions{})
			require.NoError(ct, err)
			require.True(ct, sar.Status.Allowed, "CoreDNS may %s ServiceImports: %s", verb, sar.Status.Reason)
		}, 10*time.Second, 20*time.Millisecond, "CoreDNS may %s ServiceImports", verb)
	}
}
