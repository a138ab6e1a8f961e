package held

import "github.com/plexusnet/plexus/services/allocator/internal/addrtree"

// ownerLinks maps the 32-bit hash of an owner key to the address it holds.
// A table holds one family, so a table of IPv4 addresses keeps them as 32
// bits: an entry is 8 bytes, where a map to the whole key took 24 (and the
// map of a million owners about 48 MB instead of 17).
type ownerLinks struct {
	is4 bool
	v4  map[uint32]uint32
	v6  map[uint32]key
}

func newOwnerLinks(is4 bool, sizeHint int) ownerLinks {
	if is4 {
		return ownerLinks{is4: true, v4: make(map[uint32]uint32, sizeHint)}
	}
	return ownerLinks{v6: make(map[uint32]key, sizeHint)}
}

func (l *ownerLinks) get(h uint32) (key, bool) {
	if l.is4 {
		a, ok := l.v4[h]
		return addrtree.V4Key(a), ok
	}
	k, ok := l.v6[h]
	return k, ok
}

func (l *ownerLinks) set(h uint32, k key) {
	if l.is4 {
		l.v4[h] = uint32(k.Lo)
		return
	}
	l.v6[h] = k
}

func (l *ownerLinks) delete(h uint32) {
	if l.is4 {
		delete(l.v4, h)
		return
	}
	delete(l.v6, h)
}

func (l *ownerLinks) len() int { return len(l.v4) + len(l.v6) }
