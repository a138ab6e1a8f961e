package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/leader"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/pass"
)

// Options are repair's own flags.
type Options struct {
	// Interval is the time between two periodic passes.
	Interval time.Duration
	// LeakGrace, LeakStrikes and MaxReleaseFraction are the rules of the
	// decision (see package decide).
	LeakGrace          time.Duration
	LeakStrikes        int
	MaxReleaseFraction float64
	// DryRun makes the periodic passes report without acting.
	DryRun bool
	// Flags say where the source clusters' memberships are, whose
	// exports keep clusterset services alive: --source, --sources-file or
	// --inventory-namespace.
	fleet.Flags

	// Config is the leader election's part: --leader-elect and the
	// Lease flags.
	leader.Config

	// KubeQPS and KubeBurst are the client-side rate limits of Kubernetes
	// API calls.
	KubeQPS   float32
	KubeBurst int

	// restConfig, when set, is used instead of --kubeconfig (tests).
	restConfig *rest.Config
	// beforeAct runs between a pass's decision and its actions (tests).
	beforeAct pass.Hook
	// identity, when set, replaces the generated leader election identity.
	identity string
}

// Defaults of the flags that are not decide's.
const (
	DefaultInterval  = 60 * time.Second
	DefaultLeaseName = "plexus-repair"
)

// DefaultOptions returns the defaults of the flags. The Lease lives in the
// namespace of $POD_NAMESPACE, else "default".
func DefaultOptions() Options {
	return Options{
		Interval:           DefaultInterval,
		LeakGrace:          decide.DefaultLeakGrace,
		LeakStrikes:        decide.DefaultLeakStrikes,
		MaxReleaseFraction: decide.DefaultMaxReleaseFraction,
		Config:             leader.DefaultConfig(DefaultLeaseName),
		KubeQPS:            50,
		KubeBurst:          100,
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "interval", o.Interval, "time between two periodic repair passes (the first one runs this long after this replica becomes leader)")
	fs.DurationVar(&o.LeakGrace, "leak-grace", o.LeakGrace, "a leaked allocation (or orphaned slice) younger than this is never freed, nor a pool's deletion finished that stalled less long ago than this since the pool was marked deleting")
	fs.IntVar(&o.LeakStrikes, "leak-strikes", o.LeakStrikes, "consecutive passes a leak (or orphaned slice, or stalled pool deletion) must be seen in before it is freed (or finished)")
	fs.Float64Var(&o.MaxReleaseFraction, "max-release-fraction", o.MaxReleaseFraction, "most of a pool's allocations one pass may release, as a fraction (at least one when not 0; 0 turns releases off)")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "periodic passes report what they would do without releasing or deleting anything")
	o.Flags.AddFlags(fs, "alive (a clusterset service is alive while a member exports it or a ServiceImport for it exists)")
	o.Config.AddFlags(fs, "elect one active replica through a Lease; only the leader runs passes and acts")
	fs.Float32Var(&o.KubeQPS, "kube-api-qps", o.KubeQPS, "queries per second to the Kubernetes API (client-side limit)")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", o.KubeBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
}

// Validate reports every invalid setting at once.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Interval <= 0 {
		add("--interval: must be positive, got %s", o.Interval)
	}
	if err := o.decideConfig(nil, false).Validate(); err != nil {
		add("--leak-grace, --leak-strikes, --max-release-fraction: %w", err)
	}
	errs = append(errs, o.Flags.Validate()...)
	errs = append(errs, o.Config.Validate()...)
	if o.KubeQPS <= 0 {
		add("--kube-api-qps: must be positive, got %g", o.KubeQPS)
	}
	if o.KubeBurst <= 0 {
		add("--kube-api-burst: must be positive, got %d", o.KubeBurst)
	}
	return errors.Join(errs...)
}

func (o *Options) decideConfig(scopes []decide.Scope, clusterBound bool) decide.Config {
	return decide.Config{
		LeakStrikes:        o.LeakStrikes,
		LeakGrace:          o.LeakGrace,
		MaxReleaseFraction: o.MaxReleaseFraction,
		Resolvable:         scopes,
		ClusterBound:       clusterBound,
	}
}

// WithRESTConfig returns o set to talk to the cluster of cfg instead of
// --kubeconfig's, for tests that run the service in-process.
func (o Options) WithRESTConfig(cfg *rest.Config) Options {
	o.restConfig = cfg
	return o
}

// WithBeforeAct returns o with a hook that runs between every pass's
// decision and its releases, for tests that change the world in between.
func (o Options) WithBeforeAct(h pass.Hook) Options {
	o.beforeAct = h
	return o
}

// WithIdentity returns o with a fixed leader election identity, for tests
// that run several replicas in one process.
func (o Options) WithIdentity(id string) Options {
	o.identity = id
	return o
}
