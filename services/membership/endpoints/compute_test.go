package endpoints

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func pod(name string, ips ...string) Workload {
	return Workload{
		Kind:      KindPod,
		Namespace: "shop",
		Name:      name,
		UID:       "uid-" + name,
		Addresses: ips,
		Phase:     PhaseRunning,
		Ready:     true,
	}
}

func TestResolvePort(t *testing.T) {
	w := &Workload{Ports: []ContainerPort{
		{Name: "http", Port: 8080},
		{Name: "dns", Port: 5353, Protocol: ProtocolUDP},
		{Name: "dns", Port: 5354, Protocol: ProtocolTCP},
		{Name: "http", Port: 9090, Protocol: ProtocolTCP},
		{Name: "metrics", Port: 9100, Protocol: ProtocolTCP},
	}}
	tests := []struct {
		name   string
		port   ServicePort
		want   int32
		wantOK bool
	}{
		{name: "numeric", port: ServicePort{Port: 80, TargetPort: TargetPortNumber(8000)}, want: 8000, wantOK: true},
		{name: "numeric needs no workload port", port: ServicePort{Port: 80, TargetPort: TargetPortNumber(1234), Protocol: ProtocolSCTP}, want: 1234, wantOK: true},
		{name: "unset means the service port", port: ServicePort{Port: 80}, want: 80, wantOK: true},
		{name: "named, both protocols default to TCP", port: ServicePort{Port: 80, TargetPort: TargetPortName("http")}, want: 8080, wantOK: true},
		{name: "named, first match wins", port: ServicePort{Port: 80, TargetPort: TargetPortName("http"), Protocol: ProtocolTCP}, want: 8080, wantOK: true},
		{name: "named UDP picks the UDP port", port: ServicePort{Port: 53, TargetPort: TargetPortName("dns"), Protocol: ProtocolUDP}, want: 5353, wantOK: true},
		{name: "named TCP picks the TCP port", port: ServicePort{Port: 53, TargetPort: TargetPortName("dns")}, want: 5354, wantOK: true},
		{name: "name with another protocol only", port: ServicePort{Port: 80, TargetPort: TargetPortName("metrics"), Protocol: ProtocolUDP}},
		{name: "missing name", port: ServicePort{Port: 80, TargetPort: TargetPortName("grpc")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ResolvePort(tc.port, w)
			require.Equal(t, tc.wantOK, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestConditions(t *testing.T) {
	tests := []struct {
		name            string
		ready, deleting bool
		publishNotReady bool
		want            Conditions
	}{
		{name: "ready", ready: true, want: Conditions{Ready: true, Serving: true}},
		{name: "not ready", want: Conditions{}},
		{name: "terminating while serving", ready: true, deleting: true, want: Conditions{Serving: true, Terminating: true}},
		{name: "terminating, not serving", deleting: true, want: Conditions{Terminating: true}},
		{name: "publish not ready: not ready", publishNotReady: true, want: Conditions{Ready: true}},
		{name: "publish not ready: terminating", publishNotReady: true, ready: true, deleting: true, want: Conditions{Ready: true, Serving: true, Terminating: true}},
		{name: "publish not ready: ready", publishNotReady: true, ready: true, want: Conditions{Ready: true, Serving: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := pod("p", "10.0.0.1")
			w.Ready = tc.ready
			w.Terminating = tc.deleting
			svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{{Port: 80}}, PublishNotReadyAddresses: tc.publishNotReady}
			set := Compute(svc, []Workload{w})
			require.Len(t, set.Groups, 1)
			require.Len(t, set.Groups[0].Endpoints, 1)
			require.Equal(t, tc.want, set.Groups[0].Endpoints[0].Conditions)
		})
	}
}

// names lists the target names of a group's endpoints.
func names(g Group) []string {
	var out []string
	for _, ep := range g.Endpoints {
		out = append(out, ep.TargetRef.Name)
	}
	return out
}

func TestWhichWorkloadsCount(t *testing.T) {
	succeeded := pod("succeeded", "10.0.0.2")
	succeeded.Phase = PhaseSucceeded
	failed := pod("failed", "10.0.0.3")
	failed.Phase = PhaseFailed
	pending := pod("pending", "10.0.0.4")
	pending.Phase = PhasePending
	pending.Ready = false
	elsewhere := pod("elsewhere", "10.0.0.5")
	elsewhere.Namespace = "other"
	garbage := pod("garbage", "not-an-ip", "10.0.0.6", "fe80::1%eth0")
	vm := Workload{Kind: KindExternalWorkload, Namespace: "shop", Name: "vm-1", UID: "u-vm", Addresses: []string{"192.168.1.10"}, Ready: true}

	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{{Name: "http", Port: 80}}}
	set := Compute(svc, []Workload{
		pod("running", "10.0.0.1"), succeeded, failed, pending, pod("no-ip"), elsewhere, garbage, vm,
	}, WithClusterName("east"))

	require.Equal(t, "east", set.ClusterName)
	require.Equal(t, "shop", set.Namespace)
	require.Equal(t, "web", set.Service)
	require.Len(t, set.Groups, 1)
	g := set.Groups[0]
	require.Equal(t, AddressTypeIPv4, g.AddressType)
	require.Equal(t, []EndpointPort{{Name: "http", Port: 80, Protocol: ProtocolTCP}}, g.Ports)
	require.Equal(t, []string{"vm-1", "garbage", "pending", "running"}, names(g))
	require.Equal(t, []string{"10.0.0.6"}, g.Endpoints[1].Addresses)
	require.Equal(t, TargetRef{Kind: KindExternalWorkload, Namespace: "shop", Name: "vm-1", UID: "u-vm"}, g.Endpoints[0].TargetRef)
}

func TestGroupsByResolvedPorts(t *testing.T) {
	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{
		{Name: "http", Port: 80, TargetPort: TargetPortName("http")},
		{Name: "admin", Port: 81, TargetPort: TargetPortNumber(9000), AppProtocol: "http"},
	}}
	a := pod("a", "10.0.0.1")
	a.Ports = []ContainerPort{{Name: "http", Port: 8080}}
	b := pod("b", "10.0.0.2")
	b.Ports = []ContainerPort{{Name: "http", Port: 8080}}
	c := pod("c", "10.0.0.3")
	c.Ports = []ContainerPort{{Name: "http", Port: 8081}}
	d := pod("d", "10.0.0.4") // no http port: only admin

	set := Compute(svc, []Workload{d, c, b, a})
	require.Len(t, set.Groups, 3)

	require.Equal(t, []EndpointPort{{Name: "admin", Port: 9000, Protocol: ProtocolTCP, AppProtocol: "http"}}, set.Groups[0].Ports)
	require.Equal(t, []string{"d"}, names(set.Groups[0]))

	require.Equal(t, []EndpointPort{
		{Name: "http", Port: 8080, Protocol: ProtocolTCP},
		{Name: "admin", Port: 9000, Protocol: ProtocolTCP, AppProtocol: "http"},
	}, set.Groups[1].Ports)
	require.Equal(t, []string{"a", "b"}, names(set.Groups[1]))

	require.Equal(t, int32(8081), set.Groups[2].Ports[0].Port)
	require.Equal(t, []string{"c"}, names(set.Groups[2]))
}

func TestWorkloadWithNoneOfThePorts(t *testing.T) {
	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: TargetPortName("http")}}}
	set := Compute(svc, []Workload{pod("a", "10.0.0.1")})
	require.Len(t, set.Groups, 1)
	require.Nil(t, set.Groups[0].Ports)
	require.Equal(t, []string{"a"}, names(set.Groups[0]))
}

func TestAddressFamilies(t *testing.T) {
	dual := pod("dual", "10.0.0.1", "fd00::1")
	v4 := pod("v4", "10.0.0.2")
	mapped := pod("mapped", "::ffff:10.0.0.3")
	v6 := pod("v6", "FD00:0:0:0:0:0:0:2")
	all := []Workload{dual, v4, mapped, v6}

	tests := []struct {
		name  string
		types []AddressType
		want  map[AddressType][]string
	}{
		{name: "unset means both", want: map[AddressType][]string{
			AddressTypeIPv4: {"dual", "mapped", "v4"}, AddressTypeIPv6: {"dual", "v6"},
		}},
		{name: "IPv4 only", types: []AddressType{AddressTypeIPv4}, want: map[AddressType][]string{
			AddressTypeIPv4: {"dual", "mapped", "v4"},
		}},
		{name: "IPv6 first, repeated and unknown families", types: []AddressType{AddressTypeIPv6, "FQDN", AddressTypeIPv6}, want: map[AddressType][]string{
			AddressTypeIPv6: {"dual", "v6"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{{Port: 80}}, AddressTypes: tc.types}
			set := Compute(svc, all)
			got := map[AddressType][]string{}
			for _, g := range set.Groups {
				require.NotContains(t, got, g.AddressType, "one group per family here")
				got[g.AddressType] = names(g)
			}
			require.Equal(t, tc.want, got)
			for i := 1; i < len(set.Groups); i++ {
				require.Less(t, set.Groups[i-1].AddressType, set.Groups[i].AddressType)
			}
		})
	}

	set := Compute(Service{Namespace: "shop", Name: "web"}, all)
	require.Equal(t, []string{"10.0.0.3"}, set.Groups[0].Endpoints[1].Addresses, "IPv4-mapped counts as IPv4")
	require.Equal(t, []string{"fd00::2"}, set.Groups[1].Endpoints[1].Addresses, "canonical form")
}

func TestHostname(t *testing.T) {
	tests := []struct {
		name                string
		hostname, subdomain string
		want                string
	}{
		{name: "hostname and matching subdomain", hostname: "db-0", subdomain: "web", want: "db-0"},
		{name: "subdomain of another service", hostname: "db-0", subdomain: "other"},
		{name: "no subdomain", hostname: "db-0"},
		{name: "subdomain without hostname", subdomain: "web"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := pod("p", "10.0.0.1")
			w.Hostname, w.Subdomain = tc.hostname, tc.subdomain
			w.NodeName, w.Zone = "node-1", "zone-a"
			set := Compute(Service{Namespace: "shop", Name: "web"}, []Workload{w})
			ep := set.Groups[0].Endpoints[0]
			require.Equal(t, tc.want, ep.Hostname)
			require.Equal(t, "node-1", ep.NodeName)
			require.Equal(t, "zone-a", ep.Zone)
		})
	}
}

func TestComputeIsDeterministic(t *testing.T) {
	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{
		{Name: "http", Port: 80, TargetPort: TargetPortName("http")},
		{Name: "grpc", Port: 90, TargetPort: TargetPortName("grpc")},
	}}
	var ws []Workload
	for i := range 60 {
		w := pod(string(rune('a'+i%26))+string(rune('a'+i/26)), "10.0.1."+string(rune('0'+i%10)), "fd00::"+string(rune('a'+i%6)))
		if i%2 == 0 {
			w.Ports = append(w.Ports, ContainerPort{Name: "http", Port: 8080 + int32(i%3)})
		}
		if i%3 == 0 {
			w.Ports = append(w.Ports, ContainerPort{Name: "grpc", Port: 9090})
		}
		ws = append(ws, w)
	}
	want := Compute(svc, ws)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(ws)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := Compute(svc, shuffled)
		require.Equal(t, want, got)
		require.True(t, want.Equal(&got))
	}
	for _, g := range want.Groups {
		require.True(t, slices.IsSortedFunc(g.Endpoints, compareEndpoints))
	}
	require.True(t, slices.IsSortedFunc(want.Groups, compareGroups))
}

func TestSetEqual(t *testing.T) {
	svc := Service{Namespace: "shop", Name: "web", Ports: []ServicePort{{Port: 80}}}
	base := Compute(svc, []Workload{pod("a", "10.0.0.1"), pod("b", "10.0.0.2")})
	changes := map[string]func(w []Workload) ([]Workload, []Option){
		"readiness": func(w []Workload) ([]Workload, []Option) { w[0].Ready = false; return w, nil },
		"address":   func(w []Workload) ([]Workload, []Option) { w[1].Addresses = []string{"10.0.0.3"}; return w, nil },
		"zone":      func(w []Workload) ([]Workload, []Option) { w[1].Zone = "z"; return w, nil },
		"uid":       func(w []Workload) ([]Workload, []Option) { w[1].UID = "other"; return w, nil },
		"member":    func(w []Workload) ([]Workload, []Option) { return w[:1], nil },
		"cluster":   func(w []Workload) ([]Workload, []Option) { return w, []Option{WithClusterName("x")} },
	}
	same := Compute(svc, []Workload{pod("b", "10.0.0.2"), pod("a", "10.0.0.1")})
	require.True(t, base.Equal(&same))
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			ws, opts := change([]Workload{pod("a", "10.0.0.1"), pod("b", "10.0.0.2")})
			other := Compute(svc, ws, opts...)
			require.False(t, base.Equal(&other))
			require.False(t, other.Equal(&base))
		})
	}
}

func TestFingerprint(t *testing.T) {
	base := pod("p", "10.0.0.1")
	base.Ports = []ContainerPort{{Name: "http", Port: 8080}}
	fp := base.Fingerprint()

	unchanged := map[string]func(w *Workload){
		"name (identity, not content)": func(w *Workload) { w.Name = "q" },
		"pending to running":           func(w *Workload) { w.Phase = PhasePending },
		"protocol spelled out":         func(w *Workload) { w.Ports[0].Protocol = ProtocolTCP },
	}
	changed := map[string]func(w *Workload){
		"readiness":     func(w *Workload) { w.Ready = false },
		"deletion":      func(w *Workload) { w.Terminating = true },
		"terminal":      func(w *Workload) { w.Phase = PhaseFailed },
		"address":       func(w *Workload) { w.Addresses = []string{"10.0.0.2"} },
		"second ip":     func(w *Workload) { w.Addresses = append(w.Addresses, "fd00::1") },
		"port number":   func(w *Workload) { w.Ports[0].Port = 8081 },
		"port name":     func(w *Workload) { w.Ports[0].Name = "web" },
		"port protocol": func(w *Workload) { w.Ports[0].Protocol = ProtocolUDP },
		"zone":          func(w *Workload) { w.Zone = "z" },
		"node":          func(w *Workload) { w.NodeName = "n" },
		"hostname":      func(w *Workload) { w.Hostname = "h" },
		"subdomain":     func(w *Workload) { w.Subdomain = "s" },
		"uid":           func(w *Workload) { w.UID = "other" },
		"kind":          func(w *Workload) { w.Kind = KindExternalWorkload },
		// Field boundaries must count: moving text from one field to the
		// next is a change.
		"boundary": func(w *Workload) { w.Zone, w.NodeName = "ab", "c" },
	}
	for name, change := range unchanged {
		t.Run(name, func(t *testing.T) {
			w := base
			w.Ports = slices.Clone(base.Ports)
			change(&w)
			require.Equal(t, fp, w.Fingerprint())
		})
	}
	base.Zone, base.NodeName = "a", "bc"
	fp = base.Fingerprint()
	for name, change := range changed {
		t.Run(name, func(t *testing.T) {
			w := base
			w.Ports = slices.Clone(base.Ports)
			w.Addresses = slices.Clone(base.Addresses)
			change(&w)
			require.NotEqual(t, fp, w.Fingerprint())
		})
	}
}
