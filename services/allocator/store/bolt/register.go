package bolt

import (
	"errors"

	"github.com/plexusnet/plexus/services/allocator/store"
)

func init() {
	store.Register("bolt", func(path string, _ bool, cfg store.Config) (store.Store, error) {
		if path == "" {
			return nil, errors.New("the bolt store needs a file: bolt:PATH")
		}
		opts := []Option{WithLogger(cfg.Logger), WithExpiredObserver(cfg.ObserveExpired)}
		if cfg.History > 0 {
			opts = append(opts, WithHistory(cfg.History))
		}
		return Open(path, opts...)
	})
}
