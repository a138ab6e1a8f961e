package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/plexusnet/plexus/services/membership/watch"
)

// Options are membership's own flags.
type Options struct {
	// KubeQPS and KubeBurst are the client-side rate limits of Kubernetes
	// API calls.
	KubeQPS   float32
	KubeBurst int
	// Workers reconcile Services concurrently.
	Workers int
	// BatchPeriod groups the changes of a burst into one event per
	// Service (see controller.Options).
	BatchPeriod time.Duration
	// SweepWorkers expire heartbeats concurrently.
	SweepWorkers int
	// IgnoredNamespaces are not watched for membership.
	IgnoredNamespaces []string
	// WatchHistory, WatchMaxPending and WatchMaxLag configure the hub (see
	// package watch).
	WatchHistory    int
	WatchMaxPending int
	WatchMaxLag     time.Duration

	// restConfig, when set, is used instead of --kubeconfig (tests).
	restConfig *rest.Config
}

// DefaultOptions returns the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		KubeQPS:         50,
		KubeBurst:       100,
		Workers:         4,
		BatchPeriod:     50 * time.Millisecond,
		SweepWorkers:    2,
		WatchHistory:    watch.DefaultHistory,
		WatchMaxPending: watch.DefaultMaxPending,
		WatchMaxLag:     watch.DefaultMaxLag,
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.Float32Var(&o.KubeQPS, "kube-api-qps", o.KubeQPS, "queries per second to the Kubernetes API (client-side limit)")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", o.KubeBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Services reconciled concurrently")
	fs.DurationVar(&o.BatchPeriod, "batch-period", o.BatchPeriod, "how long a changed Service waits for more changes before its endpoint set is recomputed and published; 0 publishes every change at once")
	fs.IntVar(&o.SweepWorkers, "heartbeat-workers", o.SweepWorkers, "expired heartbeats written concurrently")
	fs.StringSliceVar(&o.IgnoredNamespaces, "ignore-namespaces", o.IgnoredNamespaces, "namespaces whose Services and workloads are not tracked (none by default, kube-system included)")
	fs.IntVar(&o.WatchHistory, "watch-history", o.WatchHistory, "changes remembered for WatchServices clients that resume")
	fs.IntVar(&o.WatchMaxPending, "watch-max-pending", o.WatchMaxPending, "Services a WatchServices client may have waiting before it is cut off (WATCH_TOO_SLOW)")
	fs.DurationVar(&o.WatchMaxLag, "watch-max-lag", o.WatchMaxLag, "how long a WatchServices client may leave events unread before it is cut off (WATCH_TOO_SLOW)")
}

// Validate reports every invalid setting at once.
func (o *Options) Validate() error {
	var errs []error
	if o.KubeQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps: must be positive, got %g", o.KubeQPS))
	}
	if o.KubeBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst: must be positive, got %d", o.KubeBurst))
	}
	if o.Workers <= 0 {
		errs = append(errs, fmt.Errorf("--workers: must be positive, got %d", o.Workers))
	}
	if o.BatchPeriod < 0 {
		errs = append(errs, fmt.Errorf("--batch-period: must not be negative, got %s", o.BatchPeriod))
	}
	if o.SweepWorkers <= 0 {
		errs = append(errs, fmt.Errorf("--heartbeat-workers: must be positive, got %d", o.SweepWorkers))
	}
	if o.WatchHistory <= 0 || o.WatchMaxPending <= 0 || o.WatchMaxLag <= 0 {
		errs = append(errs, errors.New("--watch-history, --watch-max-pending and --watch-max-lag: must be positive"))
	}
	return errors.Join(errs...)
}

// WithRESTConfig returns o set to talk to the cluster of cfg instead of
// --kubeconfig's, for tests that run the service in-process.
func (o Options) WithRESTConfig(cfg *rest.Config) Options {
	o.restConfig = cfg
	return o
}
