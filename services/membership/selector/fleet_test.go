package selector

import (
	"fmt"
	"maps"
	"math/bits"
	"math/rand/v2"
	"time"
)

// fleet describes a namespace shaped like a busy production one: Services
// select on app alone, app and tier, or app, tier and version; workloads
// carry app, tier, version, track and a pod-template-hash shared by the
// replicas of one ReplicaSet. A workload is selected by about four Services.
type fleet struct {
	namespace string
	apps      int
	services  []fleetService
	seed      uint64
}

type fleetService struct {
	name     string
	selector map[string]string
}

var (
	fleetTiers    = []string{"frontend", "backend", "cache", "queue", "batch"}
	fleetVersions = []string{"v1", "v2", "v3", "v4"}
	fleetTracks   = []string{"stable", "canary"}
)

const replicasPerSet = 5

func newFleet(services int, seed uint64) *fleet {
	f := &fleet{namespace: "prod", apps: max(services/10, 1), seed: seed}
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range services {
		sel := map[string]string{"app": fmt.Sprintf("app-%d", r.IntN(f.apps))}
		switch r.IntN(3) {
		case 2:
			sel["version"] = fleetVersions[r.IntN(len(fleetVersions))]
			fallthrough
		case 1:
			sel["tier"] = fleetTiers[r.IntN(len(fleetTiers))]
		}
		f.services = append(f.services, fleetService{name: fmt.Sprintf("svc-%05d", i), selector: sel})
	}
	return f
}

// workload returns the i-th workload of the fleet; it is a pure function of
// i so that callers need not keep workloads around to name them again.
func (f *fleet) workload(i int) (WorkloadKey, map[string]string) {
	rs := i / replicasPerSet
	r := rand.New(rand.NewPCG(f.seed+1, uint64(rs)))
	app := fmt.Sprintf("app-%d", r.IntN(f.apps))
	hash := fmt.Sprintf("%010x", r.Uint64()&(1<<40-1))
	labels := map[string]string{
		"app":               app,
		"tier":              fleetTiers[r.IntN(len(fleetTiers))],
		"version":           fleetVersions[r.IntN(len(fleetVersions))],
		"track":             fleetTracks[r.IntN(len(fleetTracks))],
		"pod-template-hash": hash,
	}
	name := fmt.Sprintf("%s-%s-%05x", app, hash, i&0xfffff)
	return WorkloadKey{Namespace: f.namespace, Kind: "Pod", Name: name}, labels
}

func (f *fleet) loadServices(idx *Index) {
	for _, s := range f.services {
		idx.SetService(f.namespace, s.name, s.selector)
	}
}

// relabels returns n label-only changes of fleet workloads: one of app, tier
// or version moves to another value.
func (f *fleet) relabels(n int) [][2]Workload {
	r := rand.New(rand.NewPCG(f.seed+2, 0))
	out := make([][2]Workload, n)
	for i := range out {
		_, labels := f.workload(r.IntN(1 << 20))
		next := maps.Clone(labels)
		switch r.IntN(3) {
		case 0:
			next["app"] = fmt.Sprintf("app-%d", r.IntN(f.apps))
		case 1:
			next["tier"] = fleetTiers[r.IntN(len(fleetTiers))]
		default:
			next["version"] = fleetVersions[r.IntN(len(fleetVersions))]
		}
		out[i] = [2]Workload{
			{Namespace: f.namespace, Labels: labels, Fingerprint: 7},
			{Namespace: f.namespace, Labels: next, Fingerprint: 7},
		}
	}
	return out
}

// latencies is a log-linear histogram of durations: exact below 1024 ns,
// then 512 buckets per power of two, so a quantile is off by at most 0.2 %.
type latencies struct {
	counts [1024 + 54*512]uint64
	total  uint64
}

func (h *latencies) record(d time.Duration) {
	h.counts[latencyBucket(uint64(max(d, 0)))]++
	h.total++
}

func latencyBucket(ns uint64) int {
	if ns < 1024 {
		return int(ns)
	}
	shift := bits.Len64(ns) - 10
	return 1024 + (shift-1)*512 + int(ns>>shift) - 512
}

// bucketLow is the smallest duration a bucket holds.
func bucketLow(b int) uint64 {
	if b < 1024 {
		return uint64(b)
	}
	shift := (b-1024)/512 + 1
	return uint64((b-1024)%512+512) << shift
}

// quantile returns the duration below which the fraction q of the recorded
// durations fall.
func (h *latencies) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q * float64(h.total))
	if rank >= h.total {
		rank = h.total - 1
	}
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen > rank {
			return time.Duration(bucketLow(b))
		}
	}
	return time.Duration(bucketLow(len(h.counts) - 1))
}
