package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Runner follows one member until its context ends.
type Runner interface {
	Run(ctx context.Context)
}

// GroupConfig configures a Group.
type GroupConfig struct {
	// Dial connects to a member's membership.
	Dial func(Member) (*grpc.ClientConn, error)
	// Start returns the follower of a member that joined (prev nil) or
	// whose address changed (prev is the follower it replaces, stopped,
	// so the successor can resume where it stopped). The Group runs it.
	Start func(m Member, conn *grpc.ClientConn, prev Runner) (Runner, error)
	// Left, when set, is called once a member that left was stopped.
	Left func(Member)
	// Gone, when set, is called Grace after a member left, unless it
	// joined again in the meantime: what it left behind may go.
	Gone func(Member)
	// Grace is how long a member that left may come back before it is
	// gone.
	Grace time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer, when set, gets the group's metrics.
	Registerer prometheus.Registerer
}

// State is one member as the Group holds it.
type State struct {
	Member Member
	// Runner is the member's follower; nil once it left.
	Runner Runner
	// Since is when the member joined, or its address last changed.
	Since time.Time
	// LeftAt is when the member left; zero while it is a member.
	LeftAt time.Time
	// Err is why the member could not be followed (its address cannot be
	// dialled), if so.
	Err error
}

type entry struct {
	State
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
	timer  *time.Timer
}

// Group keeps one follower running per member of an inventory.
type Group struct {
	cfg     GroupConfig
	logger  *slog.Logger
	members prometheus.Gauge
	changes *prometheus.CounterVec

	mu      sync.Mutex
	entries map[string]*entry
}

// NewGroup returns a Group; Run follows an inventory with it.
func NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Dial == nil || cfg.Start == nil {
		return nil, fmt.Errorf("fleet: a group needs Dial and Start")
	}
	g := &Group{cfg: cfg, logger: cfg.Logger, entries: map[string]*entry{},
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_fleet_members",
			Help: "Member clusters followed, as the inventory names them.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_fleet_changes_total",
			Help: "Changes to the member clusters followed: joined, moved (address or TLS identity changed), left, gone (left and not back within the grace).",
		}, []string{"change"}),
	}
	if g.logger == nil {
		g.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{g.members, g.changes} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register fleet metrics: %w", err)
			}
		}
	}
	return g, nil
}

// Run follows inv until ctx ends, then stops every follower and waits for
// them.
func (g *Group) Run(ctx context.Context, inv Inventory) error {
	defer g.stopAll()
	g.logger.Info("following the member clusters", "inventory", inv.Describe())
	current := map[string]Member{}
	return inv.Run(ctx, func(next []Member) {
		next, err := check(next)
		if err != nil {
			g.logger.Warn("member set not applied; the members stay as they were", "inventory", inv.Describe(), "error", err)
			return
		}
		d := Compare(current, next)
		for _, m := range d.Left {
			g.leave(m)
			delete(current, m.Name)
		}
		for i, m := range d.Moved {
			g.move(ctx, d.Was[i], m)
			current[m.Name] = m
		}
		for _, m := range d.Joined {
			g.join(ctx, m)
			current[m.Name] = m
		}
		if !d.Empty() {
			g.logger.Info("member clusters changed", "members", len(current), "joined", names(d.Joined), "moved", names(d.Moved), "left", names(d.Left))
		}
		g.members.Set(float64(len(current)))
	})
}

// States returns every member, and every member that left within the
// grace, sorted by name.
func (g *Group) States() []State {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]State, 0, len(g.entries))
	for _, e := range g.entries {
		out = append(out, e.State)
	}
	slices.SortFunc(out, func(a, b State) int { return strings.Compare(a.Member.Name, b.Member.Name) })
	return out
}

// join starts following m; a member back within its grace keeps what it
// left behind.
func (g *Group) join(ctx context.Context, m Member) {
	g.mu.Lock()
	if e := g.entries[m.Name]; e != nil && e.timer != nil {
		// Forgotten under the lock: a grace timer that fired already
		// finds another entry (or none) and lets the member be.
		e.timer.Stop()
		delete(g.entries, m.Name)
		g.logger.Info("member cluster back within its grace", "cluster", m.Name, "left_at", e.LeftAt)
	}
	g.mu.Unlock()
	g.changes.WithLabelValues("joined").Inc()
	g.start(ctx, m, nil)
}

// move reconnects m at its new address; the new follower resumes from the
// old one's position.
func (g *Group) move(ctx context.Context, was, m Member) {
	prev := g.stop(was.Name)
	g.changes.WithLabelValues("moved").Inc()
	g.logger.Info("member cluster moved; reconnecting", "cluster", m.Name, "from", was.Addr, "to", m.Addr)
	g.start(ctx, m, prev)
}

// leave stops following m, and lets it go after the grace.
func (g *Group) leave(m Member) {
	g.stop(m.Name)
	g.changes.WithLabelValues("left").Inc()
	if g.cfg.Left != nil {
		g.cfg.Left(m)
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	e := &entry{State: State{Member: m, LeftAt: now}}
	e.timer = time.AfterFunc(g.cfg.Grace, func() { g.gone(m.Name, e) })
	g.entries[m.Name] = e
	g.logger.Info("member cluster left; what it exported stays until the grace passes", "cluster", m.Name, "grace", g.cfg.Grace)
}

// gone forgets a member that left and did not come back.
func (g *Group) gone(name string, e *entry) {
	g.mu.Lock()
	if g.entries[name] != e {
		g.mu.Unlock()
		return
	}
	delete(g.entries, name)
	g.mu.Unlock()
	g.changes.WithLabelValues("gone").Inc()
	g.logger.Info("member cluster gone: it did not come back within the grace", "cluster", name)
	if g.cfg.Gone != nil {
		g.cfg.Gone(e.Member)
	}
}

// start dials m and runs its follower.
func (g *Group) start(ctx context.Context, m Member, prev Runner) {
	e := &entry{State: State{Member: m, Since: time.Now()}}
	var err error
	if e.conn, err = g.cfg.Dial(m); err == nil {
		if e.Runner, err = g.cfg.Start(m, e.conn, prev); err != nil {
			_ = e.conn.Close()
			e.conn = nil
		}
	}
	if err != nil {
		e.Err = err
		g.logger.Warn("member cluster cannot be followed", "cluster", m.Name, "addr", m.Addr, "error", err)
	} else {
		runCtx, cancel := context.WithCancel(ctx)
		e.cancel, e.done = cancel, make(chan struct{})
		go func() {
			defer close(e.done)
			e.Runner.Run(runCtx)
		}()
	}
	g.mu.Lock()
	g.entries[m.Name] = e
	g.mu.Unlock()
}

// stop stops the follower of name, closes its connection, and returns it.
func (g *Group) stop(name string) Runner {
	g.mu.Lock()
	e := g.entries[name]
	delete(g.entries, name)
	g.mu.Unlock()
	if e == nil {
		return nil
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	if e.conn != nil {
		_ = e.conn.Close()
	}
	return e.Runner
}

// stopAll stops every follower and every grace timer.
func (g *Group) stopAll() {
	g.mu.Lock()
	var all []string
	for name := range g.entries {
		all = append(all, name)
	}
	g.mu.Unlock()
	for _, name := range all {
		g.stop(name)
	}
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
