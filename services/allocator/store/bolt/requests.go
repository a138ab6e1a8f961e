package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// Request records expire at the cost of a clock read per batch: a record
// holds the time its commit put it, and once a span (a requestSpans-th of
// the retention period) the sweeper walks the bucket and deletes every
// record put a period ago or earlier. The walk (BenchmarkSweep: 10 ms for
// 100,000) runs in read transactions; only its deletes take the write
// lock, maxSweep at a time. An index of put times cost a page write per
// commit (+15-25% on BenchmarkCommitRequests).

// requestSpans is how many sweeps one retention period holds.
const requestSpans = 24

const (
	// maxSweep bounds the deletes of one write transaction, which the
	// commits queued meanwhile wait for (about 1 ms for 256).
	maxSweep = 256
	// maxScan bounds the records one read transaction looks at, so none
	// keeps freed pages from reuse for long.
	maxScan = 10_000
)

// spanOf is the time between sweeps for a retention period.
func spanOf(retention time.Duration) time.Duration {
	return max(retention/requestSpans, time.Millisecond)
}

// sweeper deletes expired request records once a span, until stopSweep
// is closed.
func (s *Store) sweeper() {
	defer close(s.swept)
	tick := time.NewTicker(s.span)
	defer tick.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-tick.C:
		}
		start := time.Now()
		deleted, err := s.sweepBefore(start.Add(-s.retention))
		if deleted > 0 && s.observeExpired != nil {
			s.observeExpired(deleted)
		}
		switch {
		case err != nil && !errors.Is(err, errStopped):
			s.logger.Error("store request record sweep failed", "path", s.path, "err", err)
		case deleted > 0:
			s.logger.Info("swept expired request records", "path", s.path, "records", deleted,
				"put_before", start.Add(-s.retention), "duration", time.Since(start))
		}
	}
}

// errStopped ends a sweep when the store closes: the next open sweeps
// what is left.
var errStopped = errors.New("store closing")

func (s *Store) stopping() bool {
	select {
	case <-s.stopSweep:
		return true
	default:
		return false
	}
}

// sweepBefore deletes every request record put at cutoff or earlier: it
// looks at maxScan records a read transaction and deletes maxSweep a
// write transaction. It returns how many it deleted, also on error.
func (s *Store) sweepBefore(cutoff time.Time) (deleted int, err error) {
	var from []byte
	for {
		if s.stopping() {
			return deleted, errStopped
		}
		var ids [][]byte
		err := s.db.View(func(tx *bbolt.Tx) error {
			var err error
			ids, from, err = collectExpired(tx, from, cutoff, maxScan, maxSweep)
			return err
		})
		if err != nil {
			return deleted, fmt.Errorf("sweep request records: %w", err)
		}
		if len(ids) > 0 {
			var n int
			if err := s.db.Update(func(tx *bbolt.Tx) (err error) { n, err = deleteExpired(tx, ids, cutoff); return err }); err != nil {
				return deleted, fmt.Errorf("sweep request records: %w", err)
			}
			deleted += n
		}
		if from == nil {
			return deleted, nil
		}
	}
}

// expired reports whether request record id, of value v, was put at
// cutoff or earlier.
func expired(id, v []byte, cutoff time.Time) (bool, error) {
	_, put, err := record.DecodeRequest(string(id), v)
	return err == nil && !put.After(cutoff), err
}

// collectExpired returns the ids of the records from id from on (from
// the first when nil) put at cutoff or earlier, looking at most at scan
// records and returning at most limit ids, and where to go on from (nil
// at the end).
func collectExpired(tx *bbolt.Tx, from []byte, cutoff time.Time, scan, limit int) (ids [][]byte, next []byte, err error) {
	c := tx.Bucket(bucketRequests).Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for n := 0; k != nil && n < scan && len(ids) < limit; k, v = c.Next() {
		n++
		old, err := expired(k, v, cutoff)
		if err != nil {
			return nil, nil, err
		}
		if old {
			ids = append(ids, bytes.Clone(k))
		}
	}
	return ids, bytes.Clone(k), nil
}

// deleteExpired deletes the records of ids that are still expired (one
// put again since the read is not), and returns how many it deleted.
func deleteExpired(tx *bbolt.Tx, ids [][]byte, cutoff time.Time) (int, error) {
	requests := tx.Bucket(bucketRequests)
	n := 0
	for _, id := range ids {
		v := requests.Get(id)
		if v == nil {
			continue
		}
		old, err := expired(id, v, cutoff)
		if err != nil {
			return 0, err
		}
		if old {
			if err := requests.Delete(id); err != nil {
				return 0, err
			}
			n++
		}
	}
	return n, nil
}
