package slices

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlexusWritesNoMoreThanPeer replays full-size traces and holds Plexus
// to the bar against one run of the Kubernetes reconciler. With one
// kind of change per step, Plexus must make fewer writes on every trace. With
// mixed steps both sit close to the floor set by the slice count, the peer's
// random placement moves its count by about 1 % from run to run, and so
// Plexus is held to fewer writes over the traces together. Final slice
// counts must not exceed the peer's on any trace. A few minutes on two cores.
func TestPlexusWritesNoMoreThanPeer(t *testing.T) {
	var cs []Comparison
	for _, mode := range []Mode{ModeKinds, ModeMixed} {
		var plexus, peer int
		for seed := uint64(1); seed <= 3; seed++ {
			c, err := Compare(DefaultConfig(seed, mode), 1)
			require.NoError(t, err)
			cs = append(cs, c)
			plexus += c.Plexus.Writes()
			peer += c.PeerBest().Writes()
			if mode == ModeKinds {
				require.Lessf(t, c.Plexus.Writes(), c.PeerBest().Writes(), "seed %d %s: writes", seed, mode)
			}
			require.LessOrEqualf(t, len(c.Plexus.Sizes), len(c.PeerBest().Sizes), "seed %d %s: slices", seed, mode)
		}
		require.Lessf(t, plexus, peer, "%s: writes over all traces", mode)
	}
	t.Log("\n" + Markdown(cs))
}

// TestReplayIsDeterministicForPlexus checks the trace and Plexus's side of
// it repeat exactly for a seed, which the figures rely on.
func TestReplayIsDeterministicForPlexus(t *testing.T) {
	cfg := Config{Seed: 7, Mode: ModeMixed, Initial: 300, Steps: 60, MaxChanges: 20, BatchPercent: 10, MaxEndpointsPerSlice: 50}
	a, err := Compare(cfg, 1)
	require.NoError(t, err)
	b, err := Compare(cfg, 1)
	require.NoError(t, err)
	require.Equal(t, a.Plexus, b.Plexus)
	require.Positive(t, a.Plexus.Writes())
}

// BenchmarkReplay reports the writes of the seed-1 trace per implementation;
// run it with -benchtime=1x.
func BenchmarkReplay(b *testing.B) {
	for _, mode := range []Mode{ModeKinds, ModeMixed} {
		b.Run(string(mode), func(b *testing.B) {
			var c Comparison
			for b.Loop() {
				var err error
				c, err = Compare(DefaultConfig(1, mode), 1)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(c.Plexus.Writes()), "plexus-writes")
			b.ReportMetric(float64(c.PeerMedian().Writes()), "peer-writes")
			b.ReportMetric(float64(len(c.Plexus.Sizes)), "plexus-slices")
			b.ReportMetric(float64(len(c.PeerMedian().Sizes)), "peer-slices")
		})
	}
}
