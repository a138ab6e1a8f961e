package fleet

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// pushed is an Inventory the test feeds by hand.
type pushed chan []Member

func (p pushed) Describe() string { return "test" }

func (p pushed) Run(ctx context.Context, update func([]Member)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ms := <-p:
			update(ms)
		}
	}
}

// runner records its life.
type runner struct {
	m       Member
	prev    *runner
	running chan struct{}
	stopped chan struct{}
}

func (r *runner) Run(ctx context.Context) {
	close(r.running)
	<-ctx.Done()
	close(r.stopped)
}

// recorder is what the Group tells the test.
type recorder struct {
	mu      sync.Mutex
	started []*runner
	left    []string
	gone    []string
}

func (rec *recorder) last(name string) *runner {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := len(rec.started) - 1; i >= 0; i-- {
		if rec.started[i].m.Name == name {
			return rec.started[i]
		}
	}
	return nil
}

func (rec *recorder) goneList() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.gone...)
}

func newTestGroup(t *testing.T, grace time.Duration) (*Group, *recorder) {
	rec := &recorder{}
	g, err := NewGroup(GroupConfig{
		Dial: func(m Member) (*grpc.ClientConn, error) {
			return grpc.NewClient(m.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
		Start: func(m Member, _ *grpc.ClientConn, prev Runner) (Runner, error) {
			r := &runner{m: m, running: make(chan struct{}), stopped: make(chan struct{})}
			if p, ok := prev.(*runner); ok {
				r.prev = p
			}
			rec.mu.Lock()
			rec.started = append(rec.started, r)
			rec.mu.Unlock()
			return r, nil
		},
		Left:  func(m Member) { rec.mu.Lock(); rec.left = append(rec.left, m.Name); rec.mu.Unlock() },
		Gone:  func(m Member) { rec.mu.Lock(); rec.gone = append(rec.gone, m.Name); rec.mu.Unlock() },
		Grace: grace, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	return g, rec
}

// The test runs in a bubble: the grace is fake time, so a member that comes
// back within it is seen not to be gone once the grace has surely passed,
// and synctest.Wait says when the Group has acted on a change.
func TestGroupJoinMoveLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 300 * time.Millisecond
		g, rec := newTestGroup(t, grace)
		inv := make(pushed)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- g.Run(ctx, inv) }()

		east := Member{Name: "east", Addr: "127.0.0.1:1"}
		west := Member{Name: "west", Addr: "127.0.0.1:2"}
		inv <- []Member{east, west}
		synctest.Wait()
		require.NotNil(t, rec.last("west"))
		<-rec.last("east").running
		require.Len(t, g.States(), 2)

		// east moves: its follower is stopped, and the successor is handed it.
		moved := Member{Name: "east", Addr: "127.0.0.1:3"}
		first := rec.last("east")
		inv <- []Member{moved, west}
		synctest.Wait()
		require.NotSame(t, first, rec.last("east"))
		<-first.stopped
		require.Same(t, first, rec.last("east").prev, "the successor resumes from its predecessor")
		require.Equal(t, moved, g.States()[0].Member)

		// west leaves: stopped at once, gone after the grace.
		inv <- []Member{moved}
		<-rec.last("west").stopped
		synctest.Wait()
		st := g.States()
		require.Len(t, st, 2)
		require.False(t, st[1].LeftAt.IsZero())
		require.Nil(t, st[1].Runner)
		require.Empty(t, rec.goneList(), "gone only once the grace has passed")
		// The bubble's fake clock: each Sleep moves it on at once, and
		// synctest.Wait then waits for what the grace timers do.
		time.Sleep(grace)
		synctest.Wait()
		require.Equal(t, []string{"west"}, rec.goneList())
		require.Len(t, g.States(), 1)

		// east leaves and comes back within the grace: never gone.
		inv <- []Member{}
		<-rec.last("east").stopped
		time.Sleep(grace / 2)
		inv <- []Member{moved}
		synctest.Wait()
		st = g.States()
		require.Len(t, st, 1)
		require.True(t, st[0].LeftAt.IsZero())
		time.Sleep(2 * grace)
		synctest.Wait()
		require.Equal(t, []string{"west"}, rec.goneList(), "a member back within its grace keeps what it left behind")

		// An invalid set changes nothing.
		inv <- []Member{moved, {Name: "Bad Name", Addr: "x:1"}}
		synctest.Wait()
		require.Len(t, g.States(), 1)
		require.Same(t, rec.last("east"), g.States()[0].Runner, "the follower was not restarted")

		require.Equal(t, 1.0, testutil.ToFloat64(g.members))
		require.Equal(t, 3.0, testutil.ToFloat64(g.changes.WithLabelValues("joined")))
		require.Equal(t, 1.0, testutil.ToFloat64(g.changes.WithLabelValues("moved")))
		require.Equal(t, 2.0, testutil.ToFloat64(g.changes.WithLabelValues("left")))
		require.Equal(t, 1.0, testutil.ToFloat64(g.changes.WithLabelValues("gone")))

		cancel()
		require.NoError(t, <-done)
		<-rec.last("east").stopped
	})
}

// A sources file is followed as it changes, including the way the kubelet
// updates a mounted ConfigMap (a new file renamed over the old), and a
// broken edit keeps the members as they were.
func TestFileInventory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, EditFile(path, func(ms []Member) ([]Member, error) {
		return append(ms, Member{Name: "east", Addr: "127.0.0.1:1"}), nil
	}))
	inv := NewFile(path, 10*time.Millisecond, nil)
	got := make(chan []Member, 10)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = inv.Run(ctx, func(ms []Member) { got <- ms }) }()
	require.Equal(t, []Member{{Name: "east", Addr: "127.0.0.1:1"}}, <-got)

	require.NoError(t, EditFile(path, func(ms []Member) ([]Member, error) {
		return append(ms, Member{Name: "west", Addr: "127.0.0.1:2"}), nil
	}))
	require.Equal(t, []string{"east", "west"}, names(<-got))

	require.NoError(t, os.WriteFile(path, []byte("clusters: [broken"), 0o644))
	require.NoError(t, os.WriteFile(path+".new", []byte("clusters: [{name: west, address: '127.0.0.1:2'}]"), 0o644))
	select {
	case ms := <-got:
		t.Fatalf("a broken file was applied: %v", ms)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, os.Rename(path+".new", path))
	require.Equal(t, []string{"west"}, names(<-got))
}
