package deploy

import (
	"net"
	"os/exec"
	"regexp"
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

// components are the four services as the manifests deploy them.
var components = []struct {
	name        string
	replicas    int32
	grpcPort    int32
	httpPort    int32
	kubeAPI     bool // talks to the Kubernetes API
	leaderElect bool
	callsPeers  bool // calls other Plexus services
}{
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
	m := load(t)
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

// TestManifestsSetOnlyRealFlags: every PLEXUS_* variable and every flag a
// Deployment gives a Plexus container is a flag of that service's binary
// (PLEXUS_FOO_BAR is --foo-bar), so a renamed flag cannot leave a manifest
// silently configuring nothing.
func TestManifestsSetOnlyRealFlags(t *testing.T) {
	t.Parallel()
	m := load(t)
	flagRE := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)
	checked := 0
	for _, c := range components {
		bin := proctest.Build(t, "./services/"+c.name)
		out, err := exec.Command(bin, "--help").CombinedOutput()
		require.NoError(t, err, "%s --help:\n%s", c.name, out)
		flags := map[string]bool{}
		for _, f := range flagRE.FindAllStringSubmatch(string(out), -1) {
			flags[f[1]] = true
		}
		require.Contains(t, flags, "grpc-addr", "the help of %s lists its flags", c.name)

		d := typed[appsv1.Deployment](t, m, "Deployment", "plexus-"+c.name)
		ctr := d.Spec.Template.Spec.Containers[0]
		require.Empty(t, ctr.Command, "%s: the image's entrypoint is the binary", c.name)
		for _, e := range ctr.Env {
			flag, ok := strings.CutPrefix(e.Name, "PLEXUS_")
			if !ok {
				// POD_NAMESPACE is read by the leader election defaults.
				allowed := strings.HasPrefix(e.Name, "OTEL_") || (e.Name == "POD_NAMESPACE" && flags["lease-namespace"])
				require.True(t, allowed, "%s sets %s, which it does not read", c.name, e.Name)
				continue
			}
			flag = strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
			require.True(t, flags[flag], "%s sets %s, but has no --%s", c.name, e.Name, flag)
			checked++
		}
		for _, a := range ctr.Args {
			name, ok := strings.CutPrefix(a, "--")
			require.True(t, ok, "%s: argument %q is not a --flag", c.name, a)
			name, _, _ = strings.Cut(name, "=")
			require.True(t, flags[name], "%s is given --%s, which it does not have", c.name, name)
			checked++
		}
	}
	require.Greater(t, checked, 15)
}
