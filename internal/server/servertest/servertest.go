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
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("server at %s: %v", srv.GRPCAddr(), err)
			}
		case <-time.After(StopTimeout):
			tb.Errorf("server at %s did not stop within %s", srv.GRPCAddr(), StopTimeout)
		}
	})
}
