// Command demokube is the demo's hands on the Kubernetes API: it seeds the
// exporting cluster with a Deployment, its Service and ServiceExport (the
// cluster's kube-controller-manager makes the Pods, localkube runs them),
// scales the Deployment, flips a Pod's readiness, shows what the importer
// wrote in the member cluster, waits for it, and sends requests from a Pod
// through kube-apiserver's exec. kubectl is not needed.
//
// With localkube's data plane (LOCALKUBE_DATA_PLANE=1 in its env file) the
// Pods are real: each answers on 8080 with its name and cluster, its
// readiness probe fails while the file /tmp/unready-<pod> exists (set-ready
// execs into the Pod to make or remove it), and request connects from a
// client Pod. Without it, set-ready writes the Ready condition itself.
//
//	demokube seed      --kubeconfig A --namespace shop --service cart --replicas 3 --cluster a
//	demokube set-ready --kubeconfig A --namespace shop --service cart --ready=false
//	demokube scale     --kubeconfig A --namespace shop --service cart --replicas 4
//	demokube show      --kubeconfig B --namespace shop --service cart
//	demokube wait      --kubeconfig B --namespace shop --service cart --endpoints 4 --ready 3
//	demokube delete-workload --kubeconfig A --namespace shop --name vm-1
//	demokube request   --kubeconfig B --namespace shop --target cart.shop.svc.clusterset.local:80 --count 6
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/dataplane"
	"github.com/plexusnet/plexus/internal/version"
)

const usage = "usage: demokube seed|namespace|set-ready|scale|show|wait|export|dns|delete-workload|request [flags]"

func main() {
	if version.Asked(os.Args[1:]) {
		fmt.Println(version.Line("demokube"))
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster to act on")
	ns := fs.String("namespace", "shop", "namespace")
	service := fs.String("service", "cart", "service name")
	replicas := fs.Int("replicas", 3, "replicas of the service's Deployment (seed, scale)")
	pod := fs.String("pod", "", "pod name (set-ready; default: the first of the service's Pods that is not yet so)")
	ready := fs.Bool("ready", true, "readiness to set (set-ready)")
	endpoints := fs.Int("endpoints", -1, "endpoints to wait for (wait)")
	readyEndpoints := fs.Int("ready-endpoints", -1, "ready endpoints to wait for (wait)")
	name := fs.String("name", "", "object name (delete-workload)")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait")
	server := fs.String("server", "127.0.0.1:1053", "DNS server to ask (dns)")
	cluster := fs.String("cluster", "", "the cluster's name, which its Pods answer with (seed)")
	target := fs.String("target", "", "host:port to connect to from the client Pod (request)")
	count := fs.Int("count", 6, "connections to open (request)")
	expectFail := fs.Bool("expect-fail", false, "succeed only when every connection fails (request)")
	expectFrom := fs.String("expect-from", "", "comma-separated clusters that must each answer at least once (request)")
	if help := os.Args[1]; help == "-h" || help == "--help" || help == "help" {
		fmt.Println(usage + "\n\nflags (each command reads those it names):")
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return
	}
	_ = fs.Parse(os.Args[2:])
	if os.Args[1] == "dns" {
		if err := dig(*server, fs.Args(), *timeout); err != nil {
			fail(err)
		}
		return
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	d, err := newDriver(cfg)
	if err != nil {
		fail(err)
	}
	d.dataPlane = os.Getenv("LOCALKUBE_DATA_PLANE") == "1"
	switch os.Args[1] {
	case "seed":
		err = d.seed(ctx, *ns, *service, *replicas, *cluster)
	case "request":
		err = d.request(ctx, *ns, *target, *count, *expectFail, *expectFrom)
	case "namespace":
		err = d.namespace(ctx, *ns)
	case "set-ready":
		err = d.setReady(ctx, *ns, *service, *pod, *ready)
	case "scale":
		err = d.scale(ctx, *ns, *service, *replicas)
	case "show":
		err = d.show(ctx, *ns, *service)
	case "wait":
		err = d.wait(ctx, *ns, *service, *endpoints, *readyEndpoints)
	case "export":
		err = d.export(ctx, *ns, *service)
	case "delete-workload":
		err = workloadClientDelete(ctx, cfg, *ns, *name)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demokube:", err)
	os.Exit(1)
}

type driver struct {
	cfg  *rest.Config
	kube kubernetes.Interface
	mcs  mcsclient.Interface
	// dataPlane: the Pods run (localkube --data-plane).
	dataPlane bool
}

func newDriver(cfg *rest.Config) (*driver, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mcs, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &driver{cfg: cfg, kube: kube, mcs: mcs}, nil
}

func (d *driver) namespace(ctx context.Context, ns string) error {
	_, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// seed creates the namespace, a Deployment of replicas Pods labelled
// app=<service>, a Service selecting them and its ServiceExport, and waits
// until the Pods are ready.
func (d *driver) seed(ctx context.Context, ns, service string, replicas int, cluster string) error {
	if err := d.namespace(ctx, ns); err != nil {
		return err
	}
	labels := map[string]string{"app": service}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/cart:1",
					// With the data plane this runs: a line naming the Pod
					// and its cluster, on every connection.
					Command: []string{"sh", "-c", helloServer},
					Env: []corev1.EnvVar{{Name: "CLUSTER", Value: cluster},
						{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
						Command: []string{"sh", "-c", "test ! -e " + unreadyFile}}}, PeriodSeconds: 1, FailureThreshold: 1},
				}}},
			},
		},
	}
	if _, err := d.kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create deployment: %w", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports: []corev1.ServicePort{{
				Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http"),
			}},
		},
	}
	if _, err := d.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service: %w", err)
	}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns}}
	if _, err := d.mcs.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, export, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service export: %w", err)
	}
	fmt.Printf("namespace %s: Deployment %s (%d replicas), Service %s (port 80 -> http), ServiceExport %s\n", ns, service, replicas, service, service)
	return d.waitPods(ctx, ns, service, replicas)
}

// helloServer answers each connection on 8080 with a line naming the Pod
// and its cluster.
const helloServer = `exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo "hello from pod $POD_NAME in cluster $CLUSTER"'`

// unreadyFile makes the seeded Pods' readiness probe fail while it exists
// ($HOSTNAME is the Pod's name; the Pods share the host's /tmp).
const unreadyFile = "/tmp/unready-$HOSTNAME"

// scale sets the replicas of the service's Deployment through its scale
// subresource and waits until that many Pods are ready.
func (d *driver) scale(ctx context.Context, ns, service string, replicas int) error {
	sc, err := d.kube.AppsV1().Deployments(ns).GetScale(ctx, service, metav1.GetOptions{})
	if err != nil {
		return err
	}
	from := sc.Spec.Replicas
	sc.Spec.Replicas = int32(replicas)
	if _, err := d.kube.AppsV1().Deployments(ns).UpdateScale(ctx, service, sc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	fmt.Printf("deployment %s/%s scaled from %d to %d replicas\n", ns, service, from, replicas)
	return d.waitPods(ctx, ns, service, replicas)
}

// pods returns the service's Pods that are not being deleted, by name.
func (d *driver) pods(ctx context.Context, ns, service string) ([]corev1.Pod, error) {
	list, err := d.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + service})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPods waits until the controllers made want Pods of the service and
// the pod runner reported them Running with an address (a Pod whose
// readiness was set to false still counts: it runs).
func (d *driver) waitPods(ctx context.Context, ns, service string, want int) error {
	for {
		pods, err := d.pods(ctx, ns, service)
		if err != nil {
			return err
		}
		var running []string
		ready := 0
		for i := range pods {
			if pods[i].Status.Phase == corev1.PodRunning && pods[i].Status.PodIP != "" {
				running = append(running, pods[i].Name+" "+pods[i].Status.PodIP)
				if podReady(&pods[i]) {
					ready++
				}
			}
		}
		if len(running) >= want {
			fmt.Printf("%d Pods running, %d ready (made by kube-controller-manager, run by localkube): %s\n",
				len(running), ready, strings.Join(running, ", "))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d Pods of %s/%s running: %w", len(running), want, ns, service, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// setReady flips a Pod's readiness: the named Pod, or the first of the
// service's Pods whose readiness differs. With the data plane its
// readiness probe decides, so setReady makes the probe fail or pass; with
// none it sets the Ready condition through the status subresource, as a
// failing probe would.
func (d *driver) setReady(ctx context.Context, ns, service, pod string, ready bool) error {
	var p *corev1.Pod
	if pod != "" {
		got, err := d.kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p = got
	} else {
		pods, err := d.pods(ctx, ns, service)
		if err != nil {
			return err
		}
		for i := range pods {
			if podReady(&pods[i]) != ready {
				p = &pods[i]
				break
			}
		}
		if p == nil {
			return fmt.Errorf("no Pod of %s/%s has ready=%v to flip", ns, service, !ready)
		}
	}
	if d.dataPlane {
		return d.probeReady(ctx, ns, p.Name, ready)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	found := false
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			p.Status.Conditions[i].Status = status
			p.Status.Conditions[i].LastTransitionTime = metav1.Now()
			found = true
		}
	}
	if !found {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()})
	}
	_, err := d.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err == nil {
		fmt.Printf("pod %s/%s ready=%v\n", ns, p.Name, ready)
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// slices returns the importer's slices of a service.
func (d *driver) slices(ctx context.Context, ns, service string) ([]discoveryv1.EndpointSlice, error) {
	list, err := d.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: mcsnames.LabelMCSServiceName + "=" + service + "," + mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy,
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

func (d *driver) show(ctx context.Context, ns, service string) error {
	si, err := d.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("service import: %w", err)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	var ports []string
	for _, p := range si.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
	}
	var clusters []string
	for _, c := range si.Status.Clusters {
		clusters = append(clusters, c.Cluster)
	}
	fmt.Fprintf(w, "ServiceImport %s/%s\ttype=%s\tips=%s\tports=%s\tclusters=%s\n", ns, si.Name, si.Spec.Type, strings.Join(si.Spec.IPs, ","), strings.Join(ports, ","), strings.Join(clusters, ","))
	for _, c := range si.Status.Conditions {
		fmt.Fprintf(w, "  condition %s=%s\treason=%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	derived := mcsnames.DerivedServiceName(service)
	if svc, err := d.kube.CoreV1().Services(ns).Get(ctx, derived, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(w, "Service %s/%s\tclusterIP=%s\tselector=%v\tports=%d\n", ns, svc.Name, svc.Spec.ClusterIP, svc.Spec.Selector, len(svc.Spec.Ports))
	} else {
		fmt.Fprintf(w, "Service %s/%s\t%v\n", ns, derived, err)
	}
	slices, err := d.slices(ctx, ns, service)
	if err != nil {
		return err
	}
	for _, s := range slices {
		fmt.Fprintf(w, "EndpointSlice %s\tsource-cluster=%s\tservice-name=%s\tmanaged-by=%s\tendpoints=%d\n", s.Name,
			s.Labels[mcsnames.LabelSourceCluster], s.Labels[mcsnames.LabelServiceName], s.Labels[mcsnames.LabelManagedBy], len(s.Endpoints))
		for _, e := range s.Endpoints {
			ref := ""
			if e.TargetRef != nil {
				ref = e.TargetRef.Kind + "/" + e.TargetRef.Name
			}
			fmt.Fprintf(w, "  %s\tready=%v\tserving=%v\t%s\n", strings.Join(e.Addresses, ","), deref(e.Conditions.Ready), deref(e.Conditions.Serving), ref)
		}
	}
	return w.Flush()
}

func deref(b *bool) bool { return b != nil && *b }

// wait polls until the importer's slices of the service hold the given
// numbers of endpoints and ready endpoints (-1: any), and the
// ServiceImport has a VIP.
func (d *driver) wait(ctx context.Context, ns, service string, endpoints, ready int) error {
	var last string
	for {
		total, readyN := 0, 0
		slices, err := d.slices(ctx, ns, service)
		if err == nil {
			for _, s := range slices {
				for _, e := range s.Endpoints {
					total++
					if deref(e.Conditions.Ready) {
						readyN++
					}
				}
			}
			si, serr := d.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, service, metav1.GetOptions{})
			vip := serr == nil && (len(si.Spec.IPs) > 0 || si.Spec.Type == mcsv1beta1.Headless)
			last = fmt.Sprintf("%d endpoints, %d ready, vip=%v", total, readyN, vip)
			if vip && (endpoints < 0 || total == endpoints) && (ready < 0 || readyN == ready) {
				fmt.Printf("member cluster has %s\n", last)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out waiting; last seen: " + last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func workloadClientDelete(ctx context.Context, cfg *rest.Config, ns, name string) error {
	rc, err := workloadclient.NewRESTClient(cfg)
	if err != nil {
		return err
	}
	if err := workloadclient.ForNamespace(rc, ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	fmt.Printf("deleted ExternalWorkload %s/%s directly in the API (its address is now leaked)\n", ns, name)
	return nil
}

// export prints a ServiceExport's conditions, waiting until it carries
// Valid, Ready and Conflict.
func (d *driver) export(ctx context.Context, ns, service string) error {
	for {
		se, err := d.mcs.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("service export: %w", err)
		}
		if len(se.Status.Conditions) >= 3 {
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "ServiceExport %s/%s\n", ns, se.Name)
			for _, c := range se.Status.Conditions {
				fmt.Fprintf(w, "  condition %s=%s\treason=%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
			}
			return w.Flush()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ServiceExport %s/%s has only %d conditions: %w", ns, service, len(se.Status.Conditions), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dig asks server for the A records of each name (SRV for _port._tcp.
// names) and prints the answers, retrying until they come or timeout.
func dig(server string, names []string, timeout time.Duration) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
	deadline := time.Now().Add(timeout)
	for _, name := range names {
		for {
			answer, err := ask(r, name)
			if err == nil && len(answer) > 0 {
				fmt.Println(strings.Join(answer, "\n"))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no answer from %s for %s: %v", server, name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

func ask(r *net.Resolver, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var answer []string
	if svc, rest, ok := strings.Cut(name, "._tcp."); ok && strings.HasPrefix(svc, "_") {
		_, srvs, err := r.LookupSRV(ctx, strings.TrimPrefix(svc, "_"), "tcp", rest)
		for _, s := range srvs {
			answer = append(answer, fmt.Sprintf("%s.\tIN SRV %d %d %d %s", name, s.Priority, s.Weight, s.Port, s.Target))
		}
		return answer, err
	}
	addrs, err := r.LookupHost(ctx, name)
	for _, a := range addrs {
		answer = append(answer, fmt.Sprintf("%s.\tIN A %s", name, a))
	}
	return answer, err
}

// probeReady makes the Pod's readiness probe pass or fail, by exec in the
// Pod (removing or making the file it tests), and waits until its kubelet
// reports the Pod so.
func (d *driver) probeReady(ctx context.Context, ns, pod string, ready bool) error {
	cmd := "touch " + unreadyFile
	if ready {
		cmd = "rm -f " + unreadyFile
	}
	if _, stderr, err := dataplane.Exec(ctx, d.cfg, ns, pod, "", []string{"sh", "-c", cmd}, dataplane.WebSocket); err != nil {
		return fmt.Errorf("exec in %s/%s: %w %s", ns, pod, err, stderr)
	}
	fmt.Printf("exec in pod %s/%s: %s (its readiness probe tests that file)\n", ns, pod, cmd)
	for {
		p, err := d.kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if podReady(p) == ready {
			fmt.Printf("pod %s/%s ready=%v (reported by localkube's kubelet after its probe)\n", ns, pod, ready)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s did not become ready=%v: %w", ns, pod, ready, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// request opens count connections to target from a client Pod of the
// namespace (made when missing), each through exec in that Pod, and prints
// who answered: the Pods' name and cluster, or the error.
func (d *driver) request(ctx context.Context, ns, target string, count int, expectFail bool, expectFrom string) error {
	if !d.dataPlane {
		return errors.New("no data plane: Pods do not run (localkube --data-plane needs root)")
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if err := d.clientPod(ctx, ns); err != nil {
		return err
	}
	// The client sends nothing: the hello server's child may have exited
	// by the time a request line arrives, and socat, failing to hand it
	// on, then closes the connection before the greeting is read.
	script := fmt.Sprintf("nc -v -w 2 %s %s </dev/null 2>&1 | tail -n 1", host, port)
	connect := func() (string, bool) {
		out, _, err := dataplane.Exec(ctx, d.cfg, ns, "client", "", []string{"sh", "-c", script}, dataplane.WebSocket)
		out = strings.TrimSpace(out)
		if err != nil || !strings.HasPrefix(out, "hello from") {
			if out == "" {
				out = "no answer"
			}
			return "failed: " + out, false
		}
		return out, true
	}
	// kube-proxy programs a change of the slices within about a second
	// (its --min-sync-period): the count starts with the first connection
	// that behaves as the new slices say.
	start := time.Now()
	for {
		// No endpoints: kube-proxy rejects (Connection refused); a failure
		// of another kind is a connection sent to an endpoint now gone.
		if out, ok := connect(); ok != expectFail && (!expectFail || strings.Contains(out, "refused")) {
			break
		}
		if time.Since(start) > 10*time.Second {
			return fmt.Errorf("connections to %s still do not behave as the slices say after %s", target, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("from pod %s/client: %d connections to %s (kube-proxy had programmed the slices within %s)\n", ns, count, target, time.Since(start).Round(100*time.Millisecond))
	answers, failed := map[string]int{}, 0
	for range count {
		out, ok := connect()
		if !ok {
			failed++
		}
		answers[out]++
	}
	keys := make([]string, 0, len(answers))
	for k := range answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %dx %s\n", answers[k], k)
	}
	switch {
	case expectFail && failed < count:
		return fmt.Errorf("%d of %d connections were answered; none should have been", count-failed, count)
	case !expectFail && failed > 0:
		return fmt.Errorf("%d of %d connections failed", failed, count)
	}
	for _, c := range strings.Split(expectFrom, ",") {
		found := false
		for k := range answers {
			found = found || c != "" && strings.HasSuffix(k, " in cluster "+c)
		}
		if c != "" && !found {
			return fmt.Errorf("no answer came from cluster %s", c)
		}
	}
	return nil
}

// clientPod makes the Pod "client" in ns, a shell that only waits, and
// waits until it runs.
func (d *driver) clientPod(ctx context.Context, ns string) error {
	_, err := d.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "client", Image: "nicolaka/netshoot",
			Command: []string{"sh", "-c", "while :; do sleep 5; done"}}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the client pod: %w", err)
	}
	for {
		p, err := d.kube.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the client pod does not run: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
