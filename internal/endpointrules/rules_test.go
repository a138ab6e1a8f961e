package endpointrules

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"
)

func TestAddress(t *testing.T) {
	tests := []struct {
		in   string
		v6   bool
		want string // "" means refused
	}{
		{"10.0.0.1", false, "10.0.0.1"},
		{"fd00::1", true, "fd00::1"},
		{"FD00:0000::0001", true, "fd00::1"},
		{"2001:db8:0:0:0:0:0:1", true, "2001:db8::1"},
		{"10.0.0.01", false, ""},
		{"fd00::1", false, ""},
		{"10.0.0.1", true, ""},
		{"::ffff:10.0.0.1", true, ""},
		{"fe80::1%eth0", true, ""},
		{"0.0.0.0", false, ""},
		{"::", true, ""},
		{"127.0.0.1", false, ""},
		{"127.255.0.9", false, ""},
		{"::1", true, ""},
		{"169.254.1.1", false, ""},
		{"fe80::1", true, ""},
		{"224.0.0.5", false, ""},
		{"ff02::1", true, ""},
		{"224.0.1.5", false, "224.0.1.5"}, // multicast, not link-local: the API server takes it
		{"web.example", false, ""},
		{"", false, ""},
	}
	for _, tc := range tests {
		got, err := Address("addresses[0]", tc.in, tc.v6)
		if tc.want == "" {
			require.ErrorIsf(t, err, ErrRefused, "%q accepted", tc.in)
			continue
		}
		require.NoErrorf(t, err, "%q", tc.in)
		require.Equal(t, tc.want, got)
	}
}

func ptr[T any](v T) *T { return &v }

// Endpoint canonicalises ep's addresses, as the entry points do, and checks
// it.
func Endpoint(at discovery.AddressType, ep *discovery.Endpoint) error {
	for i, a := range ep.Addresses {
		ep.Addresses[i] = Canonical(a, at == discovery.AddressTypeIPv6)
	}
	return (&Checker{}).Endpoint(at, ep)
}

func TestEndpoint(t *testing.T) {
	good := func() discovery.Endpoint {
		return discovery.Endpoint{
			Addresses: []string{"10.1.2.3"},
			Hostname:  ptr("web-0"),
			NodeName:  ptr("node-1.example"),
			Hints:     &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "zone-a"}}},
		}
	}
	ep := good()
	require.NoError(t, Endpoint(discovery.AddressTypeIPv4, &ep))

	v6 := discovery.Endpoint{Addresses: []string{"FD00::0A"}}
	require.NoError(t, Endpoint(discovery.AddressTypeIPv6, &v6))
	require.Equal(t, []string{"fd00::a"}, v6.Addresses, "addresses are canonicalised in place")

	var zones []discovery.ForZone
	for _, z := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		zones = append(zones, discovery.ForZone{Name: z})
	}
	tests := []struct {
		name  string
		edit  func(*discovery.Endpoint)
		field string
	}{
		{"no address", func(e *discovery.Endpoint) { e.Addresses = nil }, "addresses"},
		{"too many addresses", func(e *discovery.Endpoint) { e.Addresses = make([]string, 101) }, "addresses"},
		{"loopback", func(e *discovery.Endpoint) { e.Addresses = []string{"127.0.0.1"} }, "addresses[0]"},
		{"hostname not a label", func(e *discovery.Endpoint) { e.Hostname = ptr("Bad_Host") }, "hostname"},
		{"node name", func(e *discovery.Endpoint) { e.NodeName = ptr("Node One") }, "nodeName"},
		{"nine zone hints", func(e *discovery.Endpoint) { e.Hints.ForZones = zones }, "hints.forZones"},
		{"zone hint twice", func(e *discovery.Endpoint) {
			e.Hints.ForZones = []discovery.ForZone{{Name: "a"}, {Name: "a"}}
		}, "hints.forZones[1]"},
		{"zone hint not a label value", func(e *discovery.Endpoint) {
			e.Hints.ForZones = []discovery.ForZone{{Name: "a zone"}}
		}, "hints.forZones[0]"},
		{"node hint", func(e *discovery.Endpoint) {
			e.Hints.ForNodes = []discovery.ForNode{{Name: "UPPER"}}
		}, "hints.forNodes[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := good()
			tc.edit(&ep)
			err := Endpoint(discovery.AddressTypeIPv4, &ep)
			require.ErrorIs(t, err, ErrRefused)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tc.field, e.Field)
		})
	}

	fq := discovery.Endpoint{Addresses: []string{"web.example.com"}}
	require.NoError(t, Endpoint(discovery.AddressTypeFQDN, &fq))
	fq.Addresses = []string{"-bad-"}
	require.ErrorIs(t, Endpoint(discovery.AddressTypeFQDN, &fq), ErrRefused)
	require.ErrorIs(t, Endpoint("IP", &fq), ErrRefused)
}

func TestPorts(t *testing.T) {
	p := func(name string, num int32, app string) discovery.EndpointPort {
		out := discovery.EndpointPort{Name: &name, Port: &num}
		if app != "" {
			out.AppProtocol = &app
		}
		return out
	}
	require.NoError(t, Ports([]discovery.EndpointPort{p("http", 80, "kubernetes.io/h2c"), p("", 81, "")}))
	require.NoError(t, Ports([]discovery.EndpointPort{{}}), "a port with no number means every port")
	for name, ports := range map[string][]discovery.EndpointPort{
		"duplicate name":        {p("http", 80, ""), p("http", 81, "")},
		"two unnamed":           {p("", 80, ""), p("", 81, "")},
		"name not a label":      {p("HTTP_1", 80, "")},
		"port zero":             {p("a", 0, "")},
		"port too large":        {p("a", 70000, "")},
		"app protocol bad":      {p("a", 80, "not a name!")},
		"app protocol too long": {p("a", 80, strings.Repeat("x", 64))},
	} {
		require.ErrorIsf(t, Ports(ports), ErrRefused, "%s accepted", name)
	}
}

func TestErrorValueIsBounded(t *testing.T) {
	err := Hostname("hostname", strings.Repeat("A", 1<<20))
	require.Error(t, err)
	require.Less(t, len(err.Error()), 1024)
}

// FuzzEndpoint: whatever the input, Endpoint either refuses it with an
// Error or accepts it in a form it accepts again unchanged (canonical).
func FuzzEndpoint(f *testing.F) {
	f.Add("10.0.0.1", false, "web-0", "node-1", "zone-a")
	f.Add("FD00::1", true, "", "", "")
	f.Add("127.0.0.1", false, "Bad_Host", "n", "z")
	f.Add("fe80::1%eth0", true, "a", "b", "c")
	f.Fuzz(func(t *testing.T, addr string, v6 bool, host, node, zone string) {
		at := discovery.AddressTypeIPv4
		if v6 {
			at = discovery.AddressTypeIPv6
		}
		ep := discovery.Endpoint{Addresses: []string{addr}}
		if host != "" {
			ep.Hostname = &host
		}
		if node != "" {
			ep.NodeName = &node
		}
		if zone != "" {
			ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
		}
		err := Endpoint(at, &ep)
		if err != nil {
			var e *Error
			if !strings.Contains(err.Error(), ":") || !errorsAs(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if len(e.Value) > maxShown+3 {
				t.Fatalf("value not bounded: %d bytes", len(e.Value))
			}
			return
		}
		again := *ep.DeepCopy()
		if err := Endpoint(at, &again); err != nil {
			t.Fatalf("canonical form %v refused: %v", ep.Addresses, err)
		}
		if again.Addresses[0] != ep.Addresses[0] {
			t.Fatalf("canonical form not stable: %q then %q", ep.Addresses[0], again.Addresses[0])
		}
	})
}

// FuzzPorts: a port list is refused with an Error or accepted; never a
// panic.
func FuzzPorts(f *testing.F) {
	f.Add("http", int32(80), "kubernetes.io/h2c", "http", int32(81))
	f.Add("", int32(0), "", "", int32(65536))
	f.Fuzz(func(t *testing.T, n1 string, p1 int32, app string, n2 string, p2 int32) {
		ports := []discovery.EndpointPort{{Name: &n1, Port: &p1, AppProtocol: &app}, {Name: &n2, Port: &p2}}
		if err := Ports(ports); err != nil {
			var e *Error
			if !errorsAs(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
		}
	})
}

func errorsAs(err error, target **Error) bool { return errors.As(err, target) }
