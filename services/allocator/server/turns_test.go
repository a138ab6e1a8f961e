package server

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// blocked reports whether take waits. The tests that call it run in a
// bubble, so its deadline passes only once nothing else can happen: a take
// that would get a turn has got it by then.
func blocked(t *testing.T, tr *turns) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	done, err := tr.take(ctx)
	if err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		return true
	}
	done()
	return false
}

func TestTurns(t *testing.T) {
	synctest.Test(t, testTurns)
}

func testTurns(t *testing.T) {
	tr := newTurns(2, time.Hour)
	var waits atomic.Int64
	tr.observe = func(time.Duration) { waits.Add(1) }
	a, err := tr.take(t.Context())
	require.NoError(t, err)
	b, err := tr.take(t.Context())
	require.NoError(t, err)
	require.True(t, blocked(t, tr), "two turns are out")

	a()
	a() // giving a turn back twice gives back one
	c, err := tr.take(t.Context())
	require.NoError(t, err)
	require.True(t, blocked(t, tr))
	b()
	c()
	require.False(t, blocked(t, tr))
	require.Equal(t, int64(4), waits.Load(), "every turn taken is observed")

	var nilTurns *turns // no turns: every watch goes at once
	done, err := nilTurns.take(t.Context())
	require.NoError(t, err)
	done()
}

// manualTimer is a turn's timer that runs out when the test says so.
type manualTimer struct {
	fire    func()
	stopped bool
}

func (m *manualTimer) Stop() bool {
	was := !m.stopped
	m.stopped = true
	return was
}

func (m *manualTimer) runOut() {
	if !m.stopped {
		m.stopped = true
		m.fire()
	}
}

func TestTurnRunsOut(t *testing.T) {
	synctest.Test(t, testTurnRunsOut)
}

func testTurnRunsOut(t *testing.T) {
	tr := newTurns(1, time.Second)
	timers := make(chan *manualTimer, 2)
	tr.afterFunc = func(_ time.Duration, f func()) interface{ Stop() bool } {
		m := &manualTimer{fire: f}
		timers <- m
		return m
	}
	var timedOut atomic.Int64
	tr.timedOut = func() { timedOut.Add(1) }

	slow, err := tr.take(t.Context()) // its watch does not give it back in time
	require.NoError(t, err)
	require.True(t, blocked(t, tr))
	(<-timers).runOut()
	require.Equal(t, int64(1), timedOut.Load())
	next, err := tr.take(t.Context()) // the turn that ran out is free
	require.NoError(t, err)
	<-timers
	slow() // late: gives back nothing, the turn is next's now
	require.True(t, blocked(t, tr))
	next()
	require.False(t, blocked(t, tr))
	require.Equal(t, int64(1), timedOut.Load())
}
