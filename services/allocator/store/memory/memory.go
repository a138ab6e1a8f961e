// Package memory is the allocator's store for tests and demos
// (--store memory): a bolt store in a file that has no name
// (bolt.OpenTemp), so it holds nothing once it closes or the process
// ends, and its commits skip fsync. It is the bolt store in every other
// way, so the two can never disagree.
package memory

import (
	"fmt"

	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// New opens an empty store at revision 0. Like httptest.NewServer, it
// panics when it cannot (the temporary directory cannot hold a file).
func New(opts ...bolt.Option) *bolt.Store {
	s, err := bolt.OpenTemp(opts...)
	if err != nil {
		panic(fmt.Sprintf("memory store: %v", err))
	}
	return s
}
