package deploy

import (
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// manifests holds the decoded objects by kind and name.
type manifests map[string]map[string]Object

func load(t *testing.T) manifests {
	t.Helper()
	objs, err := Objects()
	require.NoError(t, err)
	return index(t, objs)
}

// etcdObjects are the objects of the manifests with the allocator on etcd:
// EtcdAllocatorFile in place of 10-allocator.yaml.
func etcdObjects(t *testing.T) []Object {
	t.Helper()
	objs, err := Objects()
	require.NoError(t, err)
	etcd, err := FileObjects(EtcdAllocatorFile)
	require.NoError(t, err)
	var out []Object
	for _, o := range objs {
		if o.File == "10-allocator.yaml" {
			out, etcd = append(out, etcd...), nil
			continue
		}
		out = append(out, o)
	}
	return out
}

// variant is one way to install: its objects and what each service's
// Deployment must be.
type variant struct {
	name       string
	m          manifests
	components []component
}

// variants are deploy/ as it is, and with the allocator on etcd.
func variants(t *testing.T) []variant {
	t.Helper()
	withEtcd := slices.Clone(components)
	withEtcd[0].replicas = 3
	return []variant{
		{name: "bolt", m: load(t), components: components},
		{name: "etcd", m: index(t, etcdObjects(t)), components: withEtcd},
	}
}

// index holds objs by kind and name; no object may be given twice.
func index(t *testing.T, objs []Object) manifests {
	t.Helper()
	m := manifests{}
	for _, o := range objs {
		if m[o.GetKind()] == nil {
			m[o.GetKind()] = map[string]Object{}
		}
		_, dup := m[o.GetKind()][o.GetName()]
		require.False(t, dup, "%s %s is defined twice", o.GetKind(), o.GetName())
		m[o.GetKind()][o.GetName()] = o
	}
	return m
}

// typed returns the object kind/name decoded into T.
func typed[T any](t *testing.T, m manifests, kind, name string) *T {
	t.Helper()
	o, ok := m[kind][name]
	require.True(t, ok, "no %s %s", kind, name)
	out := new(T)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true), "%s %s", kind, name)
	return out
}

// component is one service as the manifests deploy it.
type component struct {
	name        string
	replicas    int32
	grpcPort    int32
	httpPort    int32
	kubeAPI     bool // talks to the Kubernetes API
	leaderElect bool
	callsPeers  bool // calls other Plexus services
}

// components are the four services as deploy/ deploys them.
var components = []component{
	{name: "allocator", replicas: 1, grpcPort: 7401, httpPort: 9401},
	{name: "membership", replicas: 2, grpcPort: 7402, httpPort: 9402, kubeAPI: true, callsPeers: true},
	{name: "importer", replicas: 2, grpcPort: 7403, httpPort: 9403, kubeAPI: true, leaderElect: true, callsPeers: true},
	{name: "repair", replicas: 2, grpcPort: 7404, httpPort: 9404, kubeAPI: true, leaderElect: true, callsPeers: true},
}

// envValue returns the literal value of the container's variable name.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// TestWorkloads checks what every Deployment must have: its replicas, its
// own ServiceAccount, a locked-down security context, probes on the ports
// the service really listens on, requests and limits, and a
// PodDisruptionBudget and Service that select its pods.
func TestWorkloads(t *testing.T) {
	for _, v := range variants(t) {
		t.Run(v.name, func(t *testing.T) { checkWorkloads(t, v.m, v.components) })
	}
}

// checkWorkloads checks the Deployments of m against components.
func checkWorkloads(t *testing.T, m manifests, components []component) {
	require.Len(t, m["Deployment"], len(components), "one Deployment per service")
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			name := "plexus-" + c.name
			d := typed[appsv1.Deployment](t, m, "Deployment", name)
			require.NotNil(t, d.Spec.Replicas)
			require.Equal(t, c.replicas, *d.Spec.Replicas)
			pod := d.Spec.Template
			selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			require.NoError(t, err)
			require.True(t, selector.Matches(labels.Set(pod.Labels)), "the Deployment selects its pods")

			sa := typed[corev1.ServiceAccount](t, m, "ServiceAccount", name)
			require.Equal(t, name, pod.Spec.ServiceAccountName)
			if !c.kubeAPI {
				require.NotNil(t, sa.AutomountServiceAccountToken)
				require.False(t, *sa.AutomountServiceAccountToken, "no token for a service that never calls the API")
				require.NotNil(t, pod.Spec.AutomountServiceAccountToken)
				require.False(t, *pod.Spec.AutomountServiceAccountToken)
			}

			psc := pod.Spec.SecurityContext
			require.NotNil(t, psc)
			require.True(t, psc.RunAsNonRoot != nil && *psc.RunAsNonRoot, "runAsNonRoot")
			require.True(t, psc.RunAsUser != nil && *psc.RunAsUser != 0, "a numeric non-root user the kubelet can verify")
			require.True(t, psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccomp RuntimeDefault")

			require.Len(t, pod.Spec.Containers, 1)
			ctr := pod.Spec.Containers[0]
			require.Equal(t, "plexus/"+c.name+":latest", ctr.Image)
			sc := ctr.SecurityContext
			require.NotNil(t, sc)
			require.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem")
			require.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "no privilege escalation")
			require.NotNil(t, sc.Capabilities)
			require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			require.Empty(t, sc.Capabilities.Add)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := ctr.Resources.Requests[r], ctr.Resources.Limits[r]
				require.False(t, req.IsZero(), "%s request", r)
				require.False(t, lim.IsZero(), "%s limit", r)
				require.LessOrEqual(t, req.Cmp(lim), 0, "%s request within the limit", r)
			}

			// The service listens where the probes and the Service look.
			grpcAddr, _ := envValue(ctr, "PLEXUS_GRPC_ADDR")
			httpAddr, _ := envValue(ctr, "PLEXUS_HTTP_ADDR")
			require.Equal(t, net.JoinHostPort("0.0.0.0", strconv.Itoa(int(c.grpcPort))), grpcAddr)
			require.Equal(t, net.JoinHostPort("0.0.0.0", strconv.Itoa(int(c.httpPort))), httpAddr)
			ports := map[string]int32{}
			for _, p := range ctr.Ports {
				ports[p.Name] = p.ContainerPort
			}
			require.Equal(t, map[string]int32{"grpc": c.grpcPort, "http": c.httpPort}, ports)
			// The gRPC port wants a client certificate, which the kubelet's
			// gRPC probe cannot present: readiness is probed over HTTP.
			rp := ctr.ReadinessProbe
			require.NotNil(t, rp)
			require.NotNil(t, rp.HTTPGet, "HTTP readiness probe")
			require.Equal(t, "/readyz", rp.HTTPGet.Path)
			require.Equal(t, "http", rp.HTTPGet.Port.String())
			lp := ctr.LivenessProbe
			require.NotNil(t, lp)
			require.NotNil(t, lp.HTTPGet, "HTTP liveness probe")
			require.Equal(t, "/livez", lp.HTTPGet.Path)
			require.Equal(t, "http", lp.HTTPGet.Port.String())

			if c.leaderElect {
				v, _ := envValue(ctr, "PLEXUS_LEADER_ELECT")
				require.Equal(t, "true", v)
				var podNS *corev1.EnvVar
				for i := range ctr.Env {
					if ctr.Env[i].Name == "POD_NAMESPACE" {
						podNS = &ctr.Env[i]
					}
				}
				require.NotNil(t, podNS, "POD_NAMESPACE names the Lease's namespace")
				require.True(t, podNS.ValueFrom != nil && podNS.ValueFrom.FieldRef != nil && podNS.ValueFrom.FieldRef.FieldPath == "metadata.namespace",
					"POD_NAMESPACE from the downward API")
			}

			pdb := typed[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", name)
			pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			require.NoError(t, err)
			require.True(t, pdbSel.Matches(labels.Set(pod.Labels)), "the PodDisruptionBudget selects the pods")
			if c.replicas > 1 {
				// One replica may go, the others keep serving.
				require.NotNil(t, pdb.Spec.MaxUnavailable)
				require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())
			}

			svc := typed[corev1.Service](t, m, "Service", name)
			require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)), "the Service selects the pods")
			svcPorts := map[string]int32{}
			for _, p := range svc.Spec.Ports {
				require.Equal(t, p.Name, p.TargetPort.String(), "port %s targets the container port of its name", p.Name)
				svcPorts[p.Name] = p.Port
			}
			require.Equal(t, ports, svcPorts)
		})
	}
}

// TestAllocatorStoreOnVolume: the bolt file is on the persistent volume,
// the only writable place, and the rollout never runs two pods on it.
func TestAllocatorStoreOnVolume(t *testing.T) {
	m := load(t)
	d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-allocator")
	require.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type)
	ctr := d.Spec.Template.Spec.Containers[0]
	store, _ := envValue(ctr, "PLEXUS_STORE")
	path, ok := strings.CutPrefix(store, "bolt:")
	require.True(t, ok, "the bolt store, got %q", store)
	var mount *corev1.VolumeMount
	for i, vm := range ctr.VolumeMounts {
		if strings.HasPrefix(path, vm.MountPath+"/") {
			require.Nil(t, mount, "%s is on one volume", path)
			mount = &ctr.VolumeMounts[i]
		} else {
			require.True(t, vm.ReadOnly, "only the store's volume is writable, not %s", vm.MountPath)
		}
	}
	require.NotNil(t, mount, "%s is on a volume", path)
	require.False(t, mount.ReadOnly)
	vol := volume(t, d.Spec.Template.Spec, mount.Name)
	require.NotNil(t, vol.PersistentVolumeClaim)
	pvc := typed[corev1.PersistentVolumeClaim](t, m, "PersistentVolumeClaim", vol.PersistentVolumeClaim.ClaimName)
	require.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, pvc.Spec.AccessModes)
	require.False(t, pvc.Spec.Resources.Requests.Storage().IsZero(), "the claim asks for storage")
	fsGroup := d.Spec.Template.Spec.SecurityContext.FSGroup
	require.NotNil(t, fsGroup, "the non-root user can write the volume")
}

// TestEtcdAllocator: the allocator on etcd runs three replicas that roll
// one at a time, keeps nothing on a volume, and reaches etcd over https
// with the client certificate of its own Secret; everything else it ships
// is 10-allocator.yaml's.
func TestEtcdAllocator(t *testing.T) {
	bolt, err := FileObjects("10-allocator.yaml")
	require.NoError(t, err)
	etcd, err := FileObjects(EtcdAllocatorFile)
	require.NoError(t, err)
	m := index(t, etcd)
	require.Empty(t, m["PersistentVolumeClaim"], "no volume on etcd")
	for _, o := range bolt {
		if o.GetKind() == "Deployment" || o.GetKind() == "PersistentVolumeClaim" {
			continue
		}
		got, ok := m[o.GetKind()][o.GetName()]
		require.True(t, ok, "%s %s", o.GetKind(), o.GetName())
		require.Equal(t, o.Object, got.Object, "%s %s as in 10-allocator.yaml", o.GetKind(), o.GetName())
	}

	d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-allocator")
	require.Equal(t, int32(3), *d.Spec.Replicas)
	require.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
	ru := d.Spec.Strategy.RollingUpdate
	require.NotNil(t, ru)
	require.Equal(t, 1, ru.MaxUnavailable.IntValue())
	require.Equal(t, 0, ru.MaxSurge.IntValue(), "one replica at a time, never a fourth")
	spec := d.Spec.Template.Spec
	ctr := spec.Containers[0]
	for _, vm := range ctr.VolumeMounts {
		require.True(t, vm.ReadOnly, "nothing is written to %s", vm.MountPath)
	}
	store, _ := envValue(ctr, "PLEXUS_STORE")
	urls, ok := strings.CutPrefix(store, "etcd:")
	require.True(t, ok, "the etcd store, got %q", store)
	require.Len(t, strings.Split(urls, ","), 3, "three etcd members")
	for _, u := range strings.Split(urls, ",") {
		require.True(t, strings.HasPrefix(u, "https://"), "etcd over https: %s", u)
	}
	prefix, _ := envValue(ctr, "PLEXUS_ETCD_PREFIX")
	require.NotEmpty(t, prefix)
	for key, want := range map[string]string{"PLEXUS_ETCD_CA": "ca.crt", "PLEXUS_ETCD_CERT": "tls.crt", "PLEXUS_ETCD_KEY": "tls.key"} {
		file, _ := envValue(ctr, key)
		vol, name := mountOf(t, spec, ctr, file)
		require.NotNil(t, vol.Secret, "%s is on a Secret", key)
		require.Equal(t, "plexus-allocator-etcd-tls", vol.Secret.SecretName)
		require.Equal(t, want, name)
		require.Equal(t, int32(0o440), *vol.Secret.DefaultMode)
	}
	pdb := typed[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "plexus-allocator")
	require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())
}

// TestMembersFromConfigMap: the importer and repair read their members
// from the ConfigMap plexus-sources, mounted as a folder (an edit reaches
// the running pods) and optional (a cluster with an inventory has none).
func TestMembersFromConfigMap(t *testing.T) {
	m := load(t)
	for _, svc := range []string{"importer", "repair"} {
		d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-"+svc)
		spec := d.Spec.Template.Spec
		ctr := spec.Containers[0]
		vol, _ := mountOf(t, spec, ctr, "/etc/plexus/sources/sources.yaml")
		require.NotNil(t, vol.ConfigMap, svc)
		require.Equal(t, "plexus-sources", vol.ConfigMap.Name)
		require.True(t, vol.ConfigMap.Optional != nil && *vol.ConfigMap.Optional, "%s starts without plexus-sources", svc)
		for _, vm := range ctr.VolumeMounts {
			require.Empty(t, vm.SubPath, "%s: a subPath mount never sees an edit", svc)
		}
		for _, key := range []string{"PLEXUS_SOURCES_FILE", "PLEXUS_INVENTORY_NAMESPACE"} {
			var found bool
			for _, e := range ctr.Env {
				found = found || (e.Name == key && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil)
			}
			require.True(t, found, "%s reads %s from a ConfigMap", svc, key)
		}
	}
}

// TestManifestsSetOnlyRealFlags: every PLEXUS_* variable and every flag a
// Deployment gives a Plexus container is a flag of that service's binary
// (PLEXUS_FOO_BAR is --foo-bar), so a renamed flag cannot leave a manifest
// silently configuring nothing; a variable read from a ConfigMap
// (plexus-cluster, plexus-allocator-config) is optional and from the key
// named after its flag.
func TestManifestsSetOnlyRealFlags(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, v := range variants(t) {
		for _, c := range v.components {
			d := typed[appsv1.Deployment](t, v.m, "Deployment", "plexus-"+c.name)
			checked += checkRealFlags(t, c.name, d.Spec.Template.Spec.Containers[0])
		}
	}
	require.Greater(t, checked, 30)
}

// serviceFlags returns the flags of service svc's binary, from its --help.
func serviceFlags(t *testing.T, svc string) map[string]bool {
	t.Helper()
	bin := proctest.Build(t, "./services/"+svc)
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s --help:\n%s", svc, out)
	flags := map[string]bool{}
	for _, f := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[f[1]] = true
	}
	require.Contains(t, flags, "grpc-addr", "the help of %s lists its flags", svc)
	return flags
}

// checkRealFlags checks that every variable and argument ctr gives service
// svc is one of its flags, and returns how many it checked.
func checkRealFlags(t *testing.T, svc string, ctr corev1.Container) int {
	t.Helper()
	flags := serviceFlags(t, svc)
	checked := 0
	require.Empty(t, ctr.Command, "%s: the image's entrypoint is the binary", svc)
	for _, e := range ctr.Env {
		flag, ok := strings.CutPrefix(e.Name, "PLEXUS_")
		if !ok {
			// POD_NAMESPACE is read by the leader election defaults.
			allowed := strings.HasPrefix(e.Name, "OTEL_") || (e.Name == "POD_NAMESPACE" && flags["lease-namespace"])
			require.True(t, allowed, "%s sets %s, which it does not read", svc, e.Name)
			continue
		}
		flag = strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
		require.True(t, flags[flag], "%s sets %s, but has no --%s", svc, e.Name, flag)
		if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
			require.Contains(t, []string{"plexus-cluster", "plexus-allocator-config"}, ref.ConfigMapKeyRef.Name, "%s: %s", svc, e.Name)
			require.Equal(t, flag, ref.ConfigMapKeyRef.Key, "%s: %s is read from the key named after its flag", svc, e.Name)
			require.True(t, ref.ConfigMapKeyRef.Optional != nil && *ref.ConfigMapKeyRef.Optional,
				"%s: the key %s is optional, so a cluster without it still starts", svc, flag)
		}
		checked++
	}
	for _, a := range ctr.Args {
		name, ok := strings.CutPrefix(a, "--")
		require.True(t, ok, "%s: argument %q is not a --flag", svc, a)
		name, _, _ = strings.Cut(name, "=")
		require.True(t, flags[name], "%s is given --%s, which it does not have", svc, name)
		checked++
	}
	return checked
}
