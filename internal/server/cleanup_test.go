package server_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/server"
)

type closer struct {
	name string
	log  *[]string
	err  error
}

func (c closer) Close() error {
	*c.log = append(*c.log, "close "+c.name)
	return c.err
}

func TestAssembleUndoesLastFirstAtShutdown(t *testing.T) {
	var log []string
	var loopCtx context.Context
	cleanup, err := server.Assemble(context.Background(), slog.New(slog.DiscardHandler),
		func(_ context.Context, c *server.Cleanup) error {
			c.Close("conn", closer{name: "conn", log: &log, err: errors.New("already closed")})
			return nil
		},
		func(ctx context.Context, c *server.Cleanup) error {
			loopCtx = ctx
			c.Defer(func() { log = append(log, "broadcaster") })
			c.Go(func() {
				<-ctx.Done()
				log = append(log, "loop")
			})
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, loopCtx.Err(), "the steps' context lives until the cleanup")
	require.Empty(t, log)

	cleanup()
	require.Equal(t, []string{"loop", "broadcaster", "close conn"}, log)
	cleanup()
	require.Len(t, log, 3, "a second cleanup does nothing")
}

func TestAssembleUndoesWhatWasOpenedWhenAStepFails(t *testing.T) {
	var log []string
	boom := errors.New("boom")
	third := false
	cleanup, err := server.Assemble(context.Background(), slog.New(slog.DiscardHandler),
		func(_ context.Context, c *server.Cleanup) error {
			c.Close("first", closer{name: "first", log: &log})
			return nil
		},
		func(ctx context.Context, c *server.Cleanup) error {
			c.Go(func() {
				<-ctx.Done()
				log = append(log, "loop")
			})
			c.Close("second", closer{name: "second", log: &log})
			return boom
		},
		func(context.Context, *server.Cleanup) error {
			third = true
			return nil
		})
	require.ErrorIs(t, err, boom)
	require.Nil(t, cleanup)
	require.False(t, third, "no step runs after one that failed")
	require.Equal(t, []string{"close second", "loop", "close first"}, log)
}
