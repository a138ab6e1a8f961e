package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/plexusnet/plexus/internal/testing/dataplane"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/materialize"
)

// The traffic benchmarks run on two clusters with the data plane (root):
//
//	go test ./test/e2e -run '^$' -bench 'LocalFirst|Churn' -benchtime 1x -timeout 30m
//
// Each reports shares and times of real connections from a Pod in cluster
// b to the clusterset VIP; BENCHMARKS.md has the figures.

// unreadyProbe fails while /tmp/unready-<pod> exists.
var unreadyProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
	Command: []string{"sh", "-c", "test ! -e /tmp/unready-$HOSTNAME"}}}, PeriodSeconds: 1, FailureThreshold: 1}

// vip waits for the ServiceImport of shop/hello in c and returns its VIP.
func vip(ctx context.Context, t testing.TB, c *kubetest.Cluster) string {
	t.Helper()
	var ip string
	require.Eventually(t, func() bool {
		si, err := mcsclient.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil || len(si.Spec.IPs) == 0 {
			return false
		}
		ip = si.Spec.IPs[0]
		return true
	}, time.Minute, 100*time.Millisecond, "the import of shop/hello in %s has a VIP", c.Name)
	return ip
}

// answer is one connection's outcome as the client loop prints it: the
// time it was opened (Unix ms, the host's clock) and the answer's last line.
type answer struct {
	at   time.Time
	text string
}

func (a answer) from(cluster string) bool { return strings.HasSuffix(a.text, " in cluster "+cluster) }

// connections runs shell in the client Pod (a loop printing "<unix ms>
// <answer>" per connection) and returns what it printed.
func connections(ctx context.Context, t testing.TB, c *kubetest.Cluster, shell string) []answer {
	got, err := tryConnections(ctx, c, shell)
	require.NoError(t, err)
	return got
}

// tryConnections is connections for a goroutine of its own.
func tryConnections(ctx context.Context, c *kubetest.Cluster, shell string) ([]answer, error) {
	out, stderr, err := dataplane.Exec(ctx, c.Config, "shop", "client", "", []string{"sh", "-c", shell}, dataplane.SPDY)
	if err != nil {
		return nil, fmt.Errorf("client loop: %w: %s", err, stderr)
	}
	var got []answer
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if a, ok := parseAnswer(line); ok {
			got = append(got, a)
		}
	}
	return got, nil
}

// parseAnswer reads one line of a client loop: "<unix ms> <answer>".
func parseAnswer(line string) (answer, bool) {
	ms, text, _ := strings.Cut(line, " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return answer{}, false
	}
	return answer{at: time.UnixMilli(n), text: strings.TrimSpace(text)}, true
}

// liveLoop is a client loop whose answers are read as they come, so a
// benchmark acts on what the client sees rather than on a clock.
type liveLoop struct {
	mu   sync.Mutex
	got  []answer
	done chan error
}

// startLoop runs shell (a client loop as connections takes) in b's client
// Pod in the background.
func startLoop(ctx context.Context, c *kubetest.Cluster, shell string) *liveLoop {
	l := &liveLoop{done: make(chan error, 1)}
	r, w := io.Pipe()
	execErr := make(chan error, 1)
	go func() {
		err := dataplane.ExecTo(ctx, c.Config, "shop", "client", "", []string{"sh", "-c", shell}, dataplane.SPDY, w, io.Discard)
		_ = w.CloseWithError(err)
		execErr <- err
	}()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if a, ok := parseAnswer(sc.Text()); ok {
				l.mu.Lock()
				l.got = append(l.got, a)
				l.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, r) // a line too long for the scanner
		l.done <- <-execErr           // every line read: the loop is over
	}()
	return l
}

// waitFor waits until the answers so far satisfy cond.
func (l *liveLoop) waitFor(t testing.TB, what string, cond func([]answer) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return cond(l.got)
	}, time.Minute, 10*time.Millisecond, "the client loop: %s", what)
}

// finish waits for the loop to end and returns every answer.
func (l *liveLoop) finish(t testing.TB) []answer {
	t.Helper()
	require.NoError(t, <-l.done, "client loop")
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// after counts the answers from cluster opened after t0.
func after(got []answer, t0 time.Time, cluster string) int {
	n := 0
	for _, a := range got {
		if a.at.After(t0) && a.from(cluster) {
			n++
		}
	}
	return n
}

// sequential opens n connections one after another, pausing pause between.
// The client sends nothing: a server that answers and closes with unread
// data in its socket resets the connection, and the answer can be lost.
func sequential(vip string, n int, pause string) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do t=$(date +%%s%%3N); r=$(nc -w 1 %s 80 </dev/null 2>&1 | tail -n 1); echo "$t $r"; i=$((i+1)); sleep %s; done`, n, vip, pause)
}

// setReadyByProbe makes the Pod's unreadyProbe fail or pass and returns
// when the API reports the Pod so: the moment it went (un)ready.
func setReadyByProbe(ctx context.Context, t testing.TB, c *kubetest.Cluster, kube kubernetes.Interface, pod string, ready bool) time.Time {
	t.Helper()
	cmd := "touch /tmp/unready-$HOSTNAME"
	if ready {
		cmd = "rm -f /tmp/unready-$HOSTNAME"
	}
	_, stderr, err := dataplane.Exec(ctx, c.Config, "shop", pod, "", []string{"sh", "-c", cmd}, dataplane.SPDY)
	require.NoError(t, err, stderr)
	var at time.Time
	require.Eventually(t, func() bool {
		p, err := kube.CoreV1().Pods("shop").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && (cond.Status == corev1.ConditionTrue) == ready {
				at = time.Now()
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "pod %s ready=%v", pod, ready)
	return at
}

func helloPods(ctx context.Context, t testing.TB, kube kubernetes.Interface, want int) []string {
	t.Helper()
	var names []string
	require.Eventually(t, func() bool {
		pods, err := kube.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			return false
		}
		names = names[:0]
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return len(names) == want
	}, time.Minute, 100*time.Millisecond, "%d hello Pods run", want)
	return names
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// localFirstClusterset: cluster a exports shop/hello with two Pods,
// cluster b with one whose readiness unreadyProbe decides, both with local
// first (at least 1 ready local endpoint); a client Pod runs in b. It
// returns once b's connections stay on b, with the VIP and b's Pod.
func localFirstClusterset(ctx context.Context, t testing.TB) (*clusterset, string, string) {
	cs := startClusterset(t)
	localFirst := map[string]string{materialize.AnnotationLocalFirst: "true"}
	deployHello(ctx, t, cs.kubeA, "a", 2, nil)
	deployHello(ctx, t, cs.kubeB, "b", 1, unreadyProbe)
	cs.export(ctx, t, cs.a, localFirst)
	cs.export(ctx, t, cs.b, localFirst)
	startClientPod(ctx, t, cs.kubeB)
	ip := vip(ctx, t, cs.b)
	local := helloPods(ctx, t, cs.kubeB, 1)[0]
	helloPods(ctx, t, cs.kubeA, 2)
	t.Cleanup(func() {
		if t.Failed() {
			dumpSteering(t, cs)
		}
	})
	requireAnswersFrom(ctx, t, cs, ip, "b")
	return cs, ip, local
}

// requireAnswersFrom waits until 20 connections in a row from b's client
// are all answered by cluster.
func requireAnswersFrom(ctx context.Context, t testing.TB, cs *clusterset, ip, cluster string) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := tryConnections(ctx, cs.b, sequential(ip, 20, "0"))
		return err == nil && len(got) == 20 && !slices.ContainsFunc(got, func(a answer) bool { return !a.from(cluster) })
	}, time.Minute, 500*time.Millisecond, "b's connections all go to cluster %s", cluster)
}

// dumpSteering logs what b's kube-proxy was given: the slices' hints, the
// nodes' zones, the import's annotations, and its nftables rules.
func dumpSteering(t testing.TB, cs *clusterset) {
	ctx := context.Background() // the test's own may have ended
	slices, _ := cs.kubeB.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{})
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			t.Logf("slice %s labels %v endpoint %v ready=%v hints=%+v", s.Name, s.Labels, ep.Addresses, ep.Conditions.Ready, ep.Hints)
		}
	}
	nodes, _ := cs.kubeB.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		t.Logf("node %s labels %v", n.Name, n.Labels)
	}
	si, _ := mcsclient.NewForConfigOrDie(cs.b.Config).MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "hello", metav1.GetOptions{})
	t.Logf("import annotations %v", si.Annotations)
	out, _ := exec.Command("sh", "-c", fmt.Sprintf("ip netns exec plx%d-b nft list ruleset | grep -A3 derived-hello", os.Getpid())).CombinedOutput()
	t.Logf("kube-proxy in b:\n%s", out)
}

// TestLocalFirstFailover: with local first, b's connections stay on b's
// Pod while it is ready, move to a's Pods when it goes unready, and come
// back when it is ready again (BenchmarkLocalFirst measures how fast).
func TestLocalFirstFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, ip, local := localFirstClusterset(ctx, t)
	setReadyByProbe(ctx, t, cs.b, cs.kubeB, local, false)
	requireAnswersFrom(ctx, t, cs, ip, "a")
	setReadyByProbe(ctx, t, cs.b, cs.kubeB, local, true)
	requireAnswersFrom(ctx, t, cs, ip, "b")
}

// BenchmarkLocalFirst: cluster b exports shop/hello with one Pod, cluster a
// with two, both with local first (at least 1 ready local endpoint). From
// a Pod in b: the share of 1,000 connections answered by b while its Pod
// is ready; then, over 50 trials, the time from b's Pod going unready to
// the first answer from a (failover), and from it going ready again to the
// first answer from b (the way back).
func BenchmarkLocalFirst(b *testing.B) {
	trials, shareConns := 50, 1000
	if n, err := strconv.Atoi(os.Getenv("LOCAL_FIRST_TRIALS")); err == nil && n > 0 {
		trials = n // a shorter run while developing
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cs, ip, local := localFirstClusterset(ctx, b)

	b.ResetTimer()
	for range b.N {
		got := connections(ctx, b, cs.b, sequential(ip, shareConns, "0"))
		localN, remoteN, others := 0, 0, map[string]int{}
		for _, a := range got {
			switch {
			case a.from("b"):
				localN++
			case a.from("a"):
				remoteN++
			default:
				others[a.text]++
			}
		}
		if len(others) > 0 {
			b.Logf("connections answered by neither cluster: %v", others)
		}
		b.ReportMetric(float64(localN)/float64(localN+remoteN)*100, "local-%")
		b.ReportMetric(float64(remoteN), "remote-conns")
		b.ReportMetric(float64(len(got)-localN-remoteN), "unanswered-conns")
		b.ReportMetric(float64(len(got)), "conns")

		var failover, back []time.Duration
		failed := 0
		for range trials {
			// The client opens a connection every ~30 ms; the Pod goes
			// unready once b has answered, ready again once a has, and the
			// loop runs on past the way back.
			loop := startLoop(ctx, cs.b, sequential(ip, 300, "0.02"))
			loop.waitFor(b, "an answer from b", func(got []answer) bool { return after(got, time.Time{}, "b") > 0 })
			down := setReadyByProbe(ctx, b, cs.b, cs.kubeB, local, false)
			loop.waitFor(b, "an answer from a once b's Pod is unready", func(got []answer) bool { return after(got, down, "a") > 0 })
			up := setReadyByProbe(ctx, b, cs.b, cs.kubeB, local, true)
			loop.waitFor(b, "an answer from b once its Pod is ready", func(got []answer) bool { return after(got, up, "b") > 0 })
			got := loop.finish(b)
			firstAfter := func(t time.Time, cluster string) (time.Duration, bool) {
				for _, a := range got {
					if a.at.After(t) && a.from(cluster) {
						return a.at.Sub(t), true
					}
				}
				return 0, false
			}
			f, ok := firstAfter(down, "a")
			require.True(b, ok, "no answer from a after b's Pod went unready")
			w, ok := firstAfter(up, "b")
			require.True(b, ok, "no answer from b after its Pod was ready again")
			failover, back = append(failover, f), append(back, w)
			for _, a := range got {
				if !a.from("a") && !a.from("b") {
					failed++
					b.Logf("failed: %q at %s (down %s, up %s)", a.text, a.at.Format("15:04:05.000"), down.Format("15:04:05.000"), up.Format("15:04:05.000"))
				}
			}
		}
		b.ReportMetric(float64(percentile(failover, 0.5).Milliseconds()), "failover-p50-ms")
		b.ReportMetric(float64(percentile(failover, 0.99).Milliseconds()), "failover-p99-ms")
		b.ReportMetric(float64(percentile(back, 0.5).Milliseconds()), "back-p50-ms")
		b.ReportMetric(float64(percentile(back, 0.99).Milliseconds()), "back-p99-ms")
		b.ReportMetric(float64(failed), "failed-conns")
	}
}

// churnLoop opens a connection every 50 ms (20 a second) for n, each in
// the background with a 2 s timeout, and prints each outcome.
func churnLoop(ip string, n int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do (t=$(date +%%s%%3N); r=$(nc -w 2 %s 80 </dev/null 2>&1 | tail -n 1); echo "$t $r") & i=$((i+1)); sleep 0.05; done; wait`, n, ip)
}

// BenchmarkConnectionsDuringChurn: cluster a exports shop/hello with three
// Pods (a tcpSocket readiness probe and a 3 s preStop sleep, as a service
// that drains would have); a Pod in b opens 20 connections a second to the
// VIP while a's Deployment does a rolling restart, and again while a's
// membership is killed and started again. It reports the share that
// succeeded.
func BenchmarkConnectionsDuringChurn(b *testing.B) {
	cs := startClusterset(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	tcpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}
	deployHello(ctx, b, cs.kubeA, "a", 3, tcpProbe)
	preStop := `{"spec":{"template":{"spec":{"containers":[{"name":"hello","lifecycle":{"preStop":{"sleep":{"seconds":3}}}}]}}}}`
	_, err := cs.kubeA.AppsV1().Deployments("shop").Patch(ctx, "hello", types.StrategicMergePatchType, []byte(preStop), metav1.PatchOptions{})
	require.NoError(b, err)
	waitRolledOut(ctx, b, cs.kubeA)
	cs.export(ctx, b, cs.a, nil)
	startClientPod(ctx, b, cs.kubeB)
	ip := vip(ctx, b, cs.b)
	require.Eventually(b, func() bool {
		got, err := tryConnections(ctx, cs.b, sequential(ip, 5, "0"))
		return err == nil && len(got) == 5 && !slices.ContainsFunc(got, func(a answer) bool { return !a.from("a") })
	}, time.Minute, 500*time.Millisecond, "b reaches a")

	share := func(got []answer) float64 {
		ok := 0
		for _, a := range got {
			if a.from("a") {
				ok++
			}
		}
		return float64(ok) / float64(len(got)) * 100
	}
	b.ResetTimer()
	for range b.N {
		// The restart begins once the client has 100 answers, and the
		// loop runs on well past its end.
		loop := startLoop(ctx, cs.b, churnLoop(ip, 1200))
		loop.waitFor(b, "100 answers before the restart", func(got []answer) bool { return len(got) >= 100 })
		restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"plexus.io/restarted-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
		_, err := cs.kubeA.AppsV1().Deployments("shop").Patch(ctx, "hello", types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{})
		require.NoError(b, err)
		waitRolledOut(ctx, b, cs.kubeA)
		got := loop.finish(b)
		require.NotEmpty(b, got, "the client loop ran")
		b.ReportMetric(share(got), "rolling-ok-%")
		b.ReportMetric(float64(len(got)), "rolling-conns")

		// Membership is killed once the client has 100 answers and started
		// again after 200 more connections (10 s at 20 a second) opened
		// while it was down.
		loop = startLoop(ctx, cs.b, churnLoop(ip, 600))
		loop.waitFor(b, "100 answers before the kill", func(got []answer) bool { return len(got) >= 100 })
		cs.members["a"].Kill()
		killed := time.Now()
		loop.waitFor(b, "200 connections while membership is down", func(got []answer) bool {
			n := 0
			for _, a := range got {
				if a.at.After(killed) {
					n++
				}
			}
			return n >= 200
		})
		cs.members["a"].Restart()
		got = loop.finish(b)
		require.NotEmpty(b, got, "the client loop ran")
		b.ReportMetric(share(got), "membership-ok-%")
		b.ReportMetric(float64(len(got)), "membership-conns")
	}
}

// waitRolledOut waits until shop/hello's rollout is complete.
func waitRolledOut(ctx context.Context, t testing.TB, kube kubernetes.Interface) {
	t.Helper()
	require.Eventually(t, func() bool {
		d, err := kube.AppsV1().Deployments("shop").Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && rolledOut(d)
	}, 3*time.Minute, 200*time.Millisecond, "shop/hello rolls out")
}

func rolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
}
