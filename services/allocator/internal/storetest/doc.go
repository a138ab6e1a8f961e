// Package storetest is the conformance suite every store.Store
// implementation passes. An implementation's test calls Run with a
// function that opens a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s := memory.New(bolt.WithHistory(256))
//			t.Cleanup(func() { s.Close() })
//			return s
//		}, storetest.WithHistory(256))
//	}
//
// The suite checks the contract the allocator relies on: conditions,
// atomicity, revisions, the owner index, cascading pool deletion, request
// records, consistent snapshots, ordered watches that never slow commits,
// and (for durable stores, through WithReopen) that everything committed
// survives a restart, and (through WithRequestRetention) that request
// records expire on time. Stores must implement Compactor so the
// compaction paths of Watch can be reached.
package storetest
