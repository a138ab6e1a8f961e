package bolt

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"slices"
)

// addrIndex finds the record of an allocation by its pool and address.
// The file keeps allocations under the sequence number of their first
// write (records bucket), so that a commit appends its new allocations at
// the end of one tree whatever pools they belong to. Keyed by pool, then
// address, a commit of 64 allocations into 64 pools dirtied 64 leaves of
// 4 KiB, where one pool dirtied one or two, which made a load spread over
// 10,000 pools a third slower than one into a single pool. The index is
// what that key gave: kept in memory, built from the records when the
// file is opened.
//
// An IPv4 address takes 4 bytes and its sequence number 6 (2^48 writes:
// centuries at a million a second), about 28 bytes per allocation with
// the map's own overhead; neither map holds a pointer for the garbage
// collector.
//
// Only the committer changes it. Changes made while a batch is written
// are logged, and undone if the batch does not commit.
type addrIndex struct {
	pools map[string]*poolAddrs

	logging bool
	undo    []addrChange
}

type poolAddrs struct {
	id string
	v4 map[uint32]seq48
	v6 map[[16]byte]seq48
}

// seq48 is a record's sequence number in six bytes, big-endian.
type seq48 [6]byte

// maxSeq is the largest sequence number a seq48 holds.
const maxSeq = 1<<48 - 1

func seqOf(n uint64) seq48 {
	return seq48{byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func (s seq48) uint64() uint64 {
	return uint64(s[0])<<40 | uint64(s[1])<<32 | uint64(s[2])<<24 | uint64(s[3])<<16 | uint64(s[4])<<8 | uint64(s[5])
}

// addrChange is one change to the index; prev is the sequence number the
// address had before it (had: it had one).
type addrChange struct {
	pool *poolAddrs
	addr netip.Addr
	prev uint64
	had  bool
}

func newAddrIndex() *addrIndex { return &addrIndex{pools: map[string]*poolAddrs{}} }

func v4Of(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addrOf4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// pool returns the addresses of pool, nil if it holds none.
func (x *addrIndex) pool(pool string) *poolAddrs { return x.pools[pool] }

func (x *addrIndex) ensure(pool string) *poolAddrs {
	p := x.pools[pool]
	if p == nil {
		p = &poolAddrs{id: pool, v4: map[uint32]seq48{}, v6: map[[16]byte]seq48{}}
		x.pools[pool] = p
	}
	return p
}

// get returns the sequence number of pool's record of addr.
func (x *addrIndex) get(pool string, addr netip.Addr) (uint64, bool) {
	return x.pools[pool].get(addr)
}

func (p *poolAddrs) get(addr netip.Addr) (uint64, bool) {
	if p == nil {
		return 0, false
	}
	var s seq48
	var ok bool
	if addr.Is4() {
		s, ok = p.v4[v4Of(addr)]
	} else {
		s, ok = p.v6[addr.As16()]
	}
	return s.uint64(), ok
}

func (p *poolAddrs) len() int {
	if p == nil {
		return 0
	}
	return len(p.v4) + len(p.v6)
}

// set files addr of pool under seq.
func (x *addrIndex) set(pool string, addr netip.Addr, seq uint64) {
	p := x.ensure(pool)
	if x.logging {
		prev, had := p.get(addr)
		x.undo = append(x.undo, addrChange{pool: p, addr: addr, prev: prev, had: had})
	}
	p.set(addr, seq)
}

func (p *poolAddrs) set(addr netip.Addr, seq uint64) {
	if addr.Is4() {
		p.v4[v4Of(addr)] = seqOf(seq)
	} else {
		p.v6[addr.As16()] = seqOf(seq)
	}
}

// del removes addr of pool; the pool is forgotten with its last address.
func (x *addrIndex) del(pool string, addr netip.Addr) {
	p := x.pools[pool]
	prev, had := p.get(addr)
	if !had {
		return
	}
	if x.logging {
		x.undo = append(x.undo, addrChange{pool: p, addr: addr, prev: prev, had: true})
	}
	p.del(addr)
	if p.len() == 0 && !x.logging {
		delete(x.pools, p.id)
	}
}

func (p *poolAddrs) del(addr netip.Addr) {
	if addr.Is4() {
		delete(p.v4, v4Of(addr))
	} else {
		delete(p.v6, addr.As16())
	}
}

// addrs returns pool's addresses in address order, IPv4 first.
func (x *addrIndex) addrs(pool string) []netip.Addr {
	p := x.pools[pool]
	if p == nil {
		return nil
	}
	v4 := make([]uint32, 0, len(p.v4))
	for a := range p.v4 {
		v4 = append(v4, a)
	}
	slices.Sort(v4)
	out := make([]netip.Addr, 0, p.len())
	for _, a := range v4 {
		out = append(out, addrOf4(a))
	}
	start := len(out)
	for a := range p.v6 {
		out = append(out, netip.AddrFrom16(a))
	}
	slices.SortFunc(out[start:], netip.Addr.Compare)
	return out
}

// anyIn reports whether pool holds an address in [first, last] (both of
// one family, first <= last). It probes the addresses of the range when
// there are no more of them than the pool holds, and otherwise looks at
// each address the pool holds: O(min(range, pool)).
func (x *addrIndex) anyIn(pool string, first, last netip.Addr) bool {
	p := x.pools[pool]
	n := p.len()
	if n == 0 {
		return false
	}
	if rangeLen(first, last) <= uint64(n) {
		for a := first; ; a = a.Next() {
			if _, ok := p.get(a); ok {
				return true
			}
			if a == last {
				return false
			}
		}
	}
	in := func(a netip.Addr) bool { return first.Compare(a) <= 0 && a.Compare(last) <= 0 }
	if first.Is4() {
		for v := range p.v4 {
			if in(addrOf4(v)) {
				return true
			}
		}
		return false
	}
	for v := range p.v6 {
		if in(netip.AddrFrom16(v)) {
			return true
		}
	}
	return false
}

// rangeLen is the number of addresses in [first, last] (one family,
// first <= last), saturated at 2^64-1.
func rangeLen(first, last netip.Addr) uint64 {
	f, l := first.As16(), last.As16()
	fhi, flo := binary.BigEndian.Uint64(f[:8]), binary.BigEndian.Uint64(f[8:])
	lhi, llo := binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:])
	if lhi != fhi || llo-flo == math.MaxUint64 {
		return math.MaxUint64
	}
	return llo - flo + 1
}

// begin starts logging the changes of a batch.
func (x *addrIndex) begin() { x.logging, x.undo = true, x.undo[:0] }

// commit keeps the batch's changes (forgetting pools left empty);
// rollback undoes them, newest first, and then forgets them as commit
// does.
func (x *addrIndex) commit() {
	x.logging = false
	for _, c := range x.undo {
		if c.pool.len() == 0 {
			delete(x.pools, c.pool.id)
		}
	}
	clear(x.undo)
	x.undo = x.undo[:0]
}

func (x *addrIndex) rollback() {
	for i := len(x.undo) - 1; i >= 0; i-- {
		c := x.undo[i]
		if c.had {
			c.pool.set(c.addr, c.prev)
		} else {
			c.pool.del(c.addr)
		}
	}
	x.commit()
}

// addrLoader gathers the pool, address and number of each record as the
// file is read when it opens, and then builds the index: each pool's
// maps made once at their final size, and filled pool by pool. Grown an
// entry at a time, and filled in the order of the records (the pools
// interleaved as their calls were), the maps took twice as long.
type addrLoader struct {
	ids    map[string]int32
	pools  []string
	last   int32
	v4     []load4
	v6     []load6
	counts []int
}

type load4 struct {
	pool int32
	addr uint32
	seq  uint64
}

type load6 struct {
	pool int32
	addr [16]byte
	seq  uint64
}

func newAddrLoader(sizeHint int) *addrLoader {
	return &addrLoader{ids: map[string]int32{}, last: -1, v4: make([]load4, 0, sizeHint)}
}

// add notes the record numbered seq, of addr in pool.
func (l *addrLoader) add(pool []byte, addr netip.Addr, seq uint64) {
	if l.last < 0 || l.pools[l.last] != string(pool) {
		id, ok := l.ids[string(pool)]
		if !ok {
			id = int32(len(l.pools))
			l.pools = append(l.pools, string(pool))
			l.ids[l.pools[id]] = id
			l.counts = append(l.counts, 0)
		}
		l.last = id
	}
	l.counts[l.last]++
	if addr.Is4() {
		l.v4 = append(l.v4, load4{pool: l.last, addr: v4Of(addr), seq: seq})
	} else {
		l.v6 = append(l.v6, load6{pool: l.last, addr: addr.As16(), seq: seq})
	}
}

// build returns the index of what was added; two records of one address
// are an error.
func (l *addrLoader) build() (*addrIndex, error) {
	x := newAddrIndex()
	pools := make([]*poolAddrs, len(l.pools))
	n4 := make([]int, len(l.pools)+1)
	for _, e := range l.v4 {
		n4[e.pool+1]++
	}
	for i, id := range l.pools {
		pools[i] = &poolAddrs{
			id: id,
			v4: make(map[uint32]seq48, n4[i+1]),
			v6: make(map[[16]byte]seq48, l.counts[i]-n4[i+1]),
		}
		x.pools[id] = pools[i]
	}
	// Group the IPv4 records by pool (a stable counting sort).
	for i := range l.pools {
		n4[i+1] += n4[i]
	}
	grouped := make([]load4, len(l.v4))
	for _, e := range l.v4 {
		grouped[n4[e.pool]] = e
		n4[e.pool]++
	}
	l.v4 = nil
	dup := func(pool int32, addr netip.Addr, seq uint64) error {
		return fmt.Errorf("allocation %s/%s: two records (the later is %d)", l.pools[pool], addr, seq)
	}
	for _, e := range grouped {
		p := pools[e.pool]
		n := len(p.v4)
		if p.v4[e.addr] = seqOf(e.seq); len(p.v4) == n {
			return nil, dup(e.pool, addrOf4(e.addr), e.seq) // grouping kept the records' order
		}
	}
	for _, e := range l.v6 {
		p := pools[e.pool]
		n := len(p.v6)
		if p.v6[e.addr] = seqOf(e.seq); len(p.v6) == n {
			return nil, dup(e.pool, netip.AddrFrom16(e.addr), e.seq)
		}
	}
	return x, nil
}
