package bolt

import (
	"os"

	"golang.org/x/sys/unix"
)

const canEvict = true

// evict drops path's pages from the page cache, for cold-read figures
// without touching the rest of the machine.
func evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
