package memory

import (
	"errors"

	"github.com/plexusnet/plexus/services/allocator/store"
)

func init() {
	store.Register("memory", func(_ string, hasArg bool, cfg store.Config) (store.Store, error) {
		if hasArg {
			return nil, errors.New(`the memory store takes no argument: use "memory"`)
		}
		return New(WithHistory(cfg.History)), nil
	})
}
