package service

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/plexusnet/plexus/services/importer/controller"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Options are the importer's own flags.
type Options struct {
	// Sources are the source clusters' memberships, "NAME=ADDR".
	Sources []string
	// SourceGrace is how long the slices of a cluster the importer has not
	// heard from since its term started are kept.
	SourceGrace time.Duration
	// VIPPools are the allocator pools of the clusterset VIPs, one per
	// family.
	VIPPools []string
	// MaxEndpointsPerSlice is the slice capacity.
	MaxEndpointsPerSlice int
	// Workers reconcile services concurrently.
	Workers int

	// KubeQPS and KubeBurst are the client-side rate limits of Kubernetes
	// API calls.
	KubeQPS   float32
	KubeBurst int

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

	// restConfig, when set, is used instead of --kubeconfig (tests).
	restConfig *rest.Config
	// identity, when set, replaces the generated leader election identity.
	identity string
}

// Defaults of the flags. The client-side limit sits well above the 100
// endpoint changes per second the importer is sized for: each change is one
// slice write, and at 100 queries per second the limiter itself became the
// queue (export-to-import p99 47 ms median and up to 195 ms, against 13 ms
// and at most 38 ms at 300; bench/results/importer-e2e.md).
const (
	DefaultKubeQPS       = 300
	DefaultKubeBurst     = 600
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultLeaseName     = "plexus-importer"
)

// DefaultOptions returns the defaults of the flags. The Lease lives in the
// namespace of $POD_NAMESPACE, else "default".
func DefaultOptions() Options {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	return Options{
		SourceGrace:          controller.DefaultSourceGrace,
		MaxEndpointsPerSlice: islices.DefaultMaxEndpointsPerSlice,
		Workers:              controller.DefaultWorkers,
		KubeQPS:              DefaultKubeQPS,
		KubeBurst:            DefaultKubeBurst,
		LeaderElect:          true,
		LeaseDuration:        DefaultLeaseDuration,
		RenewDeadline:        DefaultRenewDeadline,
		RetryPeriod:          DefaultRetryPeriod,
		LeaseNamespace:       ns,
		LeaseName:            DefaultLeaseName,
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.Sources, "source", o.Sources, "NAME=ADDR of a source cluster's membership (repeatable); its exported services are imported here, recorded under NAME")
	fs.DurationVar(&o.SourceGrace, "source-grace", o.SourceGrace, "how long, after this replica starts leading, the slices of a cluster it has not heard from (a source not reached yet, a cluster that pushed before a restart) are kept before they count as orphaned")
	fs.StringArrayVar(&o.VIPPools, "vip-pool", o.VIPPools, "allocator pool (pools/ID or ID) of the clusterset VIPs, repeatable: one per family, two for dual stack (both allocated together or neither); none: an import carries its derived Service's own cluster IPs")
	fs.IntVar(&o.MaxEndpointsPerSlice, "max-endpoints-per-slice", o.MaxEndpointsPerSlice, "most endpoints in one EndpointSlice (1 to 1000)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "services reconciled concurrently")
	fs.Float32Var(&o.KubeQPS, "kube-api-qps", o.KubeQPS, "queries per second to the Kubernetes API (client-side limit)")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", o.KubeBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one writing replica through a Lease; the others keep their state warm and serve reads")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "how long a non-leader waits after the last renewal before it takes the lease over")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "how long the leader keeps retrying to renew before it gives up leading")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "time between two attempts to acquire or renew the lease")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "namespace of the leader election Lease ($POD_NAMESPACE when set)")
	fs.StringVar(&o.LeaseName, "lease-name", o.LeaseName, "name of the leader election Lease")
}

// Validate reports every invalid setting at once.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := parseSources(o.Sources); err != nil {
		add("--source: %w", err)
	}
	if o.SourceGrace <= 0 {
		add("--source-grace: must be positive, got %s", o.SourceGrace)
	}
	if _, err := poolNames(o.VIPPools); err != nil {
		add("--vip-pool: %w", err)
	}
	if o.MaxEndpointsPerSlice < 1 || o.MaxEndpointsPerSlice > 1000 {
		add("--max-endpoints-per-slice: must be between 1 and 1000, got %d", o.MaxEndpointsPerSlice)
	}
	if o.Workers <= 0 {
		add("--workers: must be positive, got %d", o.Workers)
	}
	if o.KubeQPS <= 0 {
		add("--kube-api-qps: must be positive, got %g", o.KubeQPS)
	}
	if o.KubeBurst <= 0 {
		add("--kube-api-burst: must be positive, got %d", o.KubeBurst)
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
	return errors.Join(errs...)
}

// WithRESTConfig returns o set to talk to the cluster of cfg instead of
// --kubeconfig's, for tests that run the service in-process.
func (o Options) WithRESTConfig(cfg *rest.Config) Options {
	o.restConfig = cfg
	return o
}

// WithIdentity returns o with a fixed leader election identity, for tests
// that run several replicas in one process.
func (o Options) WithIdentity(id string) Options {
	o.identity = id
	return o
}

type source struct{ name, addr string }

// parseSources reads NAME=ADDR pairs; names must be unique DNS labels,
// since they become label values and ServiceImport cluster names.
func parseSources(specs []string) ([]source, error) {
	out := make([]source, 0, len(specs))
	seen := map[string]bool{}
	for _, s := range specs {
		name, addr, ok := strings.Cut(s, "=")
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%q: want NAME=ADDR", s)
		}
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			return nil, fmt.Errorf("%q: name: %s", s, strings.Join(msgs, "; "))
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

// poolNames normalises pool names to "pools/ID"; at most two.
func poolNames(pools []string) ([]string, error) {
	if len(pools) > 2 {
		return nil, fmt.Errorf("at most two pools (one per family), got %d", len(pools))
	}
	out := make([]string, 0, len(pools))
	for _, p := range pools {
		id := strings.TrimPrefix(strings.TrimSpace(p), "pools/")
		if id == "" || strings.Contains(id, "/") {
			return nil, fmt.Errorf("%q is not a pool name", p)
		}
		name := "pools/" + id
		for _, seen := range out {
			if seen == name {
				return nil, fmt.Errorf("pool %s given twice", name)
			}
		}
		out = append(out, name)
	}
	return out, nil
}
