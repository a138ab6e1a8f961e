package server

import (
	"context"
	"io"
	"log/slog"
	"sync"
)

// Cleanup is the one shutdown path of a service's setup: a stack of what
// the setup has opened and started, undone last first. The setup pushes
// each part as soon as it exists, so a step that fails half way leaves
// nothing open, and no step closes anything by hand.
type Cleanup struct {
	logger *slog.Logger
	mu     sync.Mutex
	fns    []func()
}

// Defer pushes fn: it runs before everything pushed earlier.
func (c *Cleanup) Defer(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Close pushes the closing of what (a connection, say); a failure to close
// is logged, not returned: there is nobody left to return it to.
func (c *Cleanup) Close(what string, closer io.Closer) {
	c.Defer(func() {
		if err := closer.Close(); err != nil {
			c.logger.Warn("close "+what, "error", err)
		}
	})
}

// Go runs fn in a goroutine of its own and pushes a wait for it, so what
// was pushed before (the connections fn uses) is undone only once fn has
// returned. fn must return when the setup's context ends.
func (c *Cleanup) Go(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	c.Defer(func() { <-done })
}

// run undoes the stack, last first, and empties it.
func (c *Cleanup) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Step is one step of a service's setup: it builds or starts a part and
// pushes on c whatever has to be undone at shutdown.
type Step func(ctx context.Context, c *Cleanup) error

// Assemble runs a service's setup steps in order and returns the cleanup
// the setup returns (see Spec.Setup). When a step fails, the context the
// steps were given ends, what the steps before it pushed is undone, and
// the error is returned. The cleanup ends that context too, then undoes
// the stack; calling it again does nothing.
func Assemble(ctx context.Context, logger *slog.Logger, steps ...Step) (func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &Cleanup{logger: logger}
	cleanup := func() {
		cancel()
		c.run()
	}
	for _, step := range steps {
		if err := step(ctx, c); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}
