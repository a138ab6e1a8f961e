package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

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
	// Sources are the source clusters' memberships, "NAME=ADDR", whose
	// exports keep clusterset services alive.
	Sources []string

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
	DefaultInterval      = 60 * time.Second
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultLeaseName     = "plexus-repair"
)

// DefaultOptions returns the defaults of the flags. The Lease lives in the
// namespace of $POD_NAMESPACE, else "default".
func DefaultOptions() Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	return Options{
		Interval:           DefaultInterval,
		LeakGrace:          decide.DefaultLeakGrace,
		LeakStrikes:        decide.DefaultLeakStrikes,
		MaxReleaseFraction: decide.DefaultMaxReleaseFraction,
		LeaderElect:        true,
		LeaseDuration:      DefaultLeaseDuration,
		RenewDeadline:      DefaultRenewDeadline,
		RetryPeriod:        DefaultRetryPeriod,
		LeaseNamespace:     ns,
		LeaseName:          DefaultLeaseName,
		KubeQPS:            50,
		KubeBurst:          100,
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "interval", o.Interval, "time between two periodic repair passes (the first one runs this long after this replica becomes leader)")
	fs.DurationVar(&o.LeakGrace, "leak-grace", o.LeakGrace, "a leaked allocation (or orphaned slice) younger than this is never freed")
	fs.IntVar(&o.LeakStrikes, "leak-strikes", o.LeakStrikes, "consecutive passes a leak must be seen in before it is released")
	fs.Float64Var(&o.MaxReleaseFraction, "max-release-fraction", o.MaxReleaseFraction, "most of a pool's allocations one pass may release, as a fraction (at least one when not 0; 0 turns releases off)")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "periodic passes report what they would do without releasing or deleting anything")
	fs.StringArrayVar(&o.Sources, "source", o.Sources, "NAME=ADDR of a source cluster's membership (repeatable): a clusterset service is alive while one of them exports it or a ServiceImport for it exists")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one active replica through a Lease; only the leader runs passes and acts")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "how long a non-leader waits after the last renewal before it takes the lease over")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "how long the leader keeps retrying to renew before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "time between two attempts to acquire or renew the lease")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "namespace of the leader election Lease ($POD_NAMESPACE when set)")
	fs.StringVar(&o.LeaseName, "lease-name", o.LeaseName, "name of the leader election Lease")
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
	if err := o.decideConfig(nil).Validate(); err != nil {
		add("--leak-grace, --leak-strikes, --max-release-fraction: %w", err)
	}
	if _, err := parseSources(o.Sources); err != nil {
		add("--source: %w", err)
	}
	if o.LeaderElect {
		switch {
		case o.RetryPeriod <= 0:
			add("--retry-period: must be positive, got %s", o.RetryPeriod)
		case o.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(o.RetryPeriod)):
			add("--renew-deadline (%s): must be more than %.1f × --retry-period (%s)", o.RenewDeadline, leaderelection.JitterFactor, o.RetryPeriod)
		case o.LeaseDuration <= o.RenewDeadline:
			add("--lease-duration (%s): must be more than --renew-deadline (%s)", o.LeaseDuration, o.RenewDeadline)
		}
		if o.LeaseNamespace == "" || o.LeaseName == "" {
			add("--lease-namespace and --lease-name: must not be empty")
		}
	}
	if o.KubeQPS <= 0 {
		add("--kube-api-qps: must be positive, got %g", o.KubeQPS)
	}
	if o.KubeBurst <= 0 {
		add("--kube-api-burst: must be positive, got %d", o.KubeBurst)
	}
	return errors.Join(errs...)
}

func (o *Options) decideConfig(scopes []decide.Scope) decide.Config {
	return decide.Config{
		LeakStrikes:        o.LeakStrikes,
		LeakGrace:          o.LeakGrace,
		MaxReleaseFraction: o.MaxReleaseFraction,
		Resolvable:         scopes,
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

type source struct{ name, addr string }

// parseSources reads NAME=ADDR pairs; names must be unique.
func parseSources(specs []string) ([]source, error) {
	out := make([]source, 0, len(specs))
	seen := map[string]bool{}
	for _, s := range specs {
		name, addr, ok := strings.Cut(s, "=")
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%q: want NAME=ADDR", s)
		}
		if seen[name] {
			return nil, fmt.Errorf("source %q given twice", name)
		}
		if !strings.Contains(addr, "://") {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return nil, fmt.Errorf("%q: address: %w", s, err)
			}
		}
		seen[name] = true
		out = append(out, source{name: name, addr: addr})
	}
	return out, nil
}
