package servertest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
)

// logTail bounds how much of a service's log a failed test shows.
const logTail = 20000

// Buffer is a bytes.Buffer safe for concurrent writers: a server's
// goroutines writing its log, a command writing its output while a test
// reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n bytes written, marked as cut when there were
// more.
func (b *Buffer) Tail(n int) string {
	s := b.String()
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

// SetupFunc sets a service up on a runtime, as each service's Setup does,
// and returns what to release once its server stopped.
type SetupFunc func(ctx context.Context, rt *server.Runtime) (cleanup func(), err error)

// Service is one service of the shared runtime run in-process by a test.
type Service struct {
	Server *server.Server
	Logs   *Buffer
	stop   func()
}

// Stop stops the service: its server drains, then the setup's cleanup
// runs. It is safe to call more than once; the end of the test calls it.
func (s *Service) Stop() { s.stop() }

// Start runs the service name on loopback ports with cfg (whose addresses
// it overrides), set up by setup, until the test ends or Stop is called.
// Its logs, at debug, go to Logs; a failed test shows their tail.
func Start(tb testing.TB, cfg *config.Common, name string, setup SetupFunc) *Service {
	tb.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	logs := &Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := server.New(*cfg, name, server.WithLogger(logger), server.WithoutSignalHandling(),
		server.WithDrainDelay(0), server.WithReadinessInterval(100*time.Millisecond))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cleanup, err := setup(ctx, &server.Runtime{Config: cfg, Server: srv, Logger: logger})
	if err != nil {
		cancel()
		tb.Fatalf("setting %s up: %v", name, err)
	}
	stop := run(ctx, cancel, tb, srv)
	var once sync.Once
	s := &Service{Server: srv, Logs: logs}
	s.stop = func() {
		once.Do(func() {
			stop()
			cleanup()
		})
	}
	tb.Cleanup(func() {
		s.Stop()
		if tb.Failed() {
			tb.Logf("log of %s at %s:\n%s", name, srv.GRPCAddr(), logs.Tail(logTail))
		}
	})
	return s
}
