package app

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// compactCommand is `plexus-allocator compact`: it rewrites a stopped
// allocator's bolt file without its free pages, in the current format.
func compactCommand() *cobra.Command {
	storeSpec := DefaultStore
	lockTimeout := bolt.DefaultLockTimeout
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Rewrite the bolt store file without its free pages (the allocator must be stopped)",
		Long: `compact copies the allocator's bolt file into a new one holding only what
the store uses, and puts it in the old file's place. bbolt does not give
the space of released allocations back to the file system. Stop the
allocator first: compact takes the file's
lock. A crash leaves either the old file or the new one.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, ok := strings.CutPrefix(storeSpec, "bolt:")
			if !ok || path == "" {
				return fmt.Errorf("--store %q: compact works on a bolt file (bolt:PATH); etcd compacts itself", storeSpec)
			}
			start := time.Now()
			res, err := bolt.Compact(path, lockTimeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "compacted %s in %s: %s, %d records copied", path, time.Since(start).Round(time.Millisecond), sizes(res.Before, res.After), res.Records)
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVar(&storeSpec, "store", storeSpec, "the allocator's store, as given to it: bolt:PATH")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", lockTimeout, "how long to wait for the file's lock")
	config.Bind(cmd, func() error {
		if lockTimeout <= 0 {
			return errors.New("--lock-timeout must be positive")
		}
		return nil
	})
	return cmd
}

// sizes is "159.0 MB -> 98.2 MB" for a file's size before and after.
func sizes(before, after int64) string {
	return fmt.Sprintf("%.1f MB -> %.1f MB", float64(before)/1e6, float64(after)/1e6)
}
