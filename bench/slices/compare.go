package slices

import (
	"fmt"
	"slices"
	"strings"
)

// Result is what one implementation did over one trace.
type Result struct {
	Creates, Updates, Deletes int
	// ByPhase holds the writes of each phase.
	ByPhase map[string]int
	// Forced counts, over all reconciles after the first, the slices that
	// held an endpoint the reconcile removed or changed: writes no
	// placement can avoid. The rest of the writes went to placing new
	// endpoints (or, for Plexus, to nothing: compaction turns updates into
	// deletes).
	Forced int
	// MeanSlices is the slice count averaged over the reconciles.
	MeanSlices float64
	// Sizes holds the endpoints of each final slice, largest first.
	Sizes []int
}

// Writes returns the total API writes.
func (r Result) Writes() int { return r.Creates + r.Updates + r.Deletes }

// Comparison is both implementations over the same trace. The peer places
// endpoints in map iteration order, so its counts vary from run to run; it
// is run several times on the same trace.
type Comparison struct {
	Config Config
	Plexus Result
	Peer   []Result // sorted by writes
}

// PeerMedian returns the peer run with the median writes.
func (c Comparison) PeerMedian() Result { return c.Peer[len(c.Peer)/2] }

// PeerBest returns the peer run with the fewest writes.
func (c Comparison) PeerBest() Result { return c.Peer[0] }

// phased attributes the writes of each reconcile to the current phase and
// counts the writes the trace forces.
type phased struct {
	Reconciler
	phase      *string
	byPhase    map[string]int
	prev       map[string]Pod // by address
	forced     int
	sliceSum   int
	reconciles int
}

func (p *phased) Reconcile(pods []Pod) error {
	at, n, err := p.Placement()
	if err != nil {
		return err
	}
	now := make(map[string]Pod, len(pods))
	for _, pod := range pods {
		now[pod.IP] = pod
	}
	touched := map[string]bool{}
	for ip, was := range p.prev {
		if is, ok := now[ip]; !ok || is != was {
			touched[at[ip]] = true
		}
	}
	c0, u0, d0 := p.Writes()
	if err := p.Reconciler.Reconcile(pods); err != nil {
		return err
	}
	c1, u1, d1 := p.Writes()
	p.byPhase[*p.phase] += c1 - c0 + u1 - u0 + d1 - d0
	p.forced += len(touched)
	p.prev = now
	_, n, err = p.Placement()
	if err != nil {
		return err
	}
	p.sliceSum += n
	p.reconciles++
	return nil
}

// Compare replays the trace of cfg through Plexus and peerRuns instances of
// the peer, and checks that all end holding the trace's final endpoints.
func Compare(cfg Config, peerRuns int) (Comparison, error) {
	if peerRuns < 1 {
		return Comparison{}, fmt.Errorf("peer runs %d: need at least one", peerRuns)
	}
	var phase string
	px, err := NewPlexus(cfg.MaxEndpointsPerSlice)
	if err != nil {
		return Comparison{}, err
	}
	sides := []*phased{{Reconciler: px, phase: &phase, byPhase: map[string]int{}}}
	for range peerRuns {
		peer, err := NewPeer(cfg.MaxEndpointsPerSlice)
		if err != nil {
			return Comparison{}, err
		}
		sides = append(sides, &phased{Reconciler: peer, phase: &phase, byPhase: map[string]int{}})
	}
	last := &lastPods{}
	recs := []Reconciler{last}
	for _, s := range sides {
		recs = append(recs, s)
	}
	if err := Replay(cfg, func(p string) { phase = p }, recs...); err != nil {
		return Comparison{}, err
	}

	want := make([]string, 0, len(last.pods))
	for _, p := range last.pods {
		want = append(want, fmt.Sprintf("[%s]/%v", p.IP, p.Ready))
	}
	slices.Sort(want)
	results := make([]Result, len(sides))
	for i, s := range sides {
		sizes, eps, err := s.SliceSizes()
		if err != nil {
			return Comparison{}, err
		}
		if !slices.Equal(want, eps) {
			return Comparison{}, fmt.Errorf("reconciler %d: final slices hold %d endpoints, the trace ends with %d, or their content differs",
				i, len(eps), len(want))
		}
		for _, n := range sizes {
			if n > cfg.MaxEndpointsPerSlice {
				return Comparison{}, fmt.Errorf("reconciler %d: a slice holds %d endpoints", i, n)
			}
		}
		c, u, d := s.Writes()
		results[i] = Result{Creates: c, Updates: u, Deletes: d, ByPhase: s.byPhase, Sizes: sizes,
			Forced: s.forced, MeanSlices: float64(s.sliceSum) / float64(s.reconciles)}
	}
	peers := results[1:]
	slices.SortStableFunc(peers, func(a, b Result) int { return a.Writes() - b.Writes() })
	return Comparison{Config: cfg, Plexus: results[0], Peer: peers}, nil
}

// lastPods remembers the last state of the trace.
type lastPods struct{ pods []Pod }

func (l *lastPods) Reconcile(pods []Pod) error {
	l.pods = pods
	return nil
}
func (l *lastPods) Writes() (int, int, int)                    { return 0, 0, 0 }
func (l *lastPods) SliceSizes() ([]int, []string, error)       { return nil, nil, nil }
func (l *lastPods) Placement() (map[string]string, int, error) { return nil, 0, nil }

func perSlice(sizes []int) string {
	if len(sizes) == 0 {
		return "-"
	}
	total := 0
	for _, s := range sizes {
		total += s
	}
	return fmt.Sprintf("%.1f (%d–%d)", float64(total)/float64(len(sizes)), sizes[len(sizes)-1], sizes[0])
}

// Markdown renders comparisons as two tables: totals, and writes per phase.
// Peer figures are the median run with the range over all runs.
func Markdown(cs []Comparison) string {
	var b strings.Builder
	b.WriteString("| seed | mode | Plexus writes (c/u/d) | peer writes, median (c/u/d) | peer writes, range | Plexus slices | peer slices | Plexus endpoints/slice | peer endpoints/slice |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range cs {
		px, pm := c.Plexus, c.PeerMedian()
		fmt.Fprintf(&b, "| %d | %s | %d (%d/%d/%d) | %d (%d/%d/%d) | %d–%d | %d | %d | %s | %s |\n",
			c.Config.Seed, c.Config.Mode,
			px.Writes(), px.Creates, px.Updates, px.Deletes,
			pm.Writes(), pm.Creates, pm.Updates, pm.Deletes,
			c.PeerBest().Writes(), c.Peer[len(c.Peer)-1].Writes(),
			len(px.Sizes), len(pm.Sizes), perSlice(px.Sizes), perSlice(pm.Sizes))
	}
	b.WriteString("\nWrites per phase, writes beyond those removals and changes force, and mean slice count over the trace (Plexus / peer median run):\n\n")
	b.WriteString("| seed | mode | initial | churn | rollout | beyond forced | mean slices |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for _, c := range cs {
		px, pm := c.Plexus, c.PeerMedian()
		fmt.Fprintf(&b, "| %d | %s |", c.Config.Seed, c.Config.Mode)
		for _, ph := range []string{PhaseInitial, PhaseChurn, PhaseRollout} {
			fmt.Fprintf(&b, " %d / %d |", px.ByPhase[ph], pm.ByPhase[ph])
		}
		fmt.Fprintf(&b, " %d / %d | %.2f / %.2f |\n",
			px.Writes()-px.ByPhase[PhaseInitial]-px.Forced, pm.Writes()-pm.ByPhase[PhaseInitial]-pm.Forced,
			px.MeanSlices, pm.MeanSlices)
	}
	return b.String()
}
