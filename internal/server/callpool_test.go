package server

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// goid returns the id of the calling goroutine, from its stack header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

type ctxKey struct{}

// TestCallPool: while more streams are open than the threshold, calls run
// on the pool's goroutines, one after another on the same one, with their
// context, answers and errors; a call that finds every goroutine busy, or
// the pool stopped, runs on its own, and so do calls while few streams are
// open.
func TestCallPool(t *testing.T) {
	stop := make(chan struct{})
	p := newCallPool(0)
	p.start(1, stop)
	info := &grpc.UnaryServerInfo{FullMethod: "/test/M"}
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	// One stream open, above the threshold of none.
	streamOpen, streamEnd := make(chan struct{}), make(chan struct{})
	go func() {
		_ = p.stream(nil, nil, nil, func(any, grpc.ServerStream) error {
			close(streamOpen)
			<-streamEnd
			return nil
		})
	}()
	<-streamOpen

	var ran []string
	handler := func(ctx context.Context, req any) (any, error) {
		ran = append(ran, goid())
		if req == "fail" {
			return nil, errors.New("failed")
		}
		return req.(string) + ctx.Value(ctxKey{}).(string), nil
	}
	// The pool's goroutine may not be waiting yet: the first calls may run
	// on the caller's.
	require.Eventually(t, func() bool {
		ran = nil
		resp, err := p.unary(ctx, "a", info, handler)
		require.NoError(t, err)
		require.Equal(t, "av", resp)
		return ran[0] != goid()
	}, 5*time.Second, time.Millisecond, "no call ran on the pool")
	worker := ran[0]
	_, err := p.unary(ctx, "fail", info, handler)
	require.EqualError(t, err, "failed")
	require.Equal(t, worker, ran[len(ran)-1], "the next call ran on another goroutine")

	// Every goroutine busy: the call runs on the caller's.
	release := make(chan struct{})
	busy := make(chan struct{})
	go func() {
		_, _ = p.unary(ctx, "b", info, func(context.Context, any) (any, error) {
			close(busy)
			<-release
			return nil, nil
		})
	}()
	<-busy
	ran = nil
	resp, err := p.unary(ctx, "c", info, handler)
	require.NoError(t, err)
	require.Equal(t, "cv", resp)
	require.Equal(t, goid(), ran[0])
	close(release)

	// No stream open: calls run where they are.
	close(streamEnd)
	require.Eventually(t, func() bool { return p.streams.Load() == 0 }, 5*time.Second, time.Millisecond)
	ran = nil
	_, err = p.unary(ctx, "e", info, handler)
	require.NoError(t, err)
	require.Equal(t, goid(), ran[0], "a call ran on the pool with no stream open")

	p.streams.Add(1)
	close(stop)
	require.Eventually(t, func() bool {
		ran = nil
		_, err := p.unary(ctx, "d", info, handler)
		require.NoError(t, err)
		return ran[0] == goid()
	}, 5*time.Second, time.Millisecond, "the pool still runs calls after it stopped")
}
