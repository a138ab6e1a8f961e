package decide

import "github.com/plexusnet/plexus/internal/owner"

// Owner identifies the holder of an allocation: Allocate is idempotent per
// (pool, Owner.Key()).
type Owner = owner.Owner
