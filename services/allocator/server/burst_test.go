package server

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBurst: memory is released burstSettle after a burst of watches is
// down to a quarter, once per burst; watches that never made a burst, or a
// burst not yet down to a quarter, release nothing however long they wait.
// It runs on fake time, so "nothing" is seen after the settle has surely
// passed rather than hoped for after a sleep.
func TestBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var released atomic.Int64
		b := &burst{release: func() { released.Add(1) }}
		open := func(n int64) {
			for i := range n {
				b.opened(i + 1)
			}
		}
		closeDownTo := func(from, to int64) {
			for n := from - 1; n >= to; n-- {
				b.closed(n)
			}
		}
		settled := func() int64 {
			time.Sleep(2 * burstSettle)
			synctest.Wait()
			return released.Load()
		}

		open(10)
		closeDownTo(10, 0)
		require.Zero(t, settled(), "10 watches are no burst")

		open(100)
		closeDownTo(100, 26)
		require.Zero(t, settled(), "a burst above a quarter is not over")
		b.closed(25)
		time.Sleep(burstSettle - time.Millisecond)
		synctest.Wait()
		require.Zero(t, released.Load(), "released only once the burst settled")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(1), released.Load())
		closeDownTo(25, 0)
		require.Equal(t, int64(1), settled(), "released once per burst")

		open(64)
		closeDownTo(64, 0)
		require.Equal(t, int64(2), settled(), "the next burst releases again")
	})
}
