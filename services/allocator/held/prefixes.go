package held

// prefix is the part of an owner that many allocations share.
type prefix struct {
	cluster, kind, namespace string
}

// prefixes interns the owners' prefixes: a pool of a million Pods in a
// few namespaces holds each cluster, kind and namespace string once. A
// prefix no allocation refers to any more is forgotten and its number
// used again.
type prefixes struct {
	ids  map[prefix]uint32
	list []prefix
	refs []uint32
	free []uint32
	// last is the number ref returned last, while it is interned: the
	// allocations of one namespace come together (a restart, a batch),
	// and comparing three strings costs less than hashing them.
	last    uint32
	hasLast bool
}

func (p *prefixes) lookup(x prefix) (uint32, bool) {
	id, ok := p.ids[x]
	return id, ok
}

// ref returns x's number, interning it if new, and counts one more
// reference.
func (p *prefixes) ref(x prefix) uint32 {
	if p.hasLast && p.list[p.last] == x {
		p.refs[p.last]++
		return p.last
	}
	id, ok := p.ids[x]
	if !ok {
		if p.ids == nil {
			p.ids = map[prefix]uint32{}
		}
		if n := len(p.free); n > 0 {
			id, p.free = p.free[n-1], p.free[:n-1]
			p.list[id] = x
		} else {
			id = uint32(len(p.list))
			p.list = append(p.list, x)
			p.refs = append(p.refs, 0)
		}
		p.ids[x] = id
	}
	p.refs[id]++
	p.last, p.hasLast = id, true
	return id
}

// unref drops one reference to id.
func (p *prefixes) unref(id uint32) {
	p.refs[id]--
	if p.refs[id] == 0 {
		delete(p.ids, p.list[id])
		p.list[id] = prefix{}
		p.free = append(p.free, id)
		p.hasLast = p.hasLast && p.last != id
	}
}

func (p *prefixes) get(id uint32) (prefix, bool) {
	if int(id) >= len(p.list) || p.refs[id] == 0 {
		return prefix{}, false
	}
	return p.list[id], true
}
