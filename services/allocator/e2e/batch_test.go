package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestBatchBeyondEtcdLimits: on etcd, a BatchAllocate larger than one etcd
// transaction takes, by its operations or by its bytes, is refused with
// INVALID_ARGUMENT and reason BATCH_TOO_LARGE, and allocates nothing; a
// batch within the limits goes, and so does the large one's request id,
// afterwards, with a batch that fits.
func TestBatchBeyondEtcdLimits(t *testing.T) {
	for _, c := range []struct {
		name          string
		etcdArgs      []string
		fits, refused int
	}{
		// 3 writes an allocation against etcd's default --max-txn-ops of 128.
		{"Operations", nil, 40, 100},
		// About 600 bytes an allocation against its 1.5 MiB of
		// --max-request-bytes, the operations allowed.
		{"Bytes", []string{"--max-txn-ops=32768"}, 2000, 5000},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := kubetest.StartEtcd(t, c.etcdArgs...)
			a := startAllocator(t, "--store=etcd:"+e.Endpoints()[0])
			conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			client := allocatorv1.NewAllocatorServiceClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = client.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.8.0.0/16"}}})
			require.NoError(t, err)
			batch := func(n int, tag string) *allocatorv1.BatchAllocateRequest {
				req := &allocatorv1.BatchAllocateRequest{RequestId: "batch-" + tag}
				for i := range n {
					name := fmt.Sprintf("%s-%d", tag, i)
					req.Requests = append(req.Requests, &allocatorv1.AllocateRequest{Pool: "pools/p",
						Owner: &allocatorv1.Owner{Cluster: "cluster-east-1", Kind: "Pod", Namespace: "payments", Name: name, Uid: "3f2b8c1e-5d4a-4c3b-9e8f-" + name}})
				}
				return req
			}

			_, err = client.BatchAllocate(ctx, batch(c.refused, "large"))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Equal(t, "BATCH_TOO_LARGE", apierr.Reason(err))
			require.Less(t, len(status.Convert(err).Message()), 1024)
			list, err := listAll(ctx, client, "p")
			require.NoError(t, err)
			require.Empty(t, list, "a refused batch allocates nothing")

			resp, err := client.BatchAllocate(ctx, batch(c.fits, "fits"))
			require.NoError(t, err)
			require.Len(t, resp.GetAllocations(), c.fits)
			// The refused batch's request id recorded nothing: used again
			// for a batch that fits, it is a new request.
			retry := batch(1, "after")
			retry.RequestId = "batch-large"
			_, err = client.BatchAllocate(ctx, retry)
			require.NoError(t, err)
			list, err = listAll(ctx, client, "p")
			require.NoError(t, err)
			require.Len(t, list, c.fits+1)
		})
	}
}
