package leader

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
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
