package held

import (
	"encoding/binary"
	"unsafe"
)

// ref locates a record in an arena: its chunk in the high 32 bits, its
// offset in the low ones.
type ref uint64

func refOf(chunk, off int) ref { return ref(uint64(chunk)<<32 | uint64(off)) }
func (r ref) chunk() int       { return int(r >> 32) }
func (r ref) off() int         { return int(r & (1<<32 - 1)) }

// Chunk sizes: a table's chunks are small while it is (ten thousand pools
// of a hundred allocations take a few KiB each), and grow with it to
// maxChunk.
const (
	minChunk = 512
	maxChunk = 64 << 10
)

// arena holds a table's records back to back in chunks of bytes, with no
// pointers for the garbage collector to follow: a million records are a
// thousand objects, not a million. The bytes of a record are never
// written again once it is in, so a View may read the chunks it copied
// while the table goes on; a deleted record's bytes are garbage until its
// chunk is given up.
//
// A record is stored as its length (uvarint), the 16 bytes of its key,
// and the record; the key lets compact find the item that refers to it.
type arena struct {
	chunks [][]byte // nil: a free slot
	live   []int    // live bytes per chunk
	free   []int    // free slots of chunks
	cur    int      // the chunk being appended to; -1 before the first
	// used counts the bytes of the live records; garbage those of the
	// dropped ones still in chunks.
	used, garbage int
}

func newArena() arena { return arena{cur: -1} }

// add appends a record of key k and returns where it is.
func (a *arena) add(k key, rec string) ref {
	n := binary.MaxVarintLen32 + 16 + len(rec)
	if a.cur < 0 || cap(a.chunks[a.cur])-len(a.chunks[a.cur]) < n {
		a.grow(n)
	}
	c := a.chunks[a.cur]
	off := len(c)
	c = binary.AppendUvarint(c, uint64(16+len(rec)))
	c = binary.BigEndian.AppendUint64(c, k.Hi)
	c = binary.BigEndian.AppendUint64(c, k.Lo)
	c = append(c, rec...)
	a.chunks[a.cur] = c
	size := len(c) - off
	a.live[a.cur] += size
	a.used += size
	return refOf(a.cur, off)
}

// grow starts a new chunk with room for at least n bytes: an eighth of
// what is live, between minChunk and maxChunk (or n, for a record larger
// than that), so a small table keeps small chunks however long it churns.
func (a *arena) grow(n int) {
	size := minChunk
	for size < a.used/8 && size < maxChunk {
		size *= 2
	}
	size = max(size, n)
	slot := len(a.chunks)
	if k := len(a.free); k > 0 {
		slot, a.free = a.free[k-1], a.free[:k-1]
	} else {
		a.chunks = append(a.chunks, nil)
		a.live = append(a.live, 0)
	}
	a.chunks[slot] = make([]byte, 0, size)
	a.live[slot] = 0
	if prev := a.cur; prev >= 0 && a.live[prev] == 0 {
		a.release(prev) // everything in it was dropped while it was current
	}
	a.cur = slot
}

// entry returns the stored entry at r: its size in the chunk, the key and
// the record. The record aliases the chunk, whose bytes never change;
// callers that keep it copy it.
func (a *arena) entry(r ref) (size int, k key, rec record) {
	c := a.chunks[r.chunk()][r.off():]
	n, w := binary.Uvarint(c)
	body := c[w : w+int(n)]
	k = key{Hi: binary.BigEndian.Uint64(body[:8]), Lo: binary.BigEndian.Uint64(body[8:16])}
	rest := body[16:]
	if len(rest) > 0 {
		rec = record(unsafe.String(&rest[0], len(rest)))
	}
	return w + int(n), k, rec
}

func (a *arena) record(r ref) record {
	_, _, rec := a.entry(r)
	return rec
}

// drop makes the record at r garbage, and gives its chunk up once
// nothing in it is live (unless it is the one being appended to).
func (a *arena) drop(r ref) {
	size, _, _ := a.entry(r)
	c := r.chunk()
	a.live[c] -= size
	a.used -= size
	a.garbage += size
	if a.live[c] == 0 && c != a.cur {
		a.release(c)
	}
}

func (a *arena) release(c int) {
	a.garbage -= len(a.chunks[c])
	a.chunks[c], a.live[c] = nil, 0
	a.free = append(a.free, c)
}

// wasteful tells whether the garbage is worth a compaction: more than
// what is live, and more than a few small chunks.
func (a *arena) wasteful() bool {
	return a.garbage > a.used && a.garbage > 4*minChunk
}

// victims returns up to n chunks, other than the current one, that are
// at most half live, emptiest first.
func (a *arena) victims(n int) []int {
	var out []int
	for c, b := range a.chunks {
		if b == nil || c == a.cur || a.live[c]*2 > len(b) {
			continue
		}
		out = append(out, c)
	}
	// Few chunks qualify at once; a simple sort keeps it obvious.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && a.live[out[j]] < a.live[out[j-1]]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// each calls fn with every entry stored in chunk c, live or not.
func (a *arena) each(c int, fn func(r ref, k key, rec record)) {
	for off := 0; off < len(a.chunks[c]); {
		r := refOf(c, off)
		size, k, rec := a.entry(r)
		fn(r, k, rec)
		off += size
	}
}

// view copies the chunk list, for a View: the chunks themselves are
// shared, and only ever appended to past what the view can refer to.
func (a *arena) view() arena {
	return arena{chunks: append([][]byte(nil), a.chunks...), cur: -1}
}
