package server

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
)

// callPool runs unary calls on goroutines that live as long as the server,
// so a call does not start on a fresh goroutine and grow its stack on the
// way down to the store (runtime.morestack, golang/go#18138).
//
// gRPC's own stream workers (grpc.NumStreamWorkers) did that for every
// call, unary or streaming, until long-lived streams took them: a worker
// that starts a watch stream is held until the stream ends, so 500 open
// WatchAllocations streams held the 128 workers, every Allocate then ran
// on a fresh goroutine, and those start small once hundreds of idle
// streams have lowered the average stack the runtime starts goroutines
// with. Growing and copying their stacks was a fifth of an allocator's
// CPU on etcd. Streams keep gRPC's goroutines; unary calls come here.
//
// A handoff costs a few microseconds, so a call goes to the pool only
// while more streams are open than leave gRPC's workers to the calls
// (above threshold); below it, it runs where gRPC put it, a warm worker.
type callPool struct {
	calls     chan func()
	streams   atomic.Int64
	threshold int64
}

func newCallPool(threshold int) *callPool {
	return &callPool{calls: make(chan func()), threshold: int64(threshold)}
}

// stream counts the open streams.
func (p *callPool) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p.streams.Add(1)
	defer p.streams.Add(-1)
	return handler(srv, ss)
}

// start starts n goroutines that run calls until stop closes. Until then,
// and after, calls run on their own goroutines.
func (p *callPool) start(n int, stop <-chan struct{}) {
	for range n {
		go p.work(stop)
	}
}

func (p *callPool) work(stop <-chan struct{}) {
	for {
		select {
		case call := <-p.calls:
			call()
		case <-stop:
			return
		}
	}
}

// unary runs the rest of the chain and the handler on an idle goroutine of
// the pool, and on the caller's own when every one is busy or few streams
// are open.
func (p *callPool) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if p.streams.Load() <= p.threshold {
		return handler(ctx, req)
	}
	var (
		resp any
		err  error
	)
	done := make(chan struct{})
	select {
	case p.calls <- func() {
		defer close(done)
		resp, err = handler(ctx, req)
	}:
		<-done
		return resp, err
	default:
		return handler(ctx, req)
	}
}
