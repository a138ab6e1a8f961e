//go:build !linux

package bolt

import "errors"

// canEvict is false where the page cache of one file cannot be dropped;
// the cold benchmark is left out there.
const canEvict = false

func evict(string) error {
	return errors.New("evicting a file from the page cache is not supported here")
}
