package ipam

import (
	"container/heap"
	"net/netip"
	"time"
)

// quarantine holds released addresses until their reuse delay has passed.
// While quarantined, an address stays marked used in its CIDR's tree, so
// AllocateNext skips it at no cost; expire clears it once its time has come.
//
// Entries leave early (Restore, AddReserved, RemoveCIDRs) by being dropped
// from the map only; their heap items become stale and are skipped when they
// surface, which keeps removal O(1).
type quarantine struct {
	// seq maps a quarantined address to the sequence number of its live
	// heap item.
	seq   map[netip.Addr]uint64
	items itemHeap
	next  uint64
}

type qitem struct {
	until time.Time
	seq   uint64
	addr  netip.Addr
}

func (q *quarantine) len() int { return len(q.seq) }

func (q *quarantine) has(a netip.Addr) bool {
	if len(q.seq) == 0 {
		return false
	}
	_, ok := q.seq[a]
	return ok
}

func (q *quarantine) add(a netip.Addr, until time.Time) {
	if q.seq == nil {
		q.seq = make(map[netip.Addr]uint64)
	}
	q.next++
	q.seq[a] = q.next
	heap.Push(&q.items, qitem{until: until, seq: q.next, addr: a})
}

// remove takes a out of quarantine and reports whether it was in.
func (q *quarantine) remove(a netip.Addr) bool {
	if _, ok := q.seq[a]; !ok {
		return false
	}
	delete(q.seq, a)
	return true
}

// expire removes every address whose delay has passed by now (an address
// released at t with delay d is free again at t+d) and calls free for each.
// It costs O(log n) per address freed, whatever now is: callers may pass a
// clock that goes backwards, and nothing is freed early.
func (q *quarantine) expire(now time.Time, free func(netip.Addr)) {
	for len(q.items) > 0 && !q.items[0].until.After(now) {
		it := heap.Pop(&q.items).(qitem)
		if seq, ok := q.seq[it.addr]; ok && seq == it.seq {
			delete(q.seq, it.addr)
			free(it.addr)
		}
	}
}

type itemHeap []qitem

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if !h[i].until.Equal(h[j].until) {
		return h[i].until.Before(h[j].until)
	}
	return h[i].seq < h[j].seq
}
func (h itemHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)   { *h = append(*h, x.(qitem)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
