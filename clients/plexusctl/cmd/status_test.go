package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/internal/version"
)

// TestStatus runs status against one server of the shared runtime that
// answers for all four services, then with one of them not serving.
func TestStatus(t *testing.T) {
	cfg := config.New(config.Importer)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := server.New(*cfg, "importer", server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), server.WithoutSignalHandling())
	require.NoError(t, err)
	srv.AddHealthInfo("plexus-leader", func() string { return "replica-7" })
	for _, name := range serviceNames {
		srv.SetServing(name, true)
	}
	servertest.Serve(t, srv)

	run := func() (string, error) {
		var out bytes.Buffer
		root := NewRoot(&out)
		root.SetArgs([]string{"status", "-o", "json", "--timeout", "5s",
			"--allocator-addr", srv.GRPCAddr(), "--membership-addr", srv.GRPCAddr(),
			"--importer-addr", srv.GRPCAddr(), "--repair-addr", srv.GRPCAddr()})
		err := root.Execute()
		return out.String(), err
	}
	var out string
	require.Eventually(t, func() bool { out, err = run(); return err == nil }, 10*time.Second, 50*time.Millisecond)
	var got []map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 4)
	for _, s := range got {
		require.Equal(t, "SERVING", s["status"], s)
		require.Equal(t, version.String(), s["version"])
		require.Equal(t, "replica-7", s["leader"])
	}

	srv.SetServing(serviceNames["repair"], false)
	out, err = run()
	require.ErrorIs(t, err, errNotHealthy)
	require.Contains(t, out, "NOT_SERVING")
}

// TestStatusHungService: a service that accepts connections and never
// answers is reported UNREACHABLE within --timeout, and the others are
// still asked in full.
func TestStatusHungService(t *testing.T) {
	cfg := config.New(config.Importer)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	srv, err := server.New(*cfg, "importer", server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), server.WithoutSignalHandling())
	require.NoError(t, err)
	for _, name := range serviceNames {
		srv.SetServing(name, true)
	}
	servertest.Serve(t, srv)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()

	var out bytes.Buffer
	root := NewRoot(&out)
	root.SetArgs([]string{"status", "-o", "json", "--timeout", "2s",
		"--allocator-addr", silent.Addr().String(), "--membership-addr", srv.GRPCAddr(),
		"--importer-addr", srv.GRPCAddr(), "--repair-addr", srv.GRPCAddr()})
	require.ErrorIs(t, root.Execute(), errNotHealthy)
	var got []map[string]string
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	require.Len(t, got, 4)
	require.Equal(t, "UNREACHABLE", got[0]["status"], got[0])
	for _, s := range got[1:] {
		require.Equal(t, "SERVING", s["status"], s)
	}
}

// TestUnknownOutputFormatCallsNothing: a mistyped --output is refused
// before the command calls anything, so a write is never made and then
// reported as failed.
func TestUnknownOutputFormatCallsNothing(t *testing.T) {
	root := NewRoot(io.Discard)
	// Nothing listens on the address: a call would fail differently.
	root.SetArgs([]string{"pool", "create", "vips", "--cidr", "10.112.0.0/16", "-o", "jsn", "--allocator-addr", "127.0.0.1:1", "--timeout", "2s"})
	err := root.Execute()
	require.ErrorContains(t, err, "--output")
	require.ErrorContains(t, err, `"jsn"`)
}

// TestVersion: --version and the version command print the release of the
// VERSION file and the commit, and exit cleanly.
func TestVersion(t *testing.T) {
	for args, want := range map[string]string{
		"--version": "plexusctl version " + version.String() + "\n",
		"version":   "plexusctl " + version.String() + "\n",
	} {
		var out bytes.Buffer
		root := NewRoot(&out)
		root.SetArgs([]string{args})
		require.NoError(t, root.Execute())
		require.Equal(t, want, out.String())
		require.Contains(t, out.String(), version.Version())
	}
}

// TestWatchOutputHeaderOnce: a watch prints its table header once, not
// before every event.
func TestWatchOutputHeaderOnce(t *testing.T) {
	var out bytes.Buffer
	w := &watchOutput{w: &out, format: "table"}
	for i := range 3 {
		require.NoError(t, w.render(nil, func() *table {
			return &table{header: []string{"EVENT", "ADDRESS"}, rows: [][]string{{"ADDED", fmt.Sprint("10.0.0.", i)}}}
		}))
	}
	require.Equal(t, 1, strings.Count(out.String(), "EVENT"), "%s", out.String())
	require.Equal(t, 3, strings.Count(out.String(), "ADDED"))
}
