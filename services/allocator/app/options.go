package app

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexusnet/plexus/services/allocator/decide"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// DefaultStore is the default of --store: the embedded bolt store in the
// working directory.
const DefaultStore = "bolt:plexus-allocator.db"

// Options are the allocator's own flags.
type Options struct {
	// Store says where allocations are kept (--store and the --etcd-*
	// flags).
	Store StoreOptions
	// MaxWatches bounds the WatchAllocations streams open at once;
	// SnapshotTurns, those sending their snapshots at once (0: no bound).
	MaxWatches, SnapshotTurns int
	// Clusterset and RequireClusterIdentities say who may touch which
	// allocations (decide.Access).
	Clusterset               string
	RequireClusterIdentities bool
}

// DefaultOptions returns the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		Store:         StoreOptions{Spec: DefaultStore, EtcdPrefix: etcd.DefaultPrefix},
		MaxWatches:    allocserver.DefaultMaxWatches,
		SnapshotTurns: allocserver.DefaultSnapshotTurns,
	}
}

// AddFlags registers the allocator's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Store.AddFlags(fs)
	fs.IntVar(&o.MaxWatches, "max-watches", o.MaxWatches, "most WatchAllocations streams open at once over all clients; one more is RESOURCE_EXHAUSTED (TOO_MANY_WATCHES); 0: no bound")
	fs.IntVar(&o.SnapshotTurns, "watch-snapshot-turns", o.SnapshotTurns, "most watches sending their snapshots at once (each for a second at most; the others wait their turn); 0: no bound")
	fs.StringVar(&o.Clusterset, "clusterset", o.Clusterset, "clusterset this allocator serves: callers whose identity names another clusterset are refused (CLUSTERSET_MISMATCH); when empty, identities of any clusterset are accepted")
	fs.BoolVar(&o.RequireClusterIdentities, "require-cluster-identities", o.RequireClusterIdentities,
		"refuse shared identities (spiffe://TD/SERVICE, principals of no Plexus identity) and anonymous callers on every call on allocations (SHARED_IDENTITY_REFUSED): set once every member cluster runs with its own identities")
}

// Validate reports settings that cannot work, naming the flag.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxWatches < 0 {
		errs = append(errs, fmt.Errorf("--max-watches: must not be negative, got %d", o.MaxWatches))
	}
	if o.SnapshotTurns < 0 {
		errs = append(errs, fmt.Errorf("--watch-snapshot-turns: must not be negative, got %d", o.SnapshotTurns))
	}
	if o.Clusterset != "" {
		if msgs := validation.IsDNS1123Label(o.Clusterset); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--clusterset: %q: %s", o.Clusterset, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(append(errs, o.Store.Validate())...)
}

// serverOptions are the API's settings from the flags.
func (o *Options) serverOptions(logger *slog.Logger) []allocserver.Option {
	return []allocserver.Option{allocserver.WithMaxWatches(o.MaxWatches),
		allocserver.WithSnapshotTurns(o.SnapshotTurns, allocserver.DefaultSnapshotTurnHold),
		allocserver.WithAccess(decide.Access{Clusterset: o.Clusterset, RequireClusterIdentities: o.RequireClusterIdentities}, logger)}
}
