package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// CompactResult says what Compact did.
type CompactResult struct {
	// Before and After are the file's sizes in bytes.
	Before, After int64
	// Records is how many records were copied.
	Records int
	// Dropped names the buckets left out (format 1's owner index).
	Dropped []string
	// From is the format of the file before, To the one written: a
	// file of format 1 or 2 is rewritten in the current one.
	From, To int
}

// compactTxnRecords bounds one write transaction of the copy, so that
// copying a million records does not hold them all in memory at once.
const compactTxnRecords = 1 << 16

// Compact rewrites the store file at path with only what the store
// uses, packed: free pages and the buckets of older formats are left
// behind. bbolt never gives free pages back to the file system.
//
// The allocator must not be running: Compact takes the file's lock (and
// waits lockTimeout for it). The copy goes to PATH.compact, which is
// synced and then renamed over the file, so a crash at any point leaves
// either the old file or the new one; a leftover PATH.compact of an
// interrupted run is overwritten. The copy is written in the current
// format: Open upgrades a file of format 1 or 2 the same way.
func Compact(path string, lockTimeout time.Duration) (CompactResult, error) {
	res, err := rewrite(path, lockTimeout)
	if err != nil {
		return res, fmt.Errorf("compact %s: %w", path, err)
	}
	return res, nil
}

// rewrite is Compact, with errors that do not name the file.
func rewrite(path string, lockTimeout time.Duration) (CompactResult, error) {
	res := CompactResult{To: fileFormat}
	if fi, err := os.Stat(path); err == nil {
		res.Before = fi.Size()
	}
	src, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: lockTimeout, OpenFile: openExisting})
	if errors.Is(err, berrors.ErrTimeout) {
		return res, fmt.Errorf("file is locked by another process (stop the allocator that uses it first; waited %s)", lockTimeout)
	}
	if err != nil {
		return res, err
	}
	defer src.Close() // held until the new file is in place: nobody opens the old one meanwhile

	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, err
	}
	dst, err := bbolt.Open(tmp, 0o600, &bbolt.Options{NoSync: true, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		return res, err
	}
	err = src.View(func(tx *bbolt.Tx) error {
		from, err := checkFormat(tx)
		if err != nil {
			return err
		}
		res.From = from
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			var (
				n   int
				err error
			)
			switch {
			case bytes.Equal(name, bucketOwners):
				res.Dropped = append(res.Dropped, string(name))
				return nil
			case bytes.Equal(name, bucketAllocs):
				n, err = convertAllocations(dst, b)
			default:
				n, err = copyBucket(dst, name, b)
			}
			res.Records += n
			return err
		})
	})
	if err == nil {
		err = dst.Update(func(tx *bbolt.Tx) error {
			// A file without allocations gets its (empty) records bucket.
			if _, err := tx.CreateBucketIfNotExists(bucketRecords); err != nil {
				return err
			}
			return tx.Bucket(bucketMeta).Put(keyFormat, []byte{fileFormat})
		})
	}
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return res, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return res, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return res, fmt.Errorf("the new file is in place, but its directory entry may not be on disk: %w", err)
	}
	if fi, err := os.Stat(path); err == nil {
		res.After = fi.Size()
	}
	return res, nil
}

// openExisting opens a store file for bbolt without creating one: a
// mistyped path is an error, not a new empty store.
func openExisting(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag&^os.O_CREATE, perm)
}

// checkFormat returns the format of a store file, refusing a file that
// is not one of this version or an older one.
func checkFormat(tx *bbolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0, errors.New("not a store file: no meta bucket")
	}
	f := meta.Get(keyFormat)
	if len(f) != 1 || (f[0] != fileFormat && f[0] != formatAddrs && f[0] != formatOwners) {
		return 0, fmt.Errorf("file format %v, want [%d], [%d] or [%d]: not a store file of this version", f, formatOwners, formatAddrs, fileFormat)
	}
	return int(f[0]), nil
}

// copyBucket copies the top-level bucket b, named name, into dst under
// the same name, in write transactions of at most compactTxnRecords
// records.
func copyBucket(dst *bbolt.DB, name []byte, b *bbolt.Bucket) (int, error) {
	return copyRecords(dst, name, b, name, func(k, v []byte) ([]byte, []byte, error) { return k, v, nil })
}

// convertAllocations files the allocations of an older format's
// allocations bucket (keyed by pool and address) as records numbered
// from 1, in key order.
func convertAllocations(dst *bbolt.DB, b *bbolt.Bucket) (int, error) {
	seq := uint64(0)
	return copyRecords(dst, bucketAllocs, b, bucketRecords, func(k, v []byte) ([]byte, []byte, error) {
		pool, addr, err := splitAddrKey(k)
		if err != nil {
			return nil, nil, err
		}
		seq++
		rec := record.Encoder(make([]byte, 0, len(pool)+18+len(v))).Str(string(pool)).Addr(addr)
		return recordKey(seq), append(rec, v...), nil
	})
}

// copyRecords puts each record of b (the bucket named from) into the
// bucket to of dst, as conv makes it, in write transactions of at most
// compactTxnRecords records. The store keeps no nested buckets; one is an
// error rather than dropped silently.
func copyRecords(dst *bbolt.DB, from []byte, b *bbolt.Bucket, to []byte, conv func(k, v []byte) ([]byte, []byte, error)) (int, error) {
	c := b.Cursor()
	k, v := c.First()
	copied := 0
	for first := true; first || k != nil; first = false {
		err := dst.Update(func(tx *bbolt.Tx) error {
			out, err := tx.CreateBucketIfNotExists(to)
			if err != nil {
				return err
			}
			// Keys arrive in order: pages filled like the records
			// bucket's (newWriter) leave room for the inserts to come.
			out.FillPercent = allocFill
			for n := 0; k != nil && n < compactTxnRecords; n++ {
				if v == nil {
					return fmt.Errorf("bucket %s: nested bucket %q: not a store file of this version", from, k)
				}
				ck, cv, err := conv(k, v)
				if err != nil {
					return err
				}
				if err := out.Put(ck, cv); err != nil { // src's pages stay mapped until its View ends
					return err
				}
				copied++
				k, v = c.Next()
			}
			return nil
		})
		if err != nil {
			return copied, err
		}
	}
	return copied, nil
}
