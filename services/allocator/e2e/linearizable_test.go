package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// The allocator's sequential specification, as the linearizability checker
// sees it. A pool is a set of addresses, each free or held by one owner:
//
//   - Allocate(owner) → addr may return addr only if addr is free or already
//     held by that owner (a retry, or the owner's idempotent second call);
//     addr is then held by owner.
//   - Release(owner) of the address it holds frees it. A release that
//     succeeded without allow_missing (or whose NOT_FOUND came after an
//     earlier attempt that may have committed it) found the owner holding
//     the address; with allow_missing, releasing an owner that holds
//     nothing is allowed and changes nothing.
//   - Get(addr) → owner returns the address's holder ("" when it is free)
//     and changes nothing.
//
// Addresses are independent of each other, so the history is partitioned by
// address and each partition's state is just its holder. (The coupling
// through "an owner holds one address" is checked by the history's own
// bookkeeping: an owner's operations come from one client, one at a time.)

// linOp is one operation of the recorded history.
type linOp struct {
	release, get bool
	// allowMissing: a release that may have found nothing to release.
	allowMissing bool
	// owner is the allocating or releasing owner; for a Get, the holder
	// it returned ("" for none).
	owner string
	addr  string // returned by Allocate; released by Release; read by Get
}

var allocatorModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byAddr := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			a := op.Input.(linOp).addr
			if _, ok := byAddr[a]; !ok {
				order = append(order, a)
			}
			byAddr[a] = append(byAddr[a], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, a := range order {
			parts = append(parts, byAddr[a])
		}
		return parts
	},
	Init: func() any { return "" }, // holder of the partition's address
	Step: func(state, input, _ any) (bool, any) {
		holder, op := state.(string), input.(linOp)
		if op.get {
			return holder == op.owner, holder
		}
		if op.release {
			if holder == op.owner {
				return true, ""
			}
			return op.allowMissing, holder
		}
		return holder == "" || holder == op.owner, op.owner
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(linOp)
		switch {
		case op.get && op.owner == "":
			return fmt.Sprintf("get(%s) → free", op.addr)
		case op.get:
			return fmt.Sprintf("get(%s) → %s", op.addr, op.owner)
		case op.release:
			return fmt.Sprintf("release(%s) %s", op.owner, op.addr)
		}
		return fmt.Sprintf("allocate(%s) → %s", op.owner, op.addr)
	},
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "free"
		}
		return "held by " + state.(string)
	},
}

// linHistory records operations with their invocation and response times:
// an operation retried on several replicas spans from its first attempt to
// the answer it got.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func newLinHistory() *linHistory { return &linHistory{start: time.Now()} }

// now is the time on the history's clock.
func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(client int, op linOp, call int64) {
	ret := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: op, Call: call, Return: ret})
}

// check runs the linearizability checker; when the history is not
// linearizable it writes the checker's visualization next to the test's
// output and fails.
func (h *linHistory) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(allocatorModel, ops, time.Minute)
	if res == porcupine.Illegal {
		path := filepath.Join(t.TempDir(), "history.html")
		if err := porcupine.VisualizePath(allocatorModel, info, path); err == nil {
			if b, err := os.ReadFile(path); err == nil {
				out := filepath.Join(os.TempDir(), fmt.Sprintf("plexus-%s-history.html", t.Name()))
				_ = os.WriteFile(out, b, 0o644)
				t.Logf("history visualization: %s", out)
			}
		}
	}
	require.Equal(t, porcupine.Ok, res, "the allocate/release/get history of %d operations is linearizable", len(ops))
	t.Logf("linearizability: %d operations checked: %s", len(ops), res)
}

// TestLinearizabilityModel: the checker with this model rejects the
// histories that must fail, so the check in the kill test can fail.
func TestLinearizabilityModel(t *testing.T) {
	op := func(client int, release bool, owner, addr string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linOp{release: release, owner: owner, addr: addr}, Call: call, Return: ret}
	}
	get := func(client int, addr, holder string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linOp{get: true, owner: holder, addr: addr}, Call: call, Return: ret}
	}
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"sequential reuse after release", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, true, "a", "10.0.0.1", 2, 3), op(1, false, "b", "10.0.0.1", 4, 5),
		}},
		{"two owners at once", false, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(1, false, "b", "10.0.0.1", 2, 3),
		}},
		{"reuse acknowledged before the release was sent", false, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(1, false, "b", "10.0.0.1", 2, 3), op(0, true, "a", "10.0.0.1", 4, 5),
		}},
		{"reuse concurrent with the release", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, true, "a", "10.0.0.1", 2, 6), op(1, false, "b", "10.0.0.1", 3, 4),
		}},
		{"the same allocation released twice", false, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, true, "a", "10.0.0.1", 2, 3), op(0, true, "a", "10.0.0.1", 4, 5),
		}},
		{"a release without allow_missing finds nothing", false, []porcupine.Operation{
			op(0, true, "a", "10.0.0.1", 0, 1),
		}},
		{"a release with allow_missing finds nothing", true, []porcupine.Operation{
			{ClientId: 0, Input: linOp{release: true, allowMissing: true, owner: "a", addr: "10.0.0.1"}, Call: 0, Return: 1},
		}},
		{"a retry gets the owner's address again", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, false, "a", "10.0.0.1", 2, 3),
		}},
		{"different addresses do not interfere", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 3), op(1, false, "b", "10.0.0.2", 1, 2),
		}},
		{"a read after the allocation sees it", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), get(1, "10.0.0.1", "a", 2, 3),
		}},
		{"a read after the allocation misses it", false, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), get(1, "10.0.0.1", "", 2, 3),
		}},
		{"a read after the release still sees the holder", false, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, true, "a", "10.0.0.1", 2, 3), get(1, "10.0.0.1", "a", 4, 5),
		}},
		{"a read concurrent with the release may see either", true, []porcupine.Operation{
			op(0, false, "a", "10.0.0.1", 0, 1), op(0, true, "a", "10.0.0.1", 2, 5), get(1, "10.0.0.1", "a", 3, 4), get(2, "10.0.0.1", "", 3, 4),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.ok, porcupine.CheckOperations(allocatorModel, tc.ops))
		})
	}
}
