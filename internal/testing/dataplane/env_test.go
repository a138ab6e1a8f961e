package dataplane

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "EMPTY": ""}
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "1",
		"x$(A)y$(A)":     "x1y1",
		"$(EMPTY)!":      "!",
		"$(UNSET)":       "$(UNSET)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"$first_ip $A":   "$first_ip $A",
		"$(A":            "$(A",
		"$":              "$",
		"echo $(A) $$HO": "echo 1 $HO",
	} {
		require.Equal(t, want, expand(in, vars), "expand(%q)", in)
	}
}

// FuzzExpand: expansion never panics, leaves text without $ as it is, and
// never grows a string by more than what its references name.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "$(A)", "$$(A)", "$(", "$(A)$(B)", "a$b$$c"} {
		f.Add(s)
	}
	vars := map[string]string{"A": "xyz", "B": ""}
	f.Fuzz(func(t *testing.T, s string) {
		out := expand(s, vars)
		if !strings.Contains(s, "$") && out != s {
			t.Fatalf("expand(%q) = %q changed text without $", s, out)
		}
		if len(out) > len(s)*3 {
			t.Fatalf("expand(%q) grew to %d bytes", s, len(out))
		}
	})
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "u-1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-a", Hostname: "web-zero"},
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c := corev1.Container{Name: "app", Command: []string{"sh", "-c", "echo $(GREETING) $(POD_IP)"}, Env: []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "IPS", ValueFrom: field("status.podIPs")},
		{Name: "NS", ValueFrom: field("metadata.namespace")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "GREETING", Value: "hello from $(POD_IP)"},
		{Name: "PATH", Value: "/opt/bin"},
	}}
	env, err := containerEnv(pod, c, "10.128.0.5", "10.160.0.1")
	require.NoError(t, err)
	require.Equal(t, []string{"PATH=/opt/bin", "HOSTNAME=web-zero", "HOME=/root", "POD_IP=10.128.0.5", "IPS=10.128.0.5",
		"NS=shop", "APP=web", "NODE=node-a", "GREETING=hello from 10.128.0.5"}, env)
	argv, err := containerArgv(c, env)
	require.NoError(t, err)
	require.Equal(t, []string{"sh", "-c", "echo hello from 10.128.0.5 10.128.0.5"}, argv)

	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: field("status.phase")}}
	_, err = containerEnv(pod, c, "10.128.0.5", "10.160.0.1")
	require.ErrorContains(t, err, `field "status.phase" is not supported`)
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	_, err = containerEnv(pod, c, "10.128.0.5", "10.160.0.1")
	require.ErrorContains(t, err, "only values and the downward API")

	_, err = containerArgv(corev1.Container{Name: "app", Image: "nginx"}, nil)
	require.ErrorContains(t, err, "names no command")
}
