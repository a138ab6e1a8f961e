// Package slices replays seeded churn traces through Plexus's slice packing
// and through the Kubernetes EndpointSlice reconciler (k8s.io/endpointslice),
// each writing to its own fake clientset, and counts the EndpointSlice writes
// (create, update, delete) each makes.
//
// A trace: one service starts with Initial ready endpoints; then Steps
// steps each change 1..MaxChanges random endpoints (add a new one, remove
// one, or flip one's readiness); then a rolling replacement of every
// endpoint in batches of BatchPercent. In ModeKinds a step makes one kind of
// change and the rollout adds a batch, then removes the batch it replaces; in
// ModeMixed every change of a step picks its kind and the rollout replaces a
// batch in one reconcile. Every reconciler sees every state of the trace and
// lists its slices back from its clientset before each reconcile, as a
// controller reading its informer would; the endpoints both are asked for
// are the ones the Kubernetes reconciler derives from the pods.
//
// The Kubernetes reconciler places endpoints in map iteration order, so its
// counts differ from run to run on the same trace; Compare runs it several
// times.
package slices

import (
	"fmt"
	"math/rand/v2"
	"sort"
)

// Mode says how changes are grouped into reconciles.
type Mode string

const (
	// ModeKinds makes every churn step one kind of change, and rolls out by
	// adding a batch of new endpoints in one reconcile and removing the
	// batch they replace in the next.
	ModeKinds Mode = "kinds"
	// ModeMixed lets every change of a churn step pick its kind, and rolls
	// out by replacing a batch in one reconcile.
	ModeMixed Mode = "mixed"
)

// Config describes one trace.
type Config struct {
	Seed                 uint64
	Mode                 Mode
	Initial              int // endpoints at the start
	Steps                int // churn steps
	MaxChanges           int // changes per churn step, at least 1
	BatchPercent         int // rollout batch size in percent of the endpoints
	MaxEndpointsPerSlice int
}

// DefaultConfig is the trace of the project's figures.
func DefaultConfig(seed uint64, mode Mode) Config {
	return Config{Seed: seed, Mode: mode, Initial: 1000, Steps: 500, MaxChanges: 20, BatchPercent: 10, MaxEndpointsPerSlice: 100}
}

// Pod is one endpoint of the trace.
type Pod struct {
	Name  string
	IP    string
	Node  int
	Ready bool
}

// Nodes is the number of nodes pods are spread over; node i is in zone i%3.
const Nodes = 10

// Phases of a trace, for per-phase counts.
const (
	PhaseInitial = "initial"
	PhaseChurn   = "churn"
	PhaseRollout = "rollout"
)

// Reconciler is one implementation under comparison.
type Reconciler interface {
	// Reconcile makes the slices hold pods.
	Reconcile(pods []Pod) error
	// Writes returns the creates, updates and deletes made so far.
	Writes() (creates, updates, deletes int)
	// SliceSizes returns the endpoints in each current slice and the
	// endpoints they hold as "ip/ready" strings.
	SliceSizes() ([]int, []string, error)
	// Placement returns the slice holding each endpoint address, and the
	// number of slices.
	Placement() (map[string]string, int, error)
}

type trace struct {
	cfg  Config
	rng  *rand.Rand
	pods map[string]*Pod
	next int
}

func (t *trace) add() *Pod {
	t.next++
	p := &Pod{
		Name:  fmt.Sprintf("pod-%d", t.next),
		IP:    fmt.Sprintf("10.%d.%d.%d", t.next>>16&0xff, t.next>>8&0xff, t.next&0xff),
		Node:  t.rng.IntN(Nodes),
		Ready: true,
	}
	t.pods[p.Name] = p
	return p
}

func (t *trace) names() []string {
	out := make([]string, 0, len(t.pods))
	for n := range t.pods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (t *trace) random() *Pod {
	names := t.names()
	if len(names) == 0 {
		return nil
	}
	return t.pods[names[t.rng.IntN(len(names))]]
}

func (t *trace) snapshot() []Pod {
	out := make([]Pod, 0, len(t.pods))
	for _, n := range t.names() {
		out = append(out, *t.pods[n])
	}
	return out
}

// change applies one change of the given kind (0 add, 1 remove, 2 flip).
func (t *trace) change(kind int) {
	switch kind {
	case 0:
		t.add()
	case 1:
		if p := t.random(); p != nil {
			delete(t.pods, p.Name)
		}
	default:
		if p := t.random(); p != nil {
			p.Ready = !p.Ready
		}
	}
}

// Replay runs the trace of cfg, calling every reconciler in lockstep after
// each change of state, and passes the phase of each reconcile to onPhase.
func Replay(cfg Config, onPhase func(phase string), recs ...Reconciler) error {
	if cfg.MaxChanges < 1 || cfg.BatchPercent < 1 || cfg.BatchPercent > 100 {
		return fmt.Errorf("invalid trace config %+v", cfg)
	}
	t := &trace{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1)), pods: map[string]*Pod{}}
	step := func(phase string) error {
		onPhase(phase)
		pods := t.snapshot()
		for _, r := range recs {
			if err := r.Reconcile(pods); err != nil {
				return fmt.Errorf("%s reconcile: %w", phase, err)
			}
		}
		return nil
	}

	for range cfg.Initial {
		t.add()
	}
	if err := step(PhaseInitial); err != nil {
		return err
	}

	for range cfg.Steps {
		n := 1 + t.rng.IntN(cfg.MaxChanges)
		kind := t.rng.IntN(3)
		for range n {
			if cfg.Mode == ModeMixed {
				kind = t.rng.IntN(3)
			}
			t.change(kind)
		}
		if err := step(PhaseChurn); err != nil {
			return err
		}
	}

	// Roll out: every endpoint present now is replaced, a batch at a time,
	// old endpoints picked at random.
	old := t.names()
	t.rng.Shuffle(len(old), func(i, j int) { old[i], old[j] = old[j], old[i] })
	batch := (len(old)*cfg.BatchPercent + 99) / 100
	for len(old) > 0 {
		n := min(batch, len(old))
		for range n {
			t.add()
		}
		if cfg.Mode == ModeKinds {
			if err := step(PhaseRollout); err != nil {
				return err
			}
		}
		for _, name := range old[:n] {
			delete(t.pods, name)
		}
		old = old[n:]
		if err := step(PhaseRollout); err != nil {
			return err
		}
	}
	return nil
}
