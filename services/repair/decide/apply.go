package decide

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ApplyReleaseResults records the outcome of the releases of o, keyed by
// Release.Key: nil is RELEASED; an error that wraps ErrChangedHands is
// RELEASE_REFUSED (the allocation changed hands or is gone, so its strikes
// are forgotten); any other error is RELEASE_FAILED, and the strikes are
// kept so a later pass tries again. A planned release without an outcome is
// RELEASE_FAILED too: the adapter may have stopped half way, and the next
// pass finds out whether it happened. Outcomes for releases that were not
// planned are reported in the error; the others are recorded regardless.
func (o *Output) ApplyReleaseResults(results map[AllocationKey]error) error {
	planned := make(map[AllocationKey]bool, len(o.Releases))
	for i := range o.Findings {
		f := &o.Findings[i]
		if f.Action != ActionRelease {
			continue
		}
		key := AllocationKey{Pool: f.Pool, Address: f.Address, Etag: f.Etag}
		planned[key] = true
		err, ok := results[key]
		switch {
		case !ok:
			f.Action = ActionReleaseFailed
			f.Message += "; no outcome recorded, retried by a later pass"
		case err == nil:
			f.Action = ActionReleased
			f.Message += "; released"
			delete(o.Strikes.leaks, key)
		case errors.Is(err, ErrChangedHands):
			f.Action = ActionReleaseRefused
			f.Message += fmt.Sprintf("; refused: the allocation changed hands since this pass read it (%v); not released", err)
			delete(o.Strikes.leaks, key)
		default:
			f.Action = ActionReleaseFailed
			f.Message += fmt.Sprintf("; failed: %v; retried by a later pass", err)
		}
	}
	var unknown []string
	for key := range results {
		if !planned[key] {
			unknown = append(unknown, key.String())
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("%s: %w", strings.Join(unknown, ", "), ErrUnknownRelease)
	}
	return nil
}
