package leader

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

func TestConfigFlagsAndValidate(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "plexus-system")
	c := DefaultConfig("plexus-test")
	require.Equal(t, "plexus-system", c.LeaseNamespace)
	require.Empty(t, c.Validate())

	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs, "elect one replica")
	require.NoError(t, fs.Parse([]string{"--lease-duration=2s", "--renew-deadline=3s", "--retry-period=1s"}))
	require.ErrorContains(t, c.Validate()[0], "--lease-duration (2s): must be more than --renew-deadline (3s)")

	c = DefaultConfig("x")
	c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 2500*time.Millisecond, time.Second, 500*time.Millisecond
	require.ErrorContains(t, c.Validate()[0], "--lease-duration (2.5s): must be a whole number of seconds")
	c = DefaultConfig("x")
	c.RenewDeadline, c.RetryPeriod = time.Second, time.Second
	require.ErrorContains(t, c.Validate()[0], "--renew-deadline")
	c = DefaultConfig("")
	require.ErrorContains(t, c.Validate()[0], "--lease-name")
	c.LeaderElect = false
	require.Empty(t, c.Validate(), "nothing to check without election")
}

func TestElectorTerms(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, err := NewElector("me", "plexus_test_leader", "1 while leading", reg)
	require.NoError(t, err)
	require.Error(t, e.Check(context.Background()), "no leader known yet")

	e.observe("other")
	require.NoError(t, e.Check(context.Background()))
	leader, ok := e.Leader()
	require.Equal(t, "other", leader)
	require.False(t, ok)

	term, end := context.WithCancel(context.Background())
	e.Start(term)
	got, leader, ok := e.Lead()
	require.True(t, ok)
	require.Equal(t, "me", leader)
	require.Equal(t, term, got)
	require.Equal(t, 1.0, testutil.ToFloat64(e.gauge))

	end()
	_, _, ok = e.Lead()
	require.False(t, ok, "a term that ended is not leading, even before Stop")
	e.Stop()
	require.Equal(t, 0.0, testutil.ToFloat64(e.gauge))

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	e.Start(ended)
	_, _, ok = e.Lead()
	require.False(t, ok, "an ended term is never accepted")

	_, err = NewElector("me", "plexus_test_leader", "again", reg)
	require.Error(t, err, "one gauge per registry")
	id, err := NewIdentity()
	require.NoError(t, err)
	require.Contains(t, id, "_")
}

func TestValidWithoutElection(t *testing.T) {
	e, err := NewElector("me", "plexus_valid_test_leader", "help", prometheus.NewRegistry())
	require.NoError(t, err)
	require.ErrorIs(t, e.Valid(), ErrNotLeading, "no term yet")
	term, end := context.WithCancel(context.Background())
	e.Start(term)
	require.NoError(t, e.Valid(), "the only replica leads while its term lasts")
	end()
	require.ErrorIs(t, e.Valid(), ErrNotLeading)
}

// TestDeposedLeaderStopsWriting: a leader that finds, when it next renews,
// that another replica has taken its Lease over (as after a long pause)
// refuses writes at once, although its term only ends when the renew
// deadline runs out.
func TestDeposedLeaderStopsWriting(t *testing.T) {
	cluster := kubetest.StartAPIServer(t, kubetest.StartEtcd(t))
	client := cluster.Clientset
	e, err := NewElector("old", "plexus_deposed_test_leader", "help", prometheus.NewRegistry())
	require.NoError(t, err)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: "deposed"},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "old"},
	}
	// A long renew deadline: without the check the old leader would keep
	// writing for all of it.
	cfg := Config{LeaderElect: true, LeaseDuration: 6 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 100 * time.Millisecond,
		LeaseNamespace: "default", LeaseName: "deposed"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	term := firstTerm(t, ctx, e, lock, cfg)
	require.NoError(t, e.Valid())

	// Another replica holds the Lease now, renewed a moment ago.
	// (The old leader keeps renewing meanwhile: retry on its updates.)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := client.CoordinationV1().Leases("default").Get(ctx, "deposed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = ptr.To("new")
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		_, err = client.CoordinationV1().Leases("default").Update(ctx, lease, metav1.UpdateOptions{})
		return err
	}))

	require.Eventually(t, func() bool { return e.Valid() != nil }, 2*time.Second, 10*time.Millisecond,
		"writes refused once the old leader has seen the new holder")
	require.ErrorIs(t, e.Valid(), ErrNotLeading)
	require.NoError(t, term.Err(), "refused well before the renew deadline ends the term")
}

// firstTerm runs e's campaign until ctx ends and returns its first term,
// which lasts until leadership is lost.
func firstTerm(t *testing.T, ctx context.Context, e *Elector, lock resourcelock.Interface, cfg Config) context.Context {
	t.Helper()
	terms := make(chan context.Context, 1)
	go e.Run(ctx, lock, cfg, func(term context.Context) {
		e.Start(term)
		terms <- term
		<-term.Done()
	}, slog.New(slog.DiscardHandler))
	select {
	case term := <-terms:
		return term
	case <-time.After(30 * time.Second):
		require.FailNow(t, "never led")
		return nil
	}
}

// flakyLock is a Lease lock whose updates can be made to fail, and which
// records when the last accepted update of its holder's record was sent.
type flakyLock struct {
	resourcelock.Interface
	mu      sync.Mutex
	failing bool
	sent    time.Time
}

func (l *flakyLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	l.mu.Lock()
	failing := l.failing
	l.mu.Unlock()
	if failing {
		return errors.New("renewal refused")
	}
	err := l.Interface.Update(ctx, rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && rec.HolderIdentity == l.Identity() {
		l.sent = start
	}
	return err
}

func (l *flakyLock) fail() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = true
	return l.sent
}

func leaseLock(t *testing.T, name, identity string) *resourcelock.LeaseLock {
	t.Helper()
	cluster := kubetest.StartAPIServer(t, kubetest.StartEtcd(t))
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: name},
		Client:     cluster.Clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
}

// TestValidCountsFromTheLastAcceptedRenewal: once renewals fail, writes
// are refused when the renew deadline has passed since the last renewal
// the API server accepted was sent. client-go's observed time, reset by
// the first failed renewal's read of the record, would allow them for up
// to a retry period longer.
func TestValidCountsFromTheLastAcceptedRenewal(t *testing.T) {
	lock := &flakyLock{Interface: leaseLock(t, "flaky", "me")}
	e, err := NewElector("me", "plexus_flaky_test_leader", "help", prometheus.NewRegistry())
	require.NoError(t, err)
	// A retry period long against the renew deadline makes the gap
	// between the last accepted renewal and the first failed one large.
	cfg := Config{LeaderElect: true, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 400 * time.Millisecond,
		LeaseNamespace: "default", LeaseName: "flaky"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	term := firstTerm(t, ctx, e, lock, cfg)
	// Wait for a renewal accepted after the term started.
	require.Eventually(t, func() bool {
		lock.mu.Lock()
		defer lock.mu.Unlock()
		return !lock.sent.IsZero()
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, e.Valid())

	last := lock.fail()
	// Sample until the term ends: no write may be allowed once the renew
	// deadline has passed since the last accepted renewal (a little slack
	// for the sampling itself).
	var allowedLate []time.Duration
	refused := false
	for term.Err() == nil {
		since := time.Since(last)
		err := e.Valid()
		if err == nil && since > cfg.RenewDeadline+20*time.Millisecond {
			allowedLate = append(allowedLate, since)
		}
		refused = refused || err != nil
		time.Sleep(5 * time.Millisecond)
	}
	require.True(t, refused)
	require.Empty(t, allowedLate, "writes allowed after the renew deadline since the last accepted renewal")
}

// TestReleaseAfterTheTermsWork: when the process stops, the Lease is
// released only after the term's work has returned, so no other replica
// starts while it is still under way.
func TestReleaseAfterTheTermsWork(t *testing.T) {
	lock := leaseLock(t, "release", "me")
	e, err := NewElector("me", "plexus_release_test_leader", "help", prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := Config{LeaderElect: true, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		LeaseNamespace: "default", LeaseName: "release"}
	holder := func() string {
		rec, _, err := lock.Get(context.Background())
		require.NoError(t, err)
		return rec.HolderIdentity
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	var during []string
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		e.Run(ctx, lock, cfg, func(term context.Context) {
			e.Start(term)
			close(leading)
			<-term.Done()
			// Work still finishing after the term ended, as a
			// reconcile that writes once more would.
			for range 5 {
				during = append(during, holder())
				time.Sleep(50 * time.Millisecond)
			}
		}, slog.New(slog.DiscardHandler))
	}()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "never led")
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Run did not return")
	}
	require.Equal(t, []string{"me", "me", "me", "me", "me"}, during, "the lease was released while the term's work went on")
	require.Empty(t, holder(), "released once the work was done")
}
