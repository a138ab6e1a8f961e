// Package python_test drives a real allocator through the generated Python
// client (clients/python, `make generate`), as a user of it would.
package python_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// python finds an interpreter that has grpcio and protobuf: Debian's
// (python3-grpcio, python3-protobuf) first, then python3 on the PATH.
func python(t *testing.T) string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import grpc, google.protobuf").Run() == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skip("no python3 with grpcio and protobuf (apt-get install python3-grpcio python3-protobuf)")
	}
	t.Fatal("no python3 with grpcio and protobuf (apt-get install python3-grpcio python3-protobuf; -short skips this test)")
	return ""
}

type result struct {
	Allocated []string `json:"allocated"`
	Listed    []string `json:"listed"`
	Pages     int      `json:"pages"`
	Snapshot  []string `json:"snapshot"`
	Late      []string `json:"late"`
	Change    struct {
		Type, Address, Owner string
	} `json:"change"`
	MissingPool string `json:"missing_pool"`
}

func TestPythonClientAllocatesListsAndWatches(t *testing.T) {
	py := python(t)
	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"),
		[]string{"--store", "bolt:" + filepath.Join(t.TempDir(), "alloc.db")})
	alloc.WaitServing(30 * time.Second)

	run := func(late string) result {
		cmd := exec.Command(py, "examples/allocate_list_watch.py", "--addr", alloc.GRPCAddr, "--pool", "py-pool", "--cidr", "10.250.0.0/29", "--late", late)
		cmd.Env = append(os.Environ(), "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python client: %v\n%s", err, out)
		}
		var r result
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("python client printed %q: %v", out, err)
		}
		return r
	}
	r := run("pod-late")
	if len(r.Allocated) != 3 || len(slices.Compact(slices.Sorted(slices.Values(r.Allocated)))) != 3 {
		t.Fatalf("three Pods got %v", r.Allocated)
	}
	if !slices.Equal(slices.Sorted(slices.Values(r.Listed)), slices.Sorted(slices.Values(r.Allocated))) || r.Pages != 2 {
		t.Fatalf("listed %v in %d pages of two, allocated %v", r.Listed, r.Pages, r.Allocated)
	}
	if !slices.Equal(slices.Sorted(slices.Values(r.Snapshot)), slices.Sorted(slices.Values(r.Allocated))) {
		t.Fatalf("the watch's snapshot %v is not the allocations %v", r.Snapshot, r.Allocated)
	}
	if len(r.Late) != 1 || r.Change.Type != "EVENT_TYPE_ADDED" || r.Change.Address != r.Late[0] || r.Change.Owner != "pod-late" {
		t.Fatalf("allocated %v while watching, the watch saw %+v", r.Late, r.Change)
	}
	if r.MissingPool != "NOT_FOUND" {
		t.Fatalf("Allocate in a missing pool answered %s", r.MissingPool)
	}
	// Allocate is idempotent per owner: a second run gets the same
	// addresses, and lists and watches the late Pod's too (the snapshot
	// holds every allocation acknowledged before the watch began); its
	// own late Pod is a change after SYNCED.
	again := run("pod-later")
	if !slices.Equal(again.Allocated, r.Allocated) || len(again.Listed) != 4 || !slices.Contains(again.Listed, r.Late[0]) {
		t.Fatalf("second run: allocated %v (first %v), listed %v", again.Allocated, r.Allocated, again.Listed)
	}
	if !slices.Equal(slices.Sorted(slices.Values(again.Snapshot)), slices.Sorted(slices.Values(again.Listed))) {
		t.Fatalf("second run: the watch's snapshot %v is not what was listed before it, %v", again.Snapshot, again.Listed)
	}
	if len(again.Late) != 1 || again.Change.Address != again.Late[0] || again.Change.Owner != "pod-later" {
		t.Fatalf("second run: allocated %v while watching, the watch saw %+v", again.Late, again.Change)
	}
}
