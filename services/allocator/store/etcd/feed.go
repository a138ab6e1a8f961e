package etcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/eventlog"
)

// A feed is the one etcd watch a Store's watches share, decoded once into
// a history (package eventlog, as bolt keeps its own) that each watch
// reads at its own cursor: a replica's follower and its WatchAllocations
// streams cost etcd one watch and the replica one decode per event.
//
// The first watch starts the feed, from its revision or the current one,
// whichever is older. When the feed ends, its history ends its watches
// with the reason, and the next watch starts a new feed.
type feed struct {
	log *eventlog.Log
	// done is closed when the feed's etcd watch has ended and its
	// history is closed.
	done chan struct{}
}

func (f *feed) ended() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// feedFor returns the shared history to serve a watch after fromRev from,
// starting the feed if none runs; nil when the watch needs an etcd watch
// of its own (fromRev 0, or shared watches turned off).
func (s *Store) feedFor(ctx context.Context, fromRev int64) (*eventlog.Log, error) {
	if fromRev == 0 || s.history < 0 {
		return nil, nil
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if f := s.feed; f != nil && !f.ended() {
		return f.log, nil
	}
	resp, err := s.cli.Get(ctx, s.k.markers(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, s.readError(ctx, fmt.Sprintf("watch from revision %d", fromRev), err)
	}
	from := min(fromRev, resp.Header.Revision)
	if err := s.checkWatchable(ctx, from); err != nil {
		return nil, err
	}
	f := &feed{log: eventlog.New(s.history, from), done: make(chan struct{})}
	w := &watcher{s: s, ctx: context.Background(), from: from, seen: from}
	w.emit = func(evs []store.Event) bool {
		f.log.Append(evs)
		return true
	}
	w.end = func(err error) {
		if !errors.Is(err, store.ErrClosed) {
			s.logger.Warn("etcd store: the shared watch ended; watches resume on a new one", "revision", w.seen, "err", err)
		}
		f.log.Close(err)
	}
	if !s.startWatcher(w.ctx, w, func() {
		f.log.Close(store.ErrClosed)
		close(f.done)
	}) {
		return nil, store.ErrClosed
	}
	s.feed = f
	return f.log, nil
}
