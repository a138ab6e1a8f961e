package leader

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// renewals wraps the election's resource lock and records when the last
// write of this replica's own record that the API server accepted was
// sent.
//
// That moment is what bounds another replica's takeover: a candidate
// takes the lease only after it has seen the same record, unchanged, for
// the record's lease duration, and it cannot see a record before it was
// written. client-go's own bookkeeping (the observed time that
// LeaderElector.Check measures from) is reset whenever the elector reads
// a record that differs from the last one it read, including a stale copy
// of its own, so it can make a leader that has just lost the lease look
// freshly renewed.
type renewals struct {
	resourcelock.Interface

	mu   sync.Mutex
	sent time.Time // zero: no accepted write of our own record
}

func (r *renewals) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := r.Interface.Create(ctx, rec)
	r.note(start, rec, err)
	return err
}

func (r *renewals) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	start := time.Now()
	err := r.Interface.Update(ctx, rec)
	r.note(start, rec, err)
	return err
}

// note records start when the write of our own record succeeded. A
// release (an empty holder) ends the claim whatever its outcome.
func (r *renewals) note(start time.Time, rec resourcelock.LeaderElectionRecord, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case rec.HolderIdentity != r.Identity():
		r.sent = time.Time{}
	case err == nil && start.After(r.sent):
		r.sent = start
	}
}

// since returns how long ago the last accepted write of our own record
// was sent, and false when there is none.
func (r *renewals) since() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent.IsZero() {
		return 0, false
	}
	return time.Since(r.sent), true
}
