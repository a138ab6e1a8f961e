package held

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

// v4Key is the key of an IPv4 address from its 32 bits (keyOf gives the
// IPv4-mapped form).
func v4Key(a uint32) key { return key{lo: 0xffff<<32 | uint64(a)} }

func (l *ownerLinks) get(h uint32) (key, bool) {
	if l.is4 {
		a, ok := l.v4[h]
		return v4Key(a), ok
	}
	k, ok := l.v6[h]
	return k, ok
}

func (l *ownerLinks) set(h uint32, k key) {
	if l.is4 {
		l.v4[h] = uint32(k.lo)
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
