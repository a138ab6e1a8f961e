package etcd

import (
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Commits go to etcd as protobuf built here, not through clientv3.Op,
// which clientv3 copies into the same protobuf again: over a third of what
// a commit allocated (BenchmarkCommit). Reads keep using clientv3.

// txnCallOpts are clientv3's defaults for a KV call, and maxSendBytes.
var txnCallOpts = []grpc.CallOption{
	grpc.WaitForReady(true),
	grpc.MaxCallSendMsgSize(maxSendBytes),
	grpc.MaxCallRecvMsgSize(math.MaxInt32),
}

// txn sends If(cmps) Then(ops) as clientv3's Txn does: through the
// client's retrying KV client, which retries a write only when it cannot
// have reached etcd, and with its errors translated the same way.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, ops []*pb.RequestOp) (*pb.TxnResponse, error) {
	resp, err := s.kv.Txn(ctx, &pb.TxnRequest{Compare: compares(cmps), Success: ops}, txnCallOpts...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return resp, nil
}

// compares views cmps as the protobuf they wrap, without copying them.
func compares(cmps []clientv3.Cmp) []*pb.Compare {
	if len(cmps) == 0 {
		return nil
	}
	out := make([]*pb.Compare, len(cmps))
	for i := range cmps {
		out[i] = (*pb.Compare)(&cmps[i])
	}
	return out
}

func putOp(key, value string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
		RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

// deleteOp deletes key, or with end != "" the range [key, end).
func deleteOp(key, end string) *pb.RequestOp {
	r := &pb.DeleteRangeRequest{Key: []byte(key)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
}

// txnOp nests If(cmps) Then(ops) in a transaction.
func txnOp(cmps []clientv3.Cmp, ops []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{
		RequestTxn: &pb.TxnRequest{Compare: compares(cmps), Success: ops}}}
}
