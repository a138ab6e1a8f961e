package dial

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// HealthCheck returns a readiness check (for server.AddReadinessCheck) that
// asks the grpc.health.v1 service at the other end of conn about service
// ("" for the whole server). Its error says what a reader of /readyz needs:
// "not reachable: <why>" or "NOT_SERVING".
func HealthCheck(conn grpc.ClientConnInterface, service string) func(context.Context) error {
	client := healthpb.NewHealthClient(conn)
	return func(ctx context.Context) error {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			st := status.Convert(err)
			switch st.Code() {
			case codes.Unavailable, codes.DeadlineExceeded:
				return fmt.Errorf("not reachable: %s", st.Message())
			}
			return fmt.Errorf("health check failed: %s: %s", st.Code(), st.Message())
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s", resp.GetStatus())
		}
		return nil
	}
}
