package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of the election flags, as client-go's components use them.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Header is the header of health check answers that names the leader a
// replica last observed (`plexusctl status` shows it).
const Header = "plexus-leader"

// Config is the election's part of a service's flags.
type Config struct {
	// LeaderElect turns on leader election; without it this replica
	// always leads.
	LeaderElect bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election as
	// client-go defines them.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// LeaseNamespace and LeaseName name the Lease object.
	LeaseNamespace string
	LeaseName      string
}

// DefaultConfig returns the defaults: election on, the Lease leaseName in
// the namespace of $POD_NAMESPACE, else "default".
func DefaultConfig(leaseName string) Config {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	return Config{
		LeaderElect:    true,
		LeaseDuration:  DefaultLeaseDuration,
		RenewDeadline:  DefaultRenewDeadline,
		RetryPeriod:    DefaultRetryPeriod,
		LeaseNamespace: ns,
		LeaseName:      leaseName,
	}
}

// AddFlags registers --leader-elect (described by what, the part of the
// help that says what the leader does), --lease-duration, --renew-deadline,
// --retry-period, --lease-namespace and --lease-name.
func (c *Config) AddFlags(fs *pflag.FlagSet, what string) {
	fs.BoolVar(&c.LeaderElect, "leader-elect", c.LeaderElect, what)
	fs.DurationVar(&c.LeaseDuration, "lease-duration", c.LeaseDuration, "how long a non-leader waits after the last renewal before it takes the lease over")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", c.RenewDeadline, "how long the leader keeps retrying to renew before it gives up leading")
	fs.DurationVar(&c.RetryPeriod, "retry-period", c.RetryPeriod, "time between two attempts to acquire or renew the lease")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", c.LeaseNamespace, "namespace of the leader election Lease ($POD_NAMESPACE when set)")
	fs.StringVar(&c.LeaseName, "lease-name", c.LeaseName, "name of the leader election Lease")
}

// Validate returns the settings client-go would refuse, as flag errors.
func (c *Config) Validate() []error {
	if !c.LeaderElect {
		return nil
	}
	var errs []error
	switch {
	case c.RetryPeriod <= 0:
		errs = append(errs, fmt.Errorf("--retry-period: must be positive, got %s", c.RetryPeriod))
	case c.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(c.RetryPeriod)):
		errs = append(errs, fmt.Errorf("--renew-deadline (%s): must be more than %.1f × --retry-period (%s)", c.RenewDeadline, leaderelection.JitterFactor, c.RetryPeriod))
	case c.LeaseDuration <= c.RenewDeadline:
		errs = append(errs, fmt.Errorf("--lease-duration (%s): must be more than --renew-deadline (%s)", c.LeaseDuration, c.RenewDeadline))
	case c.LeaseDuration%time.Second != 0:
		// The Lease records whole seconds, and other replicas wait what it
		// records: 2.5s would let them take over after 2s, while this one
		// still counts itself the leader.
		errs = append(errs, fmt.Errorf("--lease-duration (%s): must be a whole number of seconds, as the Lease records it", c.LeaseDuration))
	}
	if c.LeaseNamespace == "" || c.LeaseName == "" {
		errs = append(errs, errors.New("--lease-namespace and --lease-name: must not be empty"))
	}
	return errs
}

// NewIdentity returns a replica identity: the host name and a random
// suffix, so two replicas on one host (or one restarted) differ.
func NewIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(b), nil
}

// Elector follows this replica's leadership.
type Elector struct {
	identity string
	gauge    prometheus.Gauge

	mu     sync.Mutex
	term   context.Context // the accepted term; nil when not leading
	leader string          // the last leader observed
	// le, the renewals of its lock and the renew deadline are the
	// campaign's, for Valid.
	le            *leaderelection.LeaderElector
	renewed       *renewals
	renewDeadline time.Duration
}

// ErrNotLeading is Valid's answer on a replica that does not lead.
var ErrNotLeading = errors.New("this replica does not lead")

// Valid reports whether this replica may write now: it leads, and (with
// election on) the API server accepted a renewal of its lease that it sent
// less than the renew deadline ago.
//
// No other replica can hold the lease before the lease duration has
// passed since that renewal was sent, and Validate keeps the renew
// deadline below it, so a leader that was paused (a long GC, a stopped
// VM) refuses its writes before anyone else can have started. A write
// that passed this check and was then paused on its way is not stopped
// by it: every write that matters also carries a compare.
func (e *Elector) Valid() error {
	e.mu.Lock()
	term, le, renewed, deadline := e.term, e.le, e.renewed, e.renewDeadline
	e.mu.Unlock()
	if term == nil || term.Err() != nil {
		return ErrNotLeading
	}
	if le == nil {
		return nil // no election: the only replica
	}
	// A leader that wakes from a pause and reads another holder's record
	// knows at once.
	if !le.IsLeader() {
		return fmt.Errorf("%w: the lease is held by %s", ErrNotLeading, le.GetLeader())
	}
	ago, ok := renewed.since()
	if !ok {
		return fmt.Errorf("%w: no renewal of the lease was accepted", ErrNotLeading)
	}
	if ago >= deadline {
		return fmt.Errorf("%w: the lease was last renewed %s ago, the renew deadline is %s", ErrNotLeading, ago.Round(time.Millisecond), deadline)
	}
	return nil
}

// NewElector returns the elector of identity and registers its gauge,
// metric (for example plexus_importer_leader), 1 while this replica leads.
func NewElector(identity, metric, help string, reg prometheus.Registerer) (*Elector, error) {
	e := &Elector{identity: identity, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metric, Help: help, ConstLabels: prometheus.Labels{"identity": identity},
	})}
	if err := reg.Register(e.gauge); err != nil {
		return nil, fmt.Errorf("register %s: %w", metric, err)
	}
	return e, nil
}

// Identity returns this replica's identity.
func (e *Elector) Identity() string { return e.identity }

// Lead returns the current term while this replica leads; otherwise the
// last leader observed and false.
func (e *Elector) Lead() (context.Context, string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term != nil && e.term.Err() == nil {
		return e.term, e.identity, true
	}
	return nil, e.leader, false
}

// Leader returns the last leader observed and whether it is this replica.
func (e *Elector) Leader() (string, bool) {
	_, leader, ok := e.Lead()
	if ok {
		return e.identity, true
	}
	return leader, false
}

// Start marks term accepted: from now until it ends this replica leads.
// A term that has already ended is ignored.
func (e *Elector) Start(term context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if term.Err() != nil {
		return
	}
	e.term, e.leader = term, e.identity
	e.gauge.Set(1)
}

// Stop marks the end of leading.
func (e *Elector) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.term = nil
	e.gauge.Set(0)
}

func (e *Elector) observe(leader string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leader = leader
}

// Check is a readiness check: it fails only while no leader is known, for
// example when the Lease cannot be read.
func (e *Elector) Check(context.Context) error {
	if _, leader, ok := e.Lead(); !ok && leader == "" {
		return errors.New("no leader observed yet")
	}
	return nil
}

// Run campaigns for leadership until ctx ends, again after every term.
// lead runs each term, with a context that ends when leadership is lost
// or ctx ends, and must call Start once it accepts work. Two terms of
// this replica never overlap: the next campaign waits for the previous
// term's lead to return. When ctx ends, the Lease is released
// (ReleaseOnCancel), but only after lead has returned, so that no other
// replica starts while this one's work is still under way.
func (e *Elector) Run(ctx context.Context, lock resourcelock.Interface, c Config, lead func(term context.Context), logger *slog.Logger) {
	name := c.LeaseNamespace + "/" + c.LeaseName
	renewed := &renewals{Interface: lock}
	for ctx.Err() == nil {
		if err := e.campaign(ctx, renewed, c, name, lead, logger); err != nil {
			// Validate checked the same rules.
			logger.Error("leader election not started", "error", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.RetryPeriod):
		}
	}
}

// campaign runs one client-go elector until it loses the lease or ctx
// ends, and returns once its term's lead has returned too.
func (e *Elector) campaign(ctx context.Context, lock *renewals, c Config, name string, lead func(term context.Context), logger *slog.Logger) error {
	// The elector gets a context of its own: with ReleaseOnCancel it
	// releases the lease as soon as that ends, so it ends only after the
	// term's work has.
	elect, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var mu sync.Mutex
	var termDone chan struct{} // closed when the term's lead returns
	closing := false
	// endTerms refuses terms from now on and waits for the one running.
	endTerms := func() {
		mu.Lock()
		closing = true
		done := termDone
		mu.Unlock()
		if done != nil {
			<-done
		}
	}
	stopWatching := context.AfterFunc(ctx, func() {
		endTerms()
		stopElecting()
	})
	defer stopWatching()

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.LeaseDuration,
		RenewDeadline:   c.RenewDeadline,
		RetryPeriod:     c.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(term context.Context) {
				mu.Lock()
				if closing {
					mu.Unlock()
					return
				}
				done := make(chan struct{})
				termDone = done
				mu.Unlock()
				defer close(done)
				// The term ends with the lease or with ctx, whichever
				// comes first.
				work, cancel := context.WithCancel(term)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				logger.Info("became leader", "lease", name)
				lead(work)
			},
			OnStoppedLeading: func() {
				if _, _, was := e.Lead(); was {
					logger.Warn("stopped leading", "lease", name)
				}
				e.Stop()
			},
			OnNewLeader: e.observe,
		},
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.le, e.renewed, e.renewDeadline = le, lock, c.RenewDeadline
	e.mu.Unlock()
	le.Run(elect)
	// le.Run returns when the lease is lost, or after the release; wait
	// for the term's work either way (a term whose callback has not
	// started yet starts cancelled and does nothing).
	stopElecting()
	endTerms()
	return nil
}
