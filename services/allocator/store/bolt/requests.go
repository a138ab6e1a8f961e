package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// Request records expire (see store.Request and the package doc), and
// commits pay nothing for it: a record keeps the value it always had,
// keyed by request id, with the revision of the commit that put it. What
// dates it is a short list of revision marks in the meta bucket, (time,
// the store's revision then), about one a span (a 24th of the retention
// period): a record whose revision is at most a mark's was put before the
// mark's time. Once a mark is a retention period old, the sweeper walks
// the requests bucket, deletes every record up to the mark's revision,
// and drops the mark.
//
// Why not find expired records without a walk? An index of put times
// costs a page write per commit (+15-25% on BenchmarkCommitRequests), and
// a bucket per span costs a lookup per live span for every new request id
// (some 13µs a commit, on the committer, at 25 spans). The walk costs
// some 100 ns a record once a span (BenchmarkSweep: 10 ms for 100,000),
// in read transactions that hold no commit up; only its deletes take the
// write lock, maxSweep at a time.
//
// A file from before request retention has records and no marks: Open
// marks the revision it finds, so they expire a retention period after
// the upgrade. Open marks the revision whenever records were put since
// the last mark was a span old (by this version before it stopped, or by
// an older version opening the file meanwhile), which dates them late,
// never early. Older versions ignore the marks.
//
//	meta  request-marks  (time, revision) pairs, oldest first

var keyRequestMarks = []byte("request-marks")

// requestSpans is how many revision marks, one after the other, one
// retention period holds: a record is dated at most a span and a quarter
// late (the sweeper looks four times a span), and is swept at most a
// quarter of a span, and the time a sweep takes, after its mark is a
// period old. Records thus live the period and at most a 16th more.
const requestSpans = 24

const (
	// maxSweep bounds the records one write transaction of the sweeper
	// deletes: expired records are spread over the bucket, so each delete
	// dirties a page of its own, and the commits queued meanwhile wait
	// for all of them (BenchmarkSweep: about 1 ms for 256, 2 for 1,024).
	maxSweep = 256
	// maxScan bounds the records one read transaction of the sweeper
	// looks at, so none keeps freed pages from reuse for long.
	maxScan = 10_000
)

// spanOf is the time between revision marks for a retention period.
func spanOf(retention time.Duration) time.Duration {
	return max(retention/requestSpans, time.Millisecond)
}

// revMark says that every record with a revision up to rev was put
// before at.
type revMark struct {
	at  time.Time
	rev int64
}

func readMarks(meta *bbolt.Bucket) ([]revMark, error) {
	v := meta.Get(keyRequestMarks)
	if v == nil {
		return nil, nil
	}
	d := record.NewDecoder(v)
	n := d.Uint()
	if n > uint64(d.Len()) { // each mark takes at least a byte
		n = 0
		d.Fail(record.ErrTruncated)
	}
	marks := make([]revMark, n)
	for i := range marks {
		marks[i].at = d.Time()
		marks[i].rev = d.Int()
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("decode %s: %w", keyRequestMarks, err)
	}
	return marks, nil
}

func writeMarks(meta *bbolt.Bucket, marks []revMark) error {
	if len(marks) == 0 {
		return meta.Delete(keyRequestMarks)
	}
	e := record.Encoder(make([]byte, 0, 1+len(marks)*16)).Uint(record.Version).Uint(uint64(len(marks)))
	for _, m := range marks {
		e = e.Time(m.at).Int(m.rev)
	}
	return meta.Put(keyRequestMarks, e)
}

// markRevision marks the store's revision at now when needsMark says
// so.
func markRevision(meta *bbolt.Bucket, now time.Time, span time.Duration) error {
	marks, err := readMarks(meta)
	if err != nil {
		return err
	}
	rev := int64(getUint64(meta, keyRevision))
	if !needsMark(marks, rev, now, span) {
		return nil
	}
	return writeMarks(meta, append(marks, revMark{at: now, rev: rev}))
}

// needsMark reports whether revision rev is to be marked at now: not
// when no commit came since the last mark, nor when that one is less
// than a span old (the records put meanwhile then count as put at the
// next mark), so there are about requestSpans marks a retention period.
func needsMark(marks []revMark, rev int64, now time.Time, span time.Duration) bool {
	if len(marks) == 0 {
		return rev > 0
	}
	last := marks[len(marks)-1]
	return rev > last.rev && now.Sub(last.at) >= span
}

// sweeper marks the revision every span and sweeps the records of the
// marks that are a retention period old, until stopSweep is closed.
func (s *Store) sweeper() {
	defer close(s.swept)
	tick := time.NewTicker(max(s.span/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-tick.C:
		}
		if err := s.sweep(); err != nil && !errors.Is(err, errStopped) {
			s.logger.Error("store request record sweep failed", "path", s.path, "err", err)
		}
	}
}

// errStopped ends a sweep when the store closes: the marks it was
// sweeping stay for the next open.
var errStopped = errors.New("store closing")

func (s *Store) stopping() bool {
	select {
	case <-s.stopSweep:
		return true
	default:
		return false
	}
}

// sweep marks the revision when a span has passed, and deletes the
// records of the newest mark that is a retention period old, and of all
// before it.
func (s *Store) sweep() error {
	now := time.Now()
	var (
		marks []revMark
		mark  bool
	)
	err := s.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var err error
		marks, err = readMarks(meta)
		mark = needsMark(marks, int64(getUint64(meta, keyRevision)), now, s.span)
		return err
	})
	if err != nil {
		return err
	}
	if mark {
		// A write transaction only when there is a mark to write.
		if err := s.db.Update(func(tx *bbolt.Tx) error { return markRevision(tx.Bucket(bucketMeta), now, s.span) }); err != nil {
			return fmt.Errorf("mark revision: %w", err)
		}
	}
	due := -1
	for i, m := range marks {
		if now.Sub(m.at) >= s.retention {
			due = i
		}
	}
	if due < 0 {
		return nil
	}
	upTo := marks[due].rev
	start := time.Now()
	deleted, err := s.sweepUpTo(upTo)
	if deleted > 0 && s.observeExpired != nil {
		s.observeExpired(deleted)
	}
	if err != nil {
		return err
	}
	s.logger.Info("swept expired request records", "path", s.path, "records", deleted,
		"up_to_revision", upTo, "put_before", marks[due].at, "duration", time.Since(start))
	err = s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		marks, err := readMarks(meta)
		if err != nil {
			return err
		}
		// Every record up to the swept mark is gone, and no commit can
		// put one again with a revision as old.
		n := 0
		for n < len(marks) && marks[n].rev <= upTo {
			n++
		}
		return writeMarks(meta, marks[n:])
	})
	if err != nil {
		return fmt.Errorf("drop swept revision marks: %w", err)
	}
	return nil
}

// sweepUpTo deletes every request record with a revision up to rev: it
// looks at maxScan records a read transaction and deletes maxSweep a
// write transaction. It returns how many it deleted, also on error.
func (s *Store) sweepUpTo(rev int64) (deleted int, err error) {
	var from []byte
	for {
		if s.stopping() {
			return deleted, errStopped
		}
		var ids [][]byte
		err := s.db.View(func(tx *bbolt.Tx) error {
			var err error
			ids, from, err = collectExpired(tx, from, rev, maxScan, maxSweep)
			return err
		})
		if err != nil {
			return deleted, fmt.Errorf("sweep request records: %w", err)
		}
		if len(ids) > 0 {
			var n int
			if err := s.db.Update(func(tx *bbolt.Tx) (err error) { n, err = deleteExpired(tx, ids, rev); return err }); err != nil {
				return deleted, fmt.Errorf("sweep request records: %w", err)
			}
			deleted += n
		}
		if from == nil {
			return deleted, nil
		}
	}
}

// collectExpired returns the ids of the records from id from on (from
// the first when nil) with a revision up to rev, looking at most at scan
// records and returning at most limit ids, and where to go on from (nil
// at the end).
func collectExpired(tx *bbolt.Tx, from []byte, rev int64, scan, limit int) (ids [][]byte, next []byte, err error) {
	c := tx.Bucket(bucketRequests).Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for n := 0; k != nil && n < scan && len(ids) < limit; k, v = c.Next() {
		n++
		r, err := decodeRequest(string(k), v)
		if err != nil {
			return nil, nil, err
		}
		if r.Revision <= rev {
			ids = append(ids, bytes.Clone(k))
		}
	}
	return ids, bytes.Clone(k), nil
}

// deleteExpired deletes the records of ids that still have a revision up
// to rev (one put again since the read has a later one), and returns how
// many it deleted.
func deleteExpired(tx *bbolt.Tx, ids [][]byte, rev int64) (int, error) {
	requests := tx.Bucket(bucketRequests)
	n := 0
	for _, id := range ids {
		v := requests.Get(id)
		if v == nil {
			continue
		}
		r, err := decodeRequest(string(id), v)
		if err != nil {
			return 0, err
		}
		if r.Revision <= rev {
			if err := requests.Delete(id); err != nil {
				return 0, err
			}
			n++
		}
	}
	return n, nil
}
