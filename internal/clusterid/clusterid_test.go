package clusterid

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// props is a Getter over a map; err, when set, is returned for every read.
func props(m map[string]string, err error) Getter {
	return func(_ context.Context, name string) (string, error) {
		if err != nil {
			return "", err
		}
		v, ok := m[name]
		if !ok {
			return "", ErrNotFound
		}
		return v, nil
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		props   map[string]string
		flag    string
		want    Identity
		wantErr string
	}{
		{name: "property alone", props: map[string]string{"cluster.clusterset.k8s.io": "east", "clusterset.k8s.io": "prod"},
			want: Identity{Cluster: "east", ClusterSet: "prod", Source: FromProperty}},
		{name: "flag alone", flag: "west", want: Identity{Cluster: "west", Source: FromFlag}},
		{name: "both agree", props: map[string]string{"cluster.clusterset.k8s.io": "east"}, flag: "east",
			want: Identity{Cluster: "east", Source: FromBoth}},
		{name: "both disagree", props: map[string]string{"cluster.clusterset.k8s.io": "east"}, flag: "west",
			wantErr: `--cluster-name "west" disagrees with the ClusterProperty cluster.clusterset.k8s.io, which says "east"`},
		{name: "neither", wantErr: "no cluster id: create the ClusterProperty cluster.clusterset.k8s.io"},
		{name: "clusterset without id", props: map[string]string{"clusterset.k8s.io": "prod"},
			wantErr: "no cluster id"},
		{name: "property not a DNS label", props: map[string]string{"cluster.clusterset.k8s.io": "East_1"},
			wantErr: `cluster id "East_1" (from the ClusterProperty) is not a DNS label`},
		{name: "long property cut in the message", props: map[string]string{"cluster.clusterset.k8s.io": strings.Repeat("a", 5000)}, flag: "x",
			wantErr: "(5000 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(t.Context(), props(tc.props, nil), Options{Flag: tc.flag})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Less(t, len(err.Error()), 400, "messages stay short whatever the property holds")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// An API that cannot be read is retried until the wait passes, then
// reported: never taken for "no property", which would let the flag win
// over a property that says otherwise.
func TestResolveUnreadable(t *testing.T) {
	boom := errors.New("connection refused")
	start := time.Now()
	_, err := Resolve(t.Context(), props(nil, boom), Options{Flag: "east", Wait: 300 * time.Millisecond})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "read ClusterProperty cluster.clusterset.k8s.io")
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "retried before giving up")

	// A blip that clears is ridden out.
	var calls int
	flaky := func(ctx context.Context, name string) (string, error) {
		calls++
		if calls < 3 {
			return "", boom
		}
		return props(map[string]string{"cluster.clusterset.k8s.io": "east"}, nil)(ctx, name)
	}
	got, err := Resolve(t.Context(), flaky, Options{Wait: 5 * time.Second})
	require.NoError(t, err)
	require.Equal(t, "east", got.Cluster)
}
