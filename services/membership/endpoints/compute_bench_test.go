package endpoints

import (
	"fmt"
	"testing"
)

// BenchmarkCompute: the endpoint set of a Service with two ports, one of
// them named, over 1,000 dual-stack Pods.
func BenchmarkCompute(b *testing.B) {
	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{
		{Name: "http", Port: 80, TargetPort: TargetPortName("http")},
		{Name: "metrics", Port: 9100, TargetPort: TargetPortNumber(9100)},
	}}
	ws := make([]Workload, 1000)
	for i := range ws {
		ws[i] = Workload{
			Kind: KindPod, Namespace: "shop", Name: fmt.Sprintf("web-%04d", i), UID: fmt.Sprintf("uid-%04d", i),
			Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/256, i%256), fmt.Sprintf("fd00::%x", i)},
			Ports:     []ContainerPort{{Name: "http", Port: 8080}},
			Phase:     PhaseRunning, Ready: i%10 != 0, NodeName: fmt.Sprintf("node-%d", i%50), Zone: "zone-a",
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		set := Compute(svc, ws, WithClusterName("east"))
		if len(set.Groups) != 2 {
			b.Fatalf("got %d groups", len(set.Groups))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ws)), "ns/workload")
}
