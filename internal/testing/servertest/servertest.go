// Package servertest runs servers of the shared runtime in tests.
package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/server"
)

// StopTimeout bounds how long the end of a test waits for a server to
// drain.
const StopTimeout = 10 * time.Second

// Serve runs srv until the test ends, then stops it and fails the test if
// it did not stop cleanly within StopTimeout.
func Serve(tb testing.TB, srv *server.Server) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(run(ctx, cancel, tb, srv))
}

// run runs srv until ctx ends. The stop it returns cancels ctx and waits
// for srv to drain, failing the test if it did not stop cleanly within
// StopTimeout; call it once.
func run(ctx context.Context, cancel context.CancelFunc, tb testing.TB, srv *server.Server) (stop func()) {
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("server at %s: %v", srv.GRPCAddr(), err)
			}
		case <-time.After(StopTimeout):
			tb.Errorf("server at %s did not stop within %s", srv.GRPCAddr(), StopTimeout)
		}
	}
}
