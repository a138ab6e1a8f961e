package ipam

// span is an inclusive run of addresses (or offsets) as numbers.
type span struct{ first, last u128 }

// clip returns the part of sp inside [first, last]; they must overlap.
func clip(sp span, first, last u128) span {
	if sp.first.less(first) {
		sp.first = first
	}
	if last.less(sp.last) {
		sp.last = last
	}
	return sp
}
