package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protoapi "google.golang.org/protobuf/proto"

	"github.com/plexusnet/plexus/internal/apierr"
)

// ReasonUndecodable is the reason of a request that is not a valid
// protobuf encoding of its message (truncated, malformed, or a string that
// is not UTF-8).
const ReasonUndecodable = "UNDECODABLE_REQUEST"

// decodeCodec is the server's protobuf codec. gRPC answers a request its
// codec cannot decode with INTERNAL, as if the server had failed; the
// fault is the client's, so this codec lets such a message through empty,
// remembers why, and the validator interceptor, which sees every request
// message, answers INVALID_ARGUMENT with ReasonUndecodable before any
// handler runs.
type decodeCodec struct {
	base   encoding.CodecV2
	failed sync.Map // message pointer → decode error
	// pending counts the entries of failed, so that the usual request,
	// which decoded, costs one atomic load.
	pending atomic.Int64
}

func newDecodeCodec() *decodeCodec {
	return &decodeCodec{base: encoding.GetCodecV2(proto.Name)}
}

func (c *decodeCodec) Name() string { return proto.Name }

func (c *decodeCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e.b)}, nil
	}
	return c.base.Marshal(v)
}

// Encoded is a message encoded once, to be sent as it is (SendMsg) on any
// number of streams of a server of this package: what many watches send
// alike is encoded once. It is read-only.
type Encoded struct{ b []byte }

// Encode encodes m for sending as it is.
func Encode(m protoapi.Message) (*Encoded, error) {
	b, err := protoapi.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &Encoded{b: b}, nil
}

// EncodedBytes wraps b, a message its caller encoded itself in protobuf's
// wire format, for sending as it is. b must not change afterwards.
func EncodedBytes(b []byte) *Encoded { return &Encoded{b: b} }

// Len is the encoded size.
func (e *Encoded) Len() int { return len(e.b) }

func (c *decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(protoapi.Message)
	if !ok {
		return err
	}
	protoapi.Reset(m)
	c.pending.Add(1)
	c.failed.Store(v, err)
	return nil
}

// unary answers a unary request that did not decode. It runs first in the
// chain: the codec remembered the request, and every interceptor after it
// (rate limits, authorization) might refuse the call without looking.
// Streaming requests are decoded inside the handler, where the validator
// interceptor's RecvMsg checks them.
func (c *decodeCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// take returns, and forgets, the decode error of a request message; nil
// when it decoded.
func (c *decodeCodec) take(v any) error {
	if c == nil || c.pending.Load() == 0 {
		return nil
	}
	e, ok := c.failed.LoadAndDelete(v)
	if !ok {
		return nil
	}
	c.pending.Add(-1)
	return apierr.New(codes.InvalidArgument, ReasonUndecodable,
		fmt.Sprintf("the request is not a valid encoding of its message: %v", e), nil)
}
