package etcd

import (
	"context"
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A range read with a limit costs etcd a walk of the whole rest of the
// range, under the lock its commits wait for: a million allocations read
// 5,000 at a time cost etcd 20 s of CPU, where reads that end near their
// last key cost 0.3 s. A ranger bounds each read by an end key too.
//
// A pool's keys are a segment of the range (keys.go). Once a read has
// shown how densely a segment's addresses are held, the next spans as many
// addresses as should hold a page: a window. Where the density is not
// known (a segment's start, past an empty window), a read runs to the end
// of the next pool's segment the ranger knows of, or of the range.

// Window widths, in powers of two: at most maxGrowth wider than the one
// before, emptyGrowth wider after an empty one, and after maxEmpty empty
// ones in a row the next read has none; minSample keys tell a density.
const (
	maxGrowth   = 8
	emptyGrowth = 4
	maxEmpty    = 4
	minSample   = 8
)

// ranger reads the keys of one kind (base: the prefix of the allocation
// or the quarantine keys) at one revision, in reads bounded by windows.
type ranger struct {
	s    *Store
	base string
	rev  int64 // 0 until the first read fixes it
	page int   // keys a read returns at most
	// bound, when set, gives where a read from pos without a window may
	// end (the end of the next known pool's segment; "": none).
	bound func(ctx context.Context, pos string) (string, error)

	// The window: its pool ("": none), first address, and log2 of how
	// many addresses it spans.
	pool  string
	addr  netip.Addr
	shift int
	used  int // the width of the latest read's window
	empty int // empty windows in a row
}

func (s *Store) ranger(base string, rev int64) *ranger {
	return &ranger{s: s, base: base, rev: rev, page: s.pageSize}
}

// read calls fn for the keys of [from, end) in order, up to want of them
// (all when want is 0). It returns where the keys after the last given
// start, and whether any are left in the range: exactly, as it reads a
// key more than it gives when want stops it.
func (r *ranger) read(ctx context.Context, from, end string, want int, fn func(*mvccpb.KeyValue) error) (next string, more bool, err error) {
	if want == 0 {
		return r.readAll(ctx, from, end, fn)
	}
	pos, given := from, 0
	for pos < end {
		f := r.fetch(ctx, pos, end, min(r.page, want-given+1))
		if f.err != nil {
			return "", false, f.err
		}
		for _, kv := range f.resp.Kvs {
			if given == want {
				return pos, true, nil
			}
			if err := fn(kv); err != nil {
				return "", false, err
			}
			given++
			pos = after(kv.Key)
		}
		pos = r.moved(f)
	}
	return pos, false, nil
}

// readAll is read of every key, each read sent while fn takes the keys of
// the one before.
func (r *ranger) readAll(ctx context.Context, from, end string, fn func(*mvccpb.KeyValue) error) (string, bool, error) {
	if from >= end {
		return from, false, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := r.fetch(ctx, from, end, r.page)
	for {
		if f.err != nil {
			return "", false, f.err
		}
		pos := r.moved(f)
		var pending chan fetched
		if pos < end {
			pending = make(chan fetched, 1)
			go func() { pending <- r.fetch(ctx, pos, end, r.page) }()
		}
		for _, kv := range f.resp.Kvs {
			if err := fn(kv); err != nil {
				if pending != nil {
					cancel()
					<-pending
				}
				return "", false, err
			}
		}
		if pending == nil {
			return pos, false, nil
		}
		f = <-pending
	}
}

// fetched is one read: its answer, where it ended, and whether it had a
// window.
type fetched struct {
	resp     *clientv3.GetResponse
	stop     string
	windowed bool
	err      error
}

// fetch reads up to limit keys from pos: to the end of the window, or,
// without one, to the ranger's bound or end.
func (r *ranger) fetch(ctx context.Context, pos, end string, limit int) fetched {
	stop, windowed := r.windowEnd(end, limit)
	if !windowed && r.bound != nil {
		b, err := r.bound(ctx, pos)
		if err != nil {
			return fetched{err: err}
		}
		if b != "" && b < stop {
			stop = b
		}
	}
	if r.s.observeRead != nil {
		r.s.observeRead(pos, stop, r.rev)
	}
	resp, err := r.s.page(ctx, pos, stop, r.rev, limit)
	if err != nil {
		return fetched{err: err}
	}
	if r.rev == 0 {
		r.rev = resp.Header.Revision
	}
	return fetched{resp: resp, stop: stop, windowed: windowed}
}

// moved sets the window after a read, and returns where the next starts:
// after its last key when it stopped at its limit, at its end otherwise.
func (r *ranger) moved(f fetched) string {
	if f.resp.More && len(f.resp.Kvs) > 0 {
		r.follow(f.resp.Kvs, f.windowed)
		return after(f.resp.Kvs[len(f.resp.Kvs)-1].Key)
	}
	r.passed(len(f.resp.Kvs), f.windowed)
	return f.stop
}

// windowEnd is where the next read, of up to limit keys, ends: its
// window's end, or end when it has no window or the window reaches past
// end. A read of fewer keys than a page has a window as much narrower.
func (r *ranger) windowEnd(end string, limit int) (string, bool) {
	if r.pool == "" {
		return end, false
	}
	r.used = clampShift(r.shift - max(0, log2Floor(float64(r.page)/float64(limit))))
	var stop string
	if b, ok := advance(r.addr, r.used); ok {
		stop = r.key(r.pool, b)
	} else if r.addr.Is4() {
		stop = r.key(r.pool, netip.IPv6Unspecified())
	} else {
		stop = r.base + r.pool + "\x01" // the segment's end
	}
	return min(stop, end), true
}

// passed moves the window past a read that reached its end, which held n
// keys: the next starts where it ended, as wide as should hold a page at
// that density (see maxGrowth), or none after maxEmpty empty ones or at
// the segment's end.
func (r *ranger) passed(n int, windowed bool) {
	if !windowed {
		r.pool = ""
		return
	}
	shift := r.shift + emptyGrowth
	if n == 0 {
		if r.empty++; r.empty > maxEmpty {
			r.pool = ""
			return
		}
	} else {
		r.empty = 0
		shift = min(r.used+log2Floor(float64(r.page)/float64(n)), r.shift+maxGrowth)
	}
	b, ok := advance(r.addr, r.used)
	switch {
	case ok:
		r.addr = b
	case r.addr.Is4():
		r.addr = netip.IPv6Unspecified()
	default:
		r.pool = ""
		return
	}
	r.shift = clampShift(shift)
}

// follow sets the window after a read that stopped at its limit: after
// its last key, as wide as should hold a page at the density of the keys
// read of that pool; with fewer than minSample, the window's width, the
// pool's latest, or a page of addresses.
func (r *ranger) follow(kvs []*mvccpb.KeyValue, windowed bool) {
	pool, last, ok := r.parse(kvs[len(kvs)-1].Key)
	if !ok {
		r.pool = ""
		return
	}
	i := sort.Search(len(kvs), func(i int) bool {
		p, _, ok := r.parse(kvs[i].Key)
		return ok && p == pool
	})
	_, first, _ := r.parse(kvs[i].Key)
	n := len(kvs) - i
	r.empty = 0
	switch {
	case n >= minSample:
		shift := clampShift(log2Floor(spanOf(first, last) * float64(r.page) / float64(n)))
		r.s.widths.note(pool, last.Is4(), shift)
		r.at(pool, last, shift)
	case windowed && pool == r.pool:
		r.at(pool, last, r.shift)
	default:
		r.at(pool, last, r.s.widths.of(pool, last, log2Floor(float64(r.page))))
	}
}

// at sets the window to start after address a of pool, spanning 2^shift
// addresses.
func (r *ranger) at(pool string, a netip.Addr, shift int) {
	r.pool, r.shift = pool, shift
	switch next := a.Next(); {
	case next.IsValid():
		r.addr = next
	case a.Is4():
		r.addr = netip.IPv6Unspecified()
	default:
		r.pool = "" // the pool's last address: the segment ends after it
	}
}

// widths remembers the latest width of each pool's windows (per family),
// for the first window of the next page of a sparse pool.
type widths struct {
	mu    sync.Mutex
	shift map[widthKey]int
}

type widthKey struct {
	pool string
	v4   bool
}

// maxWidths bounds the pools widths remembers; past it, it forgets all.
const maxWidths = 4096

func (w *widths) note(pool string, v4 bool, shift int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shift == nil || len(w.shift) >= maxWidths {
		w.shift = map[widthKey]int{}
	}
	w.shift[widthKey{pool, v4}] = shift
}

// of is the latest width of pool's windows in the family of a, or dflt.
func (w *widths) of(pool string, a netip.Addr, dflt int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.shift[widthKey{pool, a.Is4()}]; ok {
		return s
	}
	return dflt
}

// key is the key of address a of pool in the ranger's kind.
func (r *ranger) key(pool string, a netip.Addr) string {
	return r.base + pool + sep + encodeAddr(a)
}

// parse takes a key of the ranger's kind apart.
func (r *ranger) parse(key []byte) (string, netip.Addr, bool) {
	rest, ok := strings.CutPrefix(string(key), r.base)
	if !ok {
		return "", netip.Addr{}, false
	}
	pool, enc, ok := strings.Cut(rest, sep)
	if !ok {
		return "", netip.Addr{}, false
	}
	a, err := decodeAddr(enc)
	return pool, a, err == nil
}

// poolBounds is a ranger's bound over the segments of a known, sorted
// list of pools.
func poolBounds(base string, ids []string) func(context.Context, string) (string, error) {
	ends := make([]string, len(ids))
	for i, id := range ids {
		ends[i] = base + id + "\x01"
	}
	return func(_ context.Context, pos string) (string, error) {
		i := sort.SearchStrings(ends, pos)
		for i < len(ends) && ends[i] <= pos {
			i++
		}
		if i == len(ends) {
			return "", nil
		}
		return ends[i], nil
	}
}

// advance is a + 2^shift, false when that leaves a's family.
func advance(a netip.Addr, shift int) (netip.Addr, bool) {
	if a.Is4() {
		if shift >= 32 {
			return netip.Addr{}, false
		}
		b := a.As4()
		v := uint64(binary.BigEndian.Uint32(b[:])) + 1<<shift
		if v > math.MaxUint32 {
			return netip.Addr{}, false
		}
		binary.BigEndian.PutUint32(b[:], uint32(v))
		return netip.AddrFrom4(b), true
	}
	if shift >= 128 {
		return netip.Addr{}, false
	}
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	var carry uint64
	if shift >= 64 {
		hi, carry = bits.Add64(hi, 1<<(shift-64), 0)
	} else {
		lo, carry = bits.Add64(lo, 1<<shift, 0)
		hi, carry = bits.Add64(hi, 0, carry)
	}
	if carry != 0 {
		return netip.Addr{}, false
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b), true
}

// spanOf is how many addresses first..last hold, roughly; 2^32 when they
// are of different families.
func spanOf(first, last netip.Addr) float64 {
	if first.Is4() != last.Is4() {
		return 1 << 32
	}
	f, l := first.As16(), last.As16()
	fh, fl := binary.BigEndian.Uint64(f[:8]), binary.BigEndian.Uint64(f[8:])
	lh, ll := binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:])
	lo, borrow := bits.Sub64(ll, fl, 0)
	hi, _ := bits.Sub64(lh, fh, borrow)
	return float64(hi)*(1<<64) + float64(lo) + 1
}

func log2Floor(x float64) int {
	if x <= 0 {
		return 0
	}
	return int(math.Floor(math.Log2(x)))
}

func clampShift(s int) int { return max(0, min(128, s)) }
