package etcd

import (
	"github.com/plexusnet/plexus/services/allocator/store"
)

func init() {
	// "etcd:ENDPOINTS" through store.Open uses the default prefix and no
	// TLS; the allocator builds its Config from Flags instead.
	store.Register("etcd", func(endpoints string, _ bool, cfg store.Config) (store.Store, error) {
		f := Flags{Prefix: DefaultPrefix}
		c, err := f.Config(endpoints)
		if err != nil {
			return nil, err
		}
		c.Logger = cfg.Logger
		return Open(c)
	})
}
