package app

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/leader"
	"github.com/plexusnet/plexus/services/importer/controller"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// Options are the importer's own flags.
type Options struct {
	// Flags say where the source clusters' memberships are: --source,
	// --sources-file or --inventory-namespace.
	fleet.Flags
	// SourceGrace is how long the slices of a cluster the importer has not
	// heard from since its term started are kept.
	SourceGrace time.Duration
	// VIPPools are the allocator pools of the clusterset VIPs, one per
	// family.
	VIPPools []string
	// ManageServiceCIDRs lets the importer create ServiceCIDRs for the VIP
	// pools' CIDRs when the API server refuses a VIP as a cluster IP.
	ManageServiceCIDRs bool
	// MaxEndpointsPerSlice is the slice capacity.
	MaxEndpointsPerSlice int
	// Workers reconcile services concurrently.
	Workers int
	// RequireClusterIdentities refuses a source whose membership's
	// certificate does not name its cluster (a shared legacy or a fleet
	// identity, or none).
	RequireClusterIdentities bool

	// KubeQPS and KubeBurst are the client-side rate limits of Kubernetes
	// API calls.
	KubeQPS   float32
	KubeBurst int

	// Config is the leader election's part: --leader-elect and the
	// Lease flags.
	leader.Config

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
	DefaultKubeQPS   = 300
	DefaultKubeBurst = 600
	DefaultLeaseName = "plexus-importer"
)

// DefaultOptions returns the defaults of the flags. The Lease lives in the
// namespace of $POD_NAMESPACE, else "default".
func DefaultOptions() Options {
	return Options{
		SourceGrace:          controller.DefaultSourceGrace,
		MaxEndpointsPerSlice: islices.DefaultMaxEndpointsPerSlice,
		ManageServiceCIDRs:   true,
		Workers:              controller.DefaultWorkers,
		KubeQPS:              DefaultKubeQPS,
		KubeBurst:            DefaultKubeBurst,
		Config:               leader.DefaultConfig(DefaultLeaseName),
	}
}

// AddFlags registers the flags on fs with o's values as defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Flags.AddFlags(fs, "imported here, recorded under NAME")
	fs.DurationVar(&o.SourceGrace, "source-grace", o.SourceGrace, "how long, after this replica starts leading, the slices of a cluster it has not heard from (a source not reached yet, a cluster that pushed before a restart) are kept before they count as orphaned")
	fs.StringArrayVar(&o.VIPPools, "vip-pool", o.VIPPools, "allocator pool (pools/ID or ID) of the clusterset VIPs, repeatable: one per family, two for dual stack (both allocated together or neither); none: an import carries its derived Service's own cluster IPs")
	fs.BoolVar(&o.ManageServiceCIDRs, "manage-service-cidrs", o.ManageServiceCIDRs, "when the API server refuses a clusterset VIP as the derived Service's cluster IP (outside its --service-cluster-ip-range), create a ServiceCIDR (networking.k8s.io/v1) for each CIDR of the VIP pools, so that every member cluster routes the same VIP; off: the derived Service then gets an address of the cluster's own")
	fs.IntVar(&o.MaxEndpointsPerSlice, "max-endpoints-per-slice", o.MaxEndpointsPerSlice, "most endpoints in one EndpointSlice (1 to 1000)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "services reconciled concurrently")
	fs.BoolVar(&o.RequireClusterIdentities, "require-cluster-identities", o.RequireClusterIdentities, "refuse a source cluster whose membership's TLS certificate does not name that cluster (spiffe://TD/clusterset/CS/cluster/ID/membership): without it a shared identity (spiffe://TD/membership), a fleet identity or plaintext is accepted, while a fleet moves to per-cluster identities; a certificate that names another cluster is refused either way")
	fs.Float32Var(&o.KubeQPS, "kube-api-qps", o.KubeQPS, "queries per second to the Kubernetes API (client-side limit)")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", o.KubeBurst, "burst of queries to the Kubernetes API above --kube-api-qps")
	o.Config.AddFlags(fs, "elect one writing replica through a Lease; the others keep their state warm and serve reads")
}

// Validate reports every invalid setting at once.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, o.Flags.Validate()...)
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
	errs = append(errs, o.Config.Validate()...)
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
