package memory_test

import (
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

func TestConformance(t *testing.T) {
	const history = 256
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memory.New(memory.WithHistory(history))
		t.Cleanup(func() { _ = s.Close() })
		return s
	}, storetest.WithHistory(history), storetest.WithRequestRetention(requestRetention, func(t *testing.T) store.Store {
		s := memory.New()
		memory.SetRequestRetention(s, requestRetention)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}))
}

// requestRetention is short enough for the suite to wait out.
const requestRetention = 500 * time.Millisecond

// TestConformanceDefaultHistory runs the suite against the default
// configuration, where the slow watcher catches up instead.
func TestConformanceDefaultHistory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
