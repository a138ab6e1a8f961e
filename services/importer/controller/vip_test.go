package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/importer/exports"
)

// TestVIPGuard: a replica whose guard refuses (a deposed leader) asks the
// allocator for nothing.
func TestVIPGuard(t *testing.T) {
	alloc := &fakeAlloc{owned: map[string]string{}}
	refused := errors.New("not leading")
	var guard error
	v := newVIPCache(alloc, []string{"v4"}, func() error { return guard })
	key := exports.Key{Namespace: "ns", Name: "x"}

	guard = refused
	_, err := v.get(context.Background(), key)
	require.ErrorIs(t, err, refused)
	require.Empty(t, alloc.owned, "allocated although the guard refused")

	guard = nil
	ips, err := v.get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.11"}, ips)

	// A cached answer needs no call, so no guard either.
	guard = refused
	ips, err = v.get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.11"}, ips)
}
