package app_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/app"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// pauser is the Kubernetes transport of a replica that can be paused.
// While paused, every request the replica sends (lease renewals, reads and
// writes alike) is held before it reaches the wire; on resume each held
// request is sent as it was, whatever became of its context meanwhile.
// That is a process that passed its leadership checks, was stopped with
// its writes on their way (a long GC, a frozen VM), and woke up: nothing
// on its side can take those writes back, only the API server can refuse
// them.
type pauser struct {
	mu   sync.Mutex
	wake chan struct{} // non-nil while paused; closed on resume
	held []*exchange
}

// exchange is one held request and, once sent, its answer.
type exchange struct {
	method, path string
	sent         bool
	status       int
	err          error
}

func (x exchange) String() string {
	return fmt.Sprintf("%s %s -> %d %v", x.method, x.path, x.status, x.err)
}

// wrap is a rest.Config transport wrapper. client-go calls it once per
// client built from the config; all of them share p's pause.
func (p *pauser) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		p.mu.Lock()
		wake := p.wake
		var x *exchange
		if wake != nil {
			x = &exchange{method: req.Method, path: req.URL.Path}
			p.held = append(p.held, x)
		}
		p.mu.Unlock()
		if wake == nil {
			return next.RoundTrip(req)
		}
		<-wake
		resp, err := next.RoundTrip(req.WithContext(context.WithoutCancel(req.Context())))
		p.mu.Lock()
		x.sent, x.err = true, err
		if resp != nil {
			x.status = resp.StatusCode
		}
		p.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// pause holds every request from now on.
func (p *pauser) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
}

// resume sends the held requests and lets new ones through. It is safe to
// call more than once (the test's cleanup calls it so that a failed test
// never leaves the replica hanging).
func (p *pauser) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// exchanges returns copies of the held requests whose method is one of
// methods and whose path names resource.
func (p *pauser) exchanges(resource string, methods ...string) []exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []exchange
	for _, x := range p.held {
		if slices.Contains(methods, x.method) && slices.Contains(strings.Split(x.path, "/"), resource) {
			out = append(out, *x)
		}
	}
	return out
}

func (p *pauser) all() []exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]exchange, 0, len(p.held))
	for _, x := range p.held {
		out = append(out, *x)
	}
	return out
}

// leading reads an importer's plexus_importer_leader gauge.
func leading(t testing.TB, reg *prometheus.Registry) bool {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "plexus_importer_leader" {
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					return true
				}
			}
		}
	}
	return false
}

// readiness is what the slices of a service say: each endpoint's address
// and whether it is ready, with the addresses that appear more than once
// across the slices.
func readiness(ss []discovery.EndpointSlice) (ready map[string]bool, twice []string) {
	ready = map[string]bool{}
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			a := ep.Addresses[0]
			if _, ok := ready[a]; ok {
				twice = append(twice, a)
			}
			ready[a] = ep.Conditions.Ready != nil && *ep.Conditions.Ready
		}
	}
	return ready, twice
}

// endpointsWith is shop/web on http=80 with the endpoints of want, ready
// or not.
func endpointsWith(want map[string]bool) *membershipv1.ServiceEndpoints {
	addrs := slices.Sorted(func(yield func(string) bool) {
		for a := range want {
			if !yield(a) {
				return
			}
		}
	})
	eps := sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs...)
	for _, ep := range eps.Groups[0].Endpoints {
		ep.Conditions = &membershipv1.EndpointConditions{Ready: want[ep.Addresses[0]], Serving: true}
	}
	return eps
}

// failover is the setting of the stale-leader tests: importers A (whose
// Kubernetes transport can be paused) and B on one cluster and one source,
// A leading with shop/web imported as initial.
type failover struct {
	e      *env
	east   *sourcetest.Source
	a, b   *importer
	pauseA *pauser
}

func startFailover(t *testing.T, maxPerSlice int, initial map[string]bool) *failover {
	t.Helper()
	e := newEnv(t)
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(endpointsWith(initial))
	opts := func(id string, cfg *rest.Config) app.Options {
		o := app.DefaultOptions().WithRESTConfig(cfg).WithIdentity(id)
		// test/e2e/failover_test.go's timings: the lease runs out 2 s
		// after the last renewal.
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 250*time.Millisecond
		o.LeaseName = "importer-fencing"
		o.MaxEndpointsPerSlice = maxPerSlice
		return o
	}

	f := &failover{e: e, east: east, pauseA: &pauser{}}
	cfgA := rest.CopyConfig(e.cluster.Config)
	cfgA.Wrap(f.pauseA.wrap)
	f.a = e.startImporter(t, opts("importer-a", cfgA), east)
	// Registered after A: it runs before A stops, so that a failed test
	// does not leave A's requests held and its shutdown hanging.
	t.Cleanup(f.pauseA.resume)
	require.Eventually(t, func() bool { return leading(t, f.a.registry) }, waitFor, tick, "A did not lead")
	require.Eventually(t, func() bool {
		ready, twice := readiness(e.slicesOf(t, "shop", "web"))
		return fmt.Sprint(ready) == fmt.Sprint(initial) && len(twice) == 0
	}, waitFor, tick, "A did not import shop/web")

	f.b = e.startImporter(t, opts("importer-b", e.cluster.Config), east)
	require.False(t, leading(t, f.b.registry), "B leads beside A")
	return f
}

// pauseWithWrite pauses A, makes a change A must write with method, and
// waits until that write is held on its way.
func (f *failover) pauseWithWrite(t *testing.T, change map[string]bool, method string) {
	t.Helper()
	f.pauseA.pause()
	f.east.Set(endpointsWith(change))
	// A's last renewal was accepted less than the renew deadline ago, so
	// its guard lets the write out: it is on the wire when A "stops".
	require.Eventually(t, func() bool { return len(f.pauseA.exchanges("endpointslices", method)) > 0 }, 5*time.Second, tick,
		"A's %s of the slice was not held; held: %v", method, f.pauseA.all())
}

// takeOver waits until B leads and has written want.
func (f *failover) takeOver(t *testing.T, want map[string]bool) {
	t.Helper()
	require.Eventually(t, func() bool { return leading(t, f.b.registry) }, waitFor, tick, "B did not take over")
	f.settled(t, want, "B did not write %v", want)
}

// settled waits until the slices of shop/web say want, each endpoint once.
func (f *failover) settled(t *testing.T, want map[string]bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		ready, twice := readiness(f.e.slicesOf(t, "shop", "web"))
		return fmt.Sprint(ready) == fmt.Sprint(want) && len(twice) == 0
	}, waitFor, tick, append([]any{msg}, args...)...)
}

// watchSlices watches the slices of shop/web from now on.
func (f *failover) watchSlices(t *testing.T) watch.Interface {
	t.Helper()
	list, err := f.e.kube.DiscoveryV1().EndpointSlices("shop").List(ctxFor(t), metav1.ListOptions{})
	require.NoError(t, err)
	w, err := f.e.kube.DiscoveryV1().EndpointSlices("shop").Watch(ctxFor(t), metav1.ListOptions{
		LabelSelector: mcsnames.LabelMCSServiceName + "=web", ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return w
}

// TestPausedLeaderCannotOverwrite: a leader paused with a slice update on
// the wire wakes up after another replica took over and wrote twice more.
// The update carries the resourceVersion A read, so the API server refuses
// it: leader election does not fence, the compare does. Without it the
// update would put A's stale view back (the test fails: the write is not
// a 409 and the slices change after A wakes).
func TestPausedLeaderCannotOverwrite(t *testing.T) {
	initial := map[string]bool{"10.1.0.1": true, "10.1.0.2": true, "10.1.0.3": true}
	first := map[string]bool{"10.1.0.1": true, "10.1.0.2": false, "10.1.0.3": true}
	second := map[string]bool{"10.1.0.1": true, "10.1.0.2": false, "10.1.0.3": true, "10.1.0.4": true}
	f := startFailover(t, 100, initial)

	// A reads the slice, passes its lease check and sends the update of
	// 10.1.0.2's readiness; then it stops.
	f.pauseWithWrite(t, first, http.MethodPut)
	require.Empty(t, f.pauseA.exchanges("endpointslices", http.MethodPost, http.MethodDelete, http.MethodPatch),
		"only an update of the one slice is expected")

	// B takes over from its warm caches and writes the first change, then
	// a second one: the slice is two resourceVersions past A's.
	f.takeOver(t, first)
	require.Len(t, f.e.slicesOf(t, "shop", "web"), 1)
	f.east.Set(endpointsWith(second))
	f.settled(t, second, "B did not write the second change")
	before := resourceVersions(f.e.slicesOf(t, "shop", "web"))

	// A wakes: its held requests go out as they were.
	f.pauseA.resume()
	require.Eventually(t, func() bool {
		for _, x := range f.pauseA.exchanges("endpointslices", http.MethodPut) {
			if !x.sent {
				return false
			}
		}
		return true
	}, waitFor, tick)
	for _, x := range f.pauseA.exchanges("endpointslices", http.MethodPut) {
		require.NoError(t, x.err)
		require.Equal(t, http.StatusConflict, x.status, "A's stale update of the slice was not refused: %v", x)
	}
	t.Logf("A's held requests: %v", f.pauseA.all())
	require.Eventually(t, func() bool { return !leading(t, f.a.registry) }, waitFor, tick, "A still leads after it woke")

	// Nothing touched the slices after A woke: with A no longer leading
	// and B idle, they are at the versions they had before A woke, with
	// B's content.
	idle(t, f.b)
	after := f.e.slicesOf(t, "shop", "web")
	require.Equal(t, before, resourceVersions(after), "the slices changed after A woke")
	ready, twice := readiness(after)
	require.Equal(t, second, ready)
	require.Empty(t, twice)
	require.True(t, leading(t, f.b.registry))
}

// TestPausedLeaderStaleCreateIsCleanedUp: the one write without a compare
// is a create (a slice named by the API server from generateName cannot be
// expected not to exist). A paused leader's held create lands as an extra
// slice holding endpoints that B has already written, with A's stale
// view of them; B sees the slice, which is managed and owned like its own,
// and packs the endpoints again: each endpoint in one slice, with B's
// content.
func TestPausedLeaderStaleCreateIsCleanedUp(t *testing.T) {
	initial := map[string]bool{"10.1.0.1": true, "10.1.0.2": true}
	first := map[string]bool{"10.1.0.1": true, "10.1.0.2": true, "10.1.0.3": true}
	second := map[string]bool{"10.1.0.1": true, "10.1.0.2": true, "10.1.0.3": false}
	f := startFailover(t, 2, initial) // the first slice is full: 10.1.0.3 needs a new one

	f.pauseWithWrite(t, first, http.MethodPost)
	f.takeOver(t, first)
	f.east.Set(endpointsWith(second))
	f.settled(t, second, "B did not write the second change")
	before := len(f.e.slicesOf(t, "shop", "web"))
	w := f.watchSlices(t)

	f.pauseA.resume()
	require.Eventually(t, func() bool {
		xs := f.pauseA.exchanges("endpointslices", http.MethodPost)
		return len(xs) > 0 && xs[0].sent
	}, waitFor, tick)
	t.Logf("A's held requests: %v", f.pauseA.all())
	x := f.pauseA.exchanges("endpointslices", http.MethodPost)[0]
	require.NoError(t, x.err)
	require.Equal(t, http.StatusCreated, x.status, "A's stale create was expected to land: %v", x)

	// The stale slice is an extra slice, with 10.1.0.3 ready (A's view)
	// beside B's copy. B packs the endpoints again: one copy goes.
	landed := time.Now()
	f.settled(t, second, "B did not clean up A's stale slice")
	t.Logf("duplicate endpoints for at most %s after A's create landed", time.Since(landed).Round(time.Millisecond))
	require.Len(t, f.e.slicesOf(t, "shop", "web"), before)
	var events []string
	for stale := false; !stale; {
		select {
		case ev := <-w.ResultChan():
			s, ok := ev.Object.(*discovery.EndpointSlice)
			require.True(t, ok, "watch event %s %T", ev.Type, ev.Object)
			ready, _ := readiness([]discovery.EndpointSlice{*s})
			events = append(events, fmt.Sprintf("%s %s %v", ev.Type, s.Name, ready))
			stale = ev.Type == watch.Added && fmt.Sprint(ready) == "map[10.1.0.3:true]"
		case <-time.After(waitFor):
			require.FailNow(t, "A's stale slice was not seen", "%v", events)
		}
	}
	t.Logf("slice events after A woke, up to its stale slice: %v", events)
	// And it stays clean: every request A held has been answered, A no
	// longer leads, so it writes nothing more, and B has done all that
	// followed; nothing is left to change the slices.
	require.Eventually(t, func() bool {
		for _, x := range f.pauseA.all() {
			if !x.sent {
				return false
			}
		}
		return !leading(t, f.a.registry)
	}, waitFor, tick, "A's held requests: %v", f.pauseA.all())
	idle(t, f.b)
	ready, twice := readiness(f.e.slicesOf(t, "shop", "web"))
	require.Equal(t, second, ready)
	require.Empty(t, twice)
}

// resourceVersions are the slices' resourceVersions by name.
func resourceVersions(slices []discovery.EndpointSlice) map[string]string {
	out := make(map[string]string, len(slices))
	for _, s := range slices {
		out[s.Name] = s.ResourceVersion
	}
	return out
}
