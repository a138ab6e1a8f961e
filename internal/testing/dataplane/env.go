package dataplane

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// containerEnv is the environment a kubelet gives the container: PATH,
// HOSTNAME and HOME, then the spec's variables with the downward API's
// fields resolved ($(VAR) references to earlier ones expanded).
func containerEnv(pod *corev1.Pod, c corev1.Container, podIP, hostIP string) ([]string, error) {
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	vars := map[string]string{"PATH": defaultPath, "HOSTNAME": hostname, "HOME": "/root"}
	order := []string{"PATH", "HOSTNAME", "HOME"}
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath, podIP, hostIP)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("env %s: only values and the downward API's fieldRef are supported here", e.Name)
		}
	}
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env, nil
}

// fieldValue is a downward API field of the Pod.
func fieldValue(pod *corev1.Pod, path, podIP, hostIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("field %q is not supported", path)
}

// containerArgv is the command a container runs: its command and args with
// $(VAR) expanded. The host's binaries stand in for the image's, so a
// container that relies on its image's entrypoint cannot run here.
func containerArgv(c corev1.Container, env []string) ([]string, error) {
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) == 0 {
		return nil, fmt.Errorf("container %s names no command: the host's binaries stand in for image %q, whose entrypoint is unknown here", c.Name, c.Image)
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for i := range argv {
		argv[i] = expand(argv[i], vars)
	}
	return argv, nil
}

// expand replaces $(NAME) by the variable's value when it is defined and
// $$ by $, as the kubelet does; other text stays as it is.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
