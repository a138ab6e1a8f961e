package allocation

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/plexusnet/plexus/services/allocator/store"
)

var tracer = otel.Tracer("github.com/plexusnet/plexus/services/allocator")

// tracedStore gives every store commit a child span of the request, so a
// trace shows how long the durable write (and its group commit) took.
type tracedStore struct{ store.Store }

// Traced wraps st so that commits are traced.
func Traced(st store.Store) store.Store { return tracedStore{st} }

func (t tracedStore) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	ctx, span := tracer.Start(ctx, "store.Commit")
	defer span.End()
	// Attributes only for a span that keeps them: without a sampled
	// trace, building them is garbage on every commit.
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(
			attribute.Int("plexus.store.conditions", len(txn.Conds)),
			attribute.Int("plexus.store.operations", len(txn.Ops)),
		)
	}
	rev, err := t.Store.Commit(ctx, txn)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case recording:
		span.SetAttributes(attribute.Int64("plexus.store.revision", rev))
	}
	return rev, err
}
