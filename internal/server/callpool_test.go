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
	// onPool makes the call req until it runs on a pool goroutine (the
	// pool's goroutine may not be waiting yet, or not again: such a call
	// runs on the caller's), and returns that goroutine with the answer.
	onPool := func(req string) (string, any, error) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ran = nil
			resp, err := p.unary(ctx, req, info, handler)
			if ran[0] != goid() {
				return ran[0], resp, err
			}
			if time.Now().After(deadline) {
				t.Fatalf("no call %q ran on the pool", req)
			}
			runtime.Gosched()
		}
	}
	worker, resp, err := onPool("a")
	require.NoError(t, err)
	require.Equal(t, "av", resp)
	next, _, err := onPool("fail")
	require.EqualError(t, err, "failed")
	require.Equal(t, worker, next, "the next pooled call ran on another goroutine than the pool's one")

	// Every goroutine busy: the call runs on the caller's. A call "b"
	// holds the pool's goroutine (made again until it lands there).
	release := make(chan struct{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := make(chan string, 1)
		go func() {
			_, _ = p.unary(ctx, "b", info, func(context.Context, any) (any, error) {
				id := goid()
				got <- id
				if id == worker {
					<-release
				}
				return nil, nil
			})
		}()
		if <-got == worker {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no call \"b\" ran on the pool")
		}
	}
	ran = nil
	resp, err = p.unary(ctx, "c", info, handler)
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
