package pass

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/repair/decide"
)

// Event reasons, on the object a finding is about.
const (
	EventAddressLeaked     = "AddressLeaked"
	EventAddressReleased   = "AddressReleased"
	EventAddressDuplicate  = "AddressDuplicate"
	EventAddressOutOfRange = "AddressOutOfRange"
	EventOrphanedSlice     = "OrphanedSlice"
)

var kinds = map[decide.Kind]repairv1.FindingKind{
	decide.KindLeak:            repairv1.FindingKind_FINDING_KIND_LEAK,
	decide.KindOwnerMismatch:   repairv1.FindingKind_FINDING_KIND_OWNER_MISMATCH,
	decide.KindDuplicate:       repairv1.FindingKind_FINDING_KIND_DUPLICATE,
	decide.KindOutOfRange:      repairv1.FindingKind_FINDING_KIND_OUT_OF_RANGE,
	decide.KindOrphanedSlice:   repairv1.FindingKind_FINDING_KIND_ORPHANED_SLICE,
	decide.KindStalledDeletion: repairv1.FindingKind_FINDING_KIND_STALLED_DELETION,
}

var actions = map[decide.Action]repairv1.Action{
	decide.ActionReported:       repairv1.Action_ACTION_REPORTED,
	decide.ActionWaitingStrikes: repairv1.Action_ACTION_WAITING_STRIKES,
	decide.ActionWaitingGrace:   repairv1.Action_ACTION_WAITING_GRACE,
	decide.ActionLimited:        repairv1.Action_ACTION_LIMITED,
	decide.ActionDryRun:         repairv1.Action_ACTION_DRY_RUN,
	decide.ActionReleased:       repairv1.Action_ACTION_RELEASED,
	decide.ActionReleaseRefused: repairv1.Action_ACTION_RELEASE_REFUSED,
	decide.ActionReleaseFailed:  repairv1.Action_ACTION_RELEASE_FAILED,
	// A planned release always gets an outcome from ApplyReleaseResults;
	// should one slip through, it was not done.
	decide.ActionRelease: repairv1.Action_ACTION_RELEASE_FAILED,
}

// KindName returns the name of a finding kind as reports and metrics use
// it ("LEAK").
func KindName(k repairv1.FindingKind) string {
	return trimPrefix(k.String(), "FINDING_KIND_")
}

// ActionName returns the name of an action as metrics use it ("RELEASED").
func ActionName(a repairv1.Action) string {
	return trimPrefix(a.String(), "ACTION_")
}

func trimPrefix(s, prefix string) string {
	if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// SliceName is the name of an EndpointSlice in findings,
// "namespaces/{namespace}/endpointslices/{name}".
func SliceName(namespace, name string) string {
	return "namespaces/" + namespace + "/endpointslices/" + name
}

// AllocationName is the allocator's resource name of an allocation.
func AllocationName(pool string, addr fmt.Stringer) string {
	return pool + "/allocations/" + addr.String()
}

// fill completes the report of a pass that reached a decision.
func (r *Runner) fill(res *Result, out *decide.Output, done deletions) {
	rep := res.Report
	rep.State = repairv1.PassState_PASS_STATE_COMPLETE
	if out.State == decide.StateUnsynced {
		rep.State = repairv1.PassState_PASS_STATE_UNSYNCED
	}
	rep.Reason = out.Reason
	rep.Allocations = uint64(out.Stats.Allocations)
	rep.Unresolved = uint64(out.Stats.Unresolved)
	rep.FindingsByKind = make(map[string]uint64, len(decide.Kinds))
	res.Findings = make([]*repairv1.Finding, 0, len(out.Findings))
	for i := range out.Findings {
		f := findingProto(&out.Findings[i], done)
		res.Findings = append(res.Findings, f)
		rep.FindingsByKind[KindName(f.GetKind())]++
		switch {
		case f.GetAction() == repairv1.Action_ACTION_RELEASED:
			rep.Released++
		case f.GetAction() == repairv1.Action_ACTION_DELETED && f.GetKind() == repairv1.FindingKind_FINDING_KIND_STALLED_DELETION:
			rep.PoolsDeleted++
		case f.GetAction() == repairv1.Action_ACTION_DELETED:
			rep.SlicesDeleted++
		}
	}
	rep.Findings = uint64(len(res.Findings))
}

func findingProto(f *decide.Finding, done deletions) *repairv1.Finding {
	p := &repairv1.Finding{
		Kind:    kinds[f.Kind],
		Strikes: int32(f.Strikes),
		Action:  actions[f.Action],
		Message: f.Message,
		Etag:    f.Etag,
	}
	if !f.FirstSeen.IsZero() {
		p.FirstSeenTime = timestamp(f.FirstSeen)
	}
	switch f.Kind {
	case decide.KindOrphanedSlice:
		p.EndpointSlice = SliceName(f.Slice.Namespace, f.Slice.Name)
		if f.Action == decide.ActionDelete {
			err, tried := done.slices[f.Slice]
			deletionOutcome(p, err, tried, "deleted")
		}
		return p
	case decide.KindStalledDeletion:
		p.Pool = f.Pool
		if f.Action == decide.ActionDelete {
			err, tried := done.pools[f.Pool]
			if errors.Is(err, errDeletionGoesOn) {
				p.Action = repairv1.Action_ACTION_RESUMED
				p.Message += "; resumed: " + err.Error()
				return p
			}
			deletionOutcome(p, err, tried, "the pool is deleted")
		}
		return p
	}
	p.Pool = f.Pool
	p.Address = f.Address.String()
	p.Allocation = AllocationName(f.Pool, f.Address)
	p.Owner = ownerProto(f.Owner)
	if f.Kind == decide.KindDuplicate {
		p.OtherOwner = ownerProto(f.Other)
	}
	return p
}

// deletionOutcome sets the action of a finding whose deletion was planned
// from its outcome: err, and whether it was tried at all.
func deletionOutcome(p *repairv1.Finding, err error, tried bool, doneText string) {
	if tried && err == nil {
		p.Action = repairv1.Action_ACTION_DELETED
		p.Message += "; " + doneText
		return
	}
	if !tried {
		err = fmt.Errorf("not attempted")
	}
	p.Action = repairv1.Action_ACTION_DELETE_FAILED
	p.Message += fmt.Sprintf("; not done: %v; judged again by the next pass", err)
}

func ownerProto(o decide.Owner) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Uid: o.UID}
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// changedHands reports whether the allocator refused a guarded release
// because the allocation is no longer the one the pass saw.
func changedHands(err error) bool {
	reason := apierr.Reason(err)
	switch status.Code(err) {
	case codes.FailedPrecondition:
		return reason == "ETAG_MISMATCH" || reason == "OWNER_MISMATCH"
	case codes.NotFound:
		return reason == "ALLOCATION_NOT_FOUND" || reason == "POOL_NOT_FOUND"
	}
	return false
}

// timedOut reports whether a call ended at its deadline.
func timedOut(err error) bool { return status.Code(err) == codes.DeadlineExceeded }

// errorText is a status error's reason and message.
func errorText(err error) string {
	st := status.Convert(err)
	if r := apierr.Reason(err); r != "" {
		return r + ": " + st.Message()
	}
	return st.Message()
}

// emitEvents puts an Event on the Kubernetes object of every finding that
// has one.
func (r *Runner) emitEvents(out *decide.Output, done deletions) {
	if r.recorder == nil {
		return
	}
	for i := range out.Findings {
		f := &out.Findings[i]
		switch f.Kind {
		case decide.KindLeak, decide.KindOwnerMismatch:
			// The object of that identity now is another incarnation
			// (or the owner came back since the pass read it).
			ref := r.view.Reference(f.Owner)
			if ref == nil {
				continue
			}
			if f.Action == decide.ActionReleased {
				r.recorder.Eventf(ref, corev1.EventTypeNormal, EventAddressReleased,
					"Released %s in %s, which was still allocated to %s (uid %s)", f.Address, f.Pool, f.Owner.Identity(), f.Owner.UID)
				continue
			}
			r.recorder.Eventf(ref, corev1.EventTypeWarning, EventAddressLeaked,
				"%s in %s is allocated to %s (uid %s), which no longer exists; %s", f.Address, f.Pool, f.Owner.Identity(), f.Owner.UID, actionText(f.Action))
		case decide.KindDuplicate:
			for _, o := range []decide.Owner{f.Owner, f.Other} {
				if ref := r.view.Reference(o); ref != nil {
					r.recorder.Eventf(ref, corev1.EventTypeWarning, EventAddressDuplicate,
						"%s is allocated in %s to %s and also claimed by %s; not released automatically", f.Address, f.Pool, f.Owner, f.Other)
				}
			}
		case decide.KindOutOfRange:
			if ref := r.view.Reference(f.Owner); ref != nil {
				r.recorder.Eventf(ref, corev1.EventTypeWarning, EventAddressOutOfRange,
					"%s is outside every CIDR of %s (the pool was shrunk); not released automatically", f.Address, f.Pool)
			}
		case decide.KindOrphanedSlice:
			// Only a deletion is worth an Event: a young orphan may be an
			// informer a moment behind another.
			if f.Action != decide.ActionDelete {
				continue
			}
			ref := &corev1.ObjectReference{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice",
				Namespace: f.Slice.Namespace, Name: f.Slice.Name, UID: types.UID(f.Slice.UID), ResourceVersion: f.Slice.ResourceVersion}
			outcome := "deleted"
			if err, tried := done.slices[f.Slice]; !tried || err != nil {
				outcome = "deleting it failed; judged again by the next pass"
			}
			r.recorder.Eventf(ref, corev1.EventTypeWarning, EventOrphanedSlice,
				"The ServiceImport and the Service %q of this importer slice are gone; %s", f.Slice.ServiceName, outcome)
		}
	}
}

// actionText says in words what a pass does about a finding, without the
// counts that change every pass, so repeated Events aggregate.
func actionText(a decide.Action) string {
	switch a {
	case decide.ActionWaitingStrikes:
		return "released once seen in enough consecutive passes"
	case decide.ActionWaitingGrace:
		return "released once older than the grace period"
	case decide.ActionLimited:
		return "waiting for the per-pass release limit"
	case decide.ActionReleaseRefused:
		return "the release was refused: the allocation changed hands"
	case decide.ActionReleaseFailed:
		return "the release failed and is retried by the next pass"
	}
	return "not released automatically"
}
