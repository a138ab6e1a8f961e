package app

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

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
	return errors.Join(append(errs, o.Store.Validate())...)
}

// serverOptions are the API's settings from the flags.
func (o *Options) serverOptions() []allocserver.Option {
	return []allocserver.Option{allocserver.WithMaxWatches(o.MaxWatches),
		allocserver.WithSnapshotTurns(o.SnapshotTurns, allocserver.DefaultSnapshotTurnHold)}
}
