package bolt

import (
	"bytes"
	"errors"
	"fmt"
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
}

// compactTxnBytes bounds the keys and values one write transaction of
// the copy puts, so that copying a million records does not hold them
// all in memory at once.
const compactTxnBytes = 2 << 20

// Compact rewrites the store file at path with only what the store
// uses, packed, leaving its free pages behind: bbolt never gives them
// back to the file system.
//
// The allocator must not be running: Compact takes the file's lock (and
// waits lockTimeout for it). The copy goes to PATH.compact, which is
// synced and then renamed over the file, so a crash at any point leaves
// either the old file or the new one; a leftover PATH.compact of an
// interrupted run is overwritten.
func Compact(path string, lockTimeout time.Duration) (res CompactResult, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("compact %s: %w", path, err)
		}
	}()
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
		if err := checkFormat(tx); err != nil {
			return err
		}
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			res.Records += b.Stats().KeyN
			return nil
		})
	})
	if err == nil {
		// bbolt.Compact copies every bucket, empty ones too, and fills
		// their pages full rather than to allocFill: new records go to
		// the end of the records bucket, on new pages, so its full
		// pages split only when a record on them grows.
		err = bbolt.Compact(dst, src, compactTxnBytes)
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

// checkFormat refuses a file that is not a store file of this version.
func checkFormat(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return errors.New("not a store file: no meta bucket")
	}
	if f := meta.Get(keyFormat); !bytes.Equal(f, []byte{fileFormat}) {
		return fmt.Errorf("file format %v, want [%d]: not a store file of this version", f, fileFormat)
	}
	return nil
}
