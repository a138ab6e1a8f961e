package bolt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// crashChildEnv makes the test binary act as the process TestCrash kills.
const crashChildEnv = "PLEXUS_BOLT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	code := m.Run()
	if benchDir != "" {
		_ = os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// crashChild allocates and releases from 32 goroutines until it is
// killed, printing what it is about to release and every acknowledged
// commit:
//
//	A <rev> <addr> <owner>   allocation acknowledged
//	T <addr> <rev>           about to release the allocation made at rev
//	D <rev> <addr>           release acknowledged
func crashChild(path string) int {
	s, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	// Bounded even if the parent never kills it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			type held struct {
				addr netip.Addr
				rev  int64
			}
			var mine []held
			for i := 0; ctx.Err() == nil; i++ {
				if len(mine) > 0 && rng.IntN(3) == 0 {
					h := mine[0]
					mine = mine[1:]
					fmt.Fprintf(os.Stdout, "T %s %d\n", h.addr, h.rev)
					rev, err := s.Commit(ctx, store.Txn{
						Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: "p", Address: h.addr, Revision: h.rev}},
						Ops:   []store.Op{{Kind: store.OpDeleteAllocation, PoolID: "p", Address: h.addr}},
					})
					if err == nil {
						fmt.Fprintf(os.Stdout, "D %d %s\n", rev, h.addr)
					}
					continue
				}
				addr := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(256)), byte(rng.IntN(256))})
				o := decide.Owner{Kind: "Pod", Namespace: "crash", Name: fmt.Sprintf("p%d-g%d-%d", os.Getpid(), g, i)}
				rev, err := s.Commit(ctx, store.Txn{
					Conds: []store.Cond{
						{Kind: store.CondAllocationAbsent, Pool: "p", Address: addr},
						{Kind: store.CondOwnerAbsent, Pool: "p", OwnerKey: o.Key()},
					},
					Ops: []store.Op{{Kind: store.OpPutAllocation, Allocation: &store.Allocation{Pool: "p", Address: addr, Owner: o}}},
				})
				if err == nil {
					fmt.Fprintf(os.Stdout, "A %d %s %s\n", rev, addr, o.Name)
					mine = append(mine, held{addr, rev})
				}
			}
		})
	}
	wg.Wait()
	return 0
}

type ackedAlloc struct {
	rev   int64
	addr  string
	owner string
}

// crashModel is what the children acknowledged, across all runs.
type crashModel struct {
	allocs  []ackedAlloc
	tried   map[string]bool  // "addr@rev": a release was attempted
	deleted map[string]int64 // addr -> latest acknowledged release of it
	maxRev  int64
}

func (m *crashModel) add(t *testing.T, line string) {
	f := strings.Fields(line)
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "line %q", line)
		return n
	}
	switch {
	case len(f) == 4 && f[0] == "A":
		a := ackedAlloc{rev: num(f[1]), addr: f[2], owner: f[3]}
		m.allocs = append(m.allocs, a)
		m.maxRev = max(m.maxRev, a.rev)
	case len(f) == 3 && f[0] == "T":
		m.tried[f[1]+"@"+f[2]] = true
	case len(f) == 3 && f[0] == "D":
		rev := num(f[1])
		m.maxRev = max(m.maxRev, rev)
		m.deleted[f[2]] = max(m.deleted[f[2]], rev)
	default:
		require.FailNow(t, "unexpected line from child", "%q", line)
	}
}

// TestCrash kills a process that is committing from 32 goroutines at a
// random moment, ten times over, and checks after each restart that the
// file opens, that every acknowledged allocation is there unless a
// release of it was attempted, that no acknowledged release is undone, and
// that the owner index agrees with the allocations.
func TestCrash(t *testing.T) {
	const (
		runs   = 10
		budget = 20 * time.Second
	)
	path := filepath.Join(t.TempDir(), "crash.db")
	m := &crashModel{tried: map[string]bool{}, deleted: map[string]int64{}}
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 1))
	for run := 0; run < runs && time.Since(start) < budget; run++ {
		lines := runAndKill(t, path, time.Duration(20+rng.IntN(180))*time.Millisecond)
		for _, l := range lines {
			m.add(t, l)
		}
		verifyCrashFile(t, path, m)
		t.Logf("run %d: %d lines, %d allocations acknowledged so far, revision %d", run, len(lines), len(m.allocs), m.maxRev)
	}
	require.NotEmpty(t, m.allocs)
}

// runAndKill starts a child, lets it commit for a while after its first
// acknowledgement, SIGKILLs it and returns the complete lines it printed.
func runAndKill(t *testing.T, path string, after time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var (
		mu      sync.Mutex
		lines   []string
		first   = make(chan struct{})
		readErr = make(chan error, 1)
	)
	go func() {
		r := bufio.NewReader(out)
		once := sync.OnceFunc(func() { close(first) })
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				// A line cut by the kill was never acknowledged in full.
				if errors.Is(err, io.EOF) {
					err = nil
				}
				once()
				readErr <- err
				return
			}
			mu.Lock()
			lines = append(lines, strings.TrimSuffix(line, "\n"))
			mu.Unlock()
			once()
		}
	}()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		require.FailNow(t, "child printed nothing", stderr.String())
	}
	// The crash point is the test: the child is killed this long into
	// its writes, not once something has happened.
	time.Sleep(after)
	require.NoError(t, cmd.Process.Kill())
	require.NoError(t, <-readErr)
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "child must die by the kill: %s", stderr.String())
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, lines, "child exited before acknowledging anything: %s", stderr.String())
	return lines
}

func verifyCrashFile(t *testing.T, path string, m *crashModel) {
	t.Helper()
	s, err := Open(path)
	require.NoError(t, err, "the file must open cleanly after a crash")
	defer func() { require.NoError(t, s.Close()) }()
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.GreaterOrEqual(t, snap.Revision, m.maxRev, "an acknowledged revision was lost")

	held := make(map[string]store.Allocation, len(snap.Allocations))
	for _, a := range snap.Allocations {
		k := a.Address.String()
		_, dup := held[k]
		require.False(t, dup, "address %s held twice", k)
		held[k] = a
	}
	for _, a := range m.allocs {
		if m.tried[a.addr+"@"+strconv.FormatInt(a.rev, 10)] {
			continue // released, or maybe released: the kill may have cut the ack
		}
		got, ok := held[a.addr]
		require.True(t, ok, "acknowledged allocation %s (revision %d) is missing", a.addr, a.rev)
		require.Equal(t, a.owner, got.Owner.Name, "address %s", a.addr)
		require.Equal(t, a.rev, got.Revision, "address %s", a.addr)
	}
	// After an acknowledged release the address is free until a later
	// allocation.
	for addr, rev := range m.deleted {
		if got, ok := held[addr]; ok {
			require.Greater(t, got.Revision, rev, "acknowledged release of %s at revision %d was undone", addr, rev)
		}
	}

	// bbolt's own page-level check: no page leaked, freed twice or
	// unreachable.
	require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}))

	// The owner index built as the file opened files every allocation
	// under its owner, and nothing else.
	require.NoError(t, s.Ready(t.Context()))
	for _, a := range snap.Allocations {
		_, ok := s.index.seq(a.Pool, a.Address)
		require.True(t, ok, "allocation %s/%s not in the index", a.Pool, a.Address)
		found := false
		s.index.eachOwner(s.index.ownerHash(a.Pool, a.Owner.Key()), func(addr netip.Addr) bool {
			found = addr == a.Address
			return !found
		})
		require.True(t, found, "allocation %s of %s not in the owner index", a.Address, a.Owner.Key())
	}
	require.Equal(t, len(snap.Allocations), s.index.size())
	require.Equal(t, len(snap.Allocations), s.index.ownerLen())
}
