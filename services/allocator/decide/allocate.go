package decide

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/plexusnet/plexus/services/allocator/ipam"
)

// Holding is an allocation a pool holds, as far as a decision needs it.
type Holding struct {
	Pool     string
	Address  netip.Addr
	Owner    Owner
	Revision int64
	// Releasing is set while a release or a rebind of the address is
	// being committed.
	Releasing bool
}

// Step is what the runner does next with a request.
type Step int

// Steps.
const (
	// Reserve: the owner holds nothing in the pool and has no request in
	// flight: take the address asked for, or the next free one, and
	// commit it.
	Reserve Step = iota + 1
	// Keep: the owner holds the address: answer with it, commit nothing.
	Keep
	// Rebind: the owner holds the address under another uid (a new
	// incarnation, such as a StatefulSet Pod recreated): commit the
	// address to the new uid, guarded by the old allocation's revision.
	Rebind
	// AwaitRelease: the address is being released or rebound: wait for
	// that commit, then decide again.
	AwaitRelease
	// AwaitPending: a request of the same owner is being committed: wait
	// for its answer (see Awaited).
	AwaitPending
	// Free: a release's guards hold: commit the release.
	Free
)

func (s Step) String() string {
	switch s {
	case Reserve:
		return "Reserve"
	case Keep:
		return "Keep"
	case Rebind:
		return "Rebind"
	case AwaitRelease:
		return "AwaitRelease"
	case AwaitPending:
		return "AwaitPending"
	case Free:
		return "Free"
	}
	return "Step(" + strconv.Itoa(int(s)) + ")"
}

// Allocate decides what to do with req given what its pool holds for the
// owner (held; nil when nothing) and whether a request of the same owner
// is being committed (pending). Allocate and BatchAllocate both decide
// with it, so one input gets one answer whichever call carries it: an
// owner that holds an address and asks for another is refused
// (ipam.ErrInUse, ADDRESS_IN_USE) by both.
func Allocate(req Request, held *Holding, pending bool) (Step, error) {
	if held == nil {
		if pending {
			return AwaitPending, nil
		}
		return Reserve, nil
	}
	switch {
	case held.Releasing:
		return AwaitRelease, nil
	case req.Address.IsValid() && req.Address != held.Address:
		return 0, fmt.Errorf("owner holds %s, not %s: %w", held.Address, req.Address, ipam.ErrInUse)
	case req.Owner.UID != "" && req.Owner.UID != held.Owner.UID:
		return Rebind, nil
	}
	return Keep, nil
}

// Awaited decides what a request does with the answer of the request of
// the same owner it waited for (AwaitPending): that answer, or its error,
// unless that request gave up (its context ended), which says nothing of
// this one: it decides again (ErrConflict).
func Awaited(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ErrConflict
	}
	return err
}

// Batch decides every request of a batch as Allocate does; lookup returns
// what the pool of reqs[i] holds for its owner and whether a request of
// that owner is being committed. The first refusal refuses the batch,
// naming the request.
func Batch(reqs []Request, lookup func(i int) (held *Holding, pending bool)) ([]Step, error) {
	steps := make([]Step, len(reqs))
	for i, r := range reqs {
		h, pending := lookup(i)
		st, err := Allocate(r, h, pending)
		if err != nil {
			return nil, fmt.Errorf("requests[%d]: %w", i, err)
		}
		steps[i] = st
	}
	return steps, nil
}

// ValidateBatch checks a batch before any of it is decided: at least one
// request, each valid, no owner twice in a pool.
func ValidateBatch(reqs []Request) error {
	if len(reqs) == 0 {
		return Invalid("requests", "EMPTY_BATCH", "at least one request is required")
	}
	seen := make(map[string]bool, len(reqs))
	for i := range reqs {
		if err := reqs[i].Validate(fmt.Sprintf("requests[%d].", i)); err != nil {
			return err
		}
		k := reqs[i].Pool + "\x00" + reqs[i].Owner.Key()
		if seen[k] {
			return Invalid(fmt.Sprintf("requests[%d].owner", i), "DUPLICATE_OWNER", "owner appears twice for pool %s", reqs[i].Pool)
		}
		seen[k] = true
	}
	return nil
}

// Answers reports whether a recorded allocation (of a request id seen
// before) answers req: the same pool, owner (uid included) and, when req
// names one, address. A retry with the same request id gets the recorded
// answer only then; otherwise the id was used for another request.
func Answers(h Holding, req Request) bool {
	return h.Pool == req.Pool && h.Owner.Key() == req.Owner.Key() && h.Owner.UID == req.Owner.UID &&
		(!req.Address.IsValid() || req.Address == h.Address)
}

// ReleaseRequest selects the allocation to release and its guards.
type ReleaseRequest struct {
	Pool string
	// Address selects by address; otherwise Owner selects by owner key.
	// With both, the holder of Address must be Owner.
	Address netip.Addr
	Owner   Owner
	// Etag, when set, must equal the allocation's etag.
	Etag string
	// OwnerUID, when set, must equal the holder's uid.
	OwnerUID     string
	AllowMissing bool
	// Caller, when set, is who asks; Access must let it release the
	// holder (Access.Release), whatever the guards say. It is decided
	// on the holder the pool has when the release is decided, so no
	// change can come between the check and the release.
	Caller *Caller
	Access Access
}

// Release decides whether the allocation h, which req selected, may be
// released: refused when the caller may not touch its holder, Free when
// every guard holds, AwaitRelease while another
// release of it commits, or the guard that fails.
func Release(req ReleaseRequest, h Holding) (Step, error) {
	if req.Caller != nil {
		if err := req.Access.Release(*req.Caller, h.Owner); err != nil {
			return 0, err
		}
	}
	switch {
	case h.Releasing:
		return AwaitRelease, nil
	case req.Etag != "" && req.Etag != Etag(h.Revision):
		return 0, fmt.Errorf("release %s: etag is %s, not %s: %w", h.Address, Etag(h.Revision), req.Etag, ErrEtagMismatch)
	case req.OwnerUID != "" && req.OwnerUID != h.Owner.UID:
		return 0, fmt.Errorf("release %s: held by uid %q, not %q: %w", h.Address, h.Owner.UID, req.OwnerUID, ErrOwnerMismatch)
	case req.Address.IsValid() && req.Owner.Kind != "" && req.Owner.Key() != h.Owner.Key():
		return 0, fmt.Errorf("release %s: held by %s, not by the owner the request names: %w", h.Address, Clip(h.Owner.Key()), ErrOwnerMismatch)
	}
	return Free, nil
}

// Etag renders a store revision as an etag.
func Etag(rev int64) string { return strconv.FormatInt(rev, 10) }

// CheckEtag refuses a change of what (a pool) at revision rev when the
// caller's etag, if any, is not rev's.
func CheckEtag(what string, rev int64, etag string) error {
	if etag != "" && etag != Etag(rev) {
		return fmt.Errorf("%s is at etag %s, not %s: %w", what, Etag(rev), etag, ErrEtagMismatch)
	}
	return nil
}
