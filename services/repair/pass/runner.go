package pass

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/services/repair/decide"
)

// ErrPassInProgress means the caller's context ended while it waited for
// another pass to finish.
var ErrPassInProgress = errors.New("another repair pass is in progress")

// errDeletionGoesOn means a pool's deletion did not finish within the call
// that resumed it: the allocator goes on with it after the call.
var errDeletionGoesOn = errors.New("not finished within the call; the allocator goes on with it")

// Defaults of a Runner.
const (
	// DefaultPageSize is the page size of ListAllocations and ListPools:
	// the allocator's maximum, so a large fleet is listed in few calls.
	DefaultPageSize = 1000
	// DefaultReleaseWorkers bounds the concurrent guarded releases.
	DefaultReleaseWorkers = 8
	// DefaultCallTimeout bounds one allocator or Kubernetes call of a
	// pass.
	DefaultCallTimeout = 30 * time.Second
)

// View is the owners' side of a pass; kube.View implements it.
type View interface {
	decide.OwnerView
	// Synced reports whether the view is complete, and if not, why.
	Synced() (bool, string)
	// Slices returns the EndpointSlices to judge.
	Slices() []decide.Slice
	// DeleteSlice deletes a slice with uid and resourceVersion
	// preconditions.
	DeleteSlice(ctx context.Context, ref decide.SliceRef) error
	// Reference returns the object an Event about o belongs on, or nil.
	Reference(o decide.Owner) *corev1.ObjectReference
}

// Allocator is the part of the allocator API a pass uses.
type Allocator interface {
	ListPools(ctx context.Context, in *allocatorv1.ListPoolsRequest, opts ...grpc.CallOption) (*allocatorv1.ListPoolsResponse, error)
	ListAllocations(ctx context.Context, in *allocatorv1.ListAllocationsRequest, opts ...grpc.CallOption) (*allocatorv1.ListAllocationsResponse, error)
	Release(ctx context.Context, in *allocatorv1.ReleaseRequest, opts ...grpc.CallOption) (*allocatorv1.ReleaseResponse, error)
	DeletePool(ctx context.Context, in *allocatorv1.DeletePoolRequest, opts ...grpc.CallOption) (*allocatorv1.DeletePoolResponse, error)
}

// Hook runs between the decision and the actions of a pass that may act.
// Tests use it to change the world between a pass's read and its release.
type Hook func(ctx context.Context, out *decide.Output)

// Option configures a Runner.
type Option func(*Runner)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.logger = l } }

// WithRecorder sets the recorder of Kubernetes Events; without it no Events
// are emitted.
func WithRecorder(rec record.EventRecorder) Option { return func(r *Runner) { r.recorder = rec } }

// WithRegisterer registers the runner's metrics.
func WithRegisterer(reg prometheus.Registerer) Option { return func(r *Runner) { r.registerer = reg } }

// WithBeforeAct sets a hook that runs after the decision and before the
// releases and deletions of every pass.
func WithBeforeAct(h Hook) Option { return func(r *Runner) { r.beforeAct = h } }

// WithGuard sets a check made before every release and slice deletion: a
// write is not sent while it fails (a leader whose lease is no longer
// fresh, see leader.Elector.Valid). The pass's context ending is checked
// anyway.
func WithGuard(g func() error) Option { return func(r *Runner) { r.guard = g } }

// WithCallTimeout sets the bound of one allocator or Kubernetes call.
func WithCallTimeout(d time.Duration) Option { return func(r *Runner) { r.callTimeout = d } }

// Timings says where the time of a pass went.
type Timings struct {
	// List is the time spent listing pools and allocations.
	List time.Duration
	// Decide is the time of decide.Decide (including the view lookups it
	// makes).
	Decide time.Duration
	// Act is the time spent releasing and deleting.
	Act time.Duration
	// Total is the whole pass.
	Total time.Duration
}

// Result is a finished pass.
type Result struct {
	Report *repairv1.Report
	// Findings are in decide's order: pool, address, kind.
	Findings []*repairv1.Finding
	Timings  Timings
}

// Runner runs repair passes. It is safe for concurrent use.
type Runner struct {
	cfg         decide.Config
	alloc       Allocator
	view        View
	logger      *slog.Logger
	recorder    record.EventRecorder
	registerer  prometheus.Registerer
	tracer      trace.Tracer
	metrics     *metrics
	beforeAct   Hook
	guard       func() error
	callTimeout time.Duration

	// sem holds the right to run a pass; the fields below it are only
	// touched by its holder.
	sem     chan struct{}
	passID  uint64
	strikes decide.Strikes

	latest atomic.Pointer[Result]
}

// New returns a Runner judging with cfg (whose Resolvable must list the
// scopes view resolves).
func New(cfg decide.Config, alloc Allocator, view View, opts ...Option) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if alloc == nil || view == nil {
		return nil, errors.New("pass: an allocator client and a view are required")
	}
	r := &Runner{
		cfg:         cfg,
		alloc:       alloc,
		view:        view,
		callTimeout: DefaultCallTimeout,
		sem:         make(chan struct{}, 1),
		guard:       func() error { return nil },
	}
	for _, o := range opts {
		o(r)
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.tracer = otel.GetTracerProvider().Tracer("github.com/plexusnet/plexus/services/repair/pass")
	if r.callTimeout <= 0 {
		return nil, errors.New("pass: the call timeout must be positive")
	}
	m, err := newMetrics(r.registerer)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	return r, nil
}

// Latest returns the latest finished pass, or nil before the first.
func (r *Runner) Latest() *Result { return r.latest.Load() }

// Reset forgets the strikes, so the next leak is counted from zero: a
// replica that becomes leader again must not act on what it counted in an
// earlier term.
func (r *Runner) Reset(ctx context.Context) error {
	if err := r.acquire(ctx); err != nil {
		return err
	}
	defer r.release()
	r.strikes = decide.Strikes{}
	return nil
}

func (r *Runner) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrPassInProgress, err)
	}
	select {
	case r.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrPassInProgress, ctx.Err())
	}
}

func (r *Runner) release() { <-r.sem }

// Run runs one pass under ctx and returns its result, which also becomes
// Latest. A pass that could not list or judge ends FAILED with the reason
// in its report; Run's error is only ErrPassInProgress (ctx ended while
// another pass was running). Releases and deletions stop when ctx ends;
// what they did is in the result.
func (r *Runner) Run(ctx context.Context, dryRun bool) (*Result, error) {
	turn, err := r.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return turn.Run(ctx, dryRun), nil
}

// Begin waits under ctx for a running pass to finish and returns the turn
// to run the next one (ErrPassInProgress when ctx ends first). The turn
// must be run exactly once: until then no other pass can start. An
// on-demand pass waits under its caller's deadline but runs under the
// leader's term, so a client that gives up does not cut it short between
// two releases.
func (r *Runner) Begin(ctx context.Context) (*Turn, error) {
	if err := r.acquire(ctx); err != nil {
		return nil, err
	}
	return &Turn{r: r}, nil
}

// Turn is the right to run one pass.
type Turn struct {
	r    *Runner
	used atomic.Bool
}

// Run runs the pass under ctx and gives the turn back. Running a turn twice
// panics: it would run two passes at once.
func (t *Turn) Run(ctx context.Context, dryRun bool) *Result {
	if t.used.Swap(true) {
		panic("pass: turn run twice")
	}
	defer t.r.release()
	res := t.r.run(ctx, dryRun)
	t.r.latest.Store(res)
	return res
}

func (r *Runner) run(ctx context.Context, dryRun bool) *Result {
	r.passID++
	id := r.passID
	start := time.Now()
	ctx, span := r.tracer.Start(ctx, "repair.pass", trace.WithAttributes(
		attribute.Int64("plexus.repair.pass", int64(id)), attribute.Bool("plexus.repair.dry_run", dryRun)))
	defer span.End()
	logger := r.logger.With("pass", id, "dry_run", dryRun)
	res := &Result{Report: &repairv1.Report{Pass: id, StartTime: timestamp(start), DryRun: dryRun}}

	fail := func(err error) *Result {
		res.Report.State = repairv1.PassState_PASS_STATE_FAILED
		res.Report.Reason = err.Error()
		res.Report.EndTime = timestamp(time.Now())
		res.Timings.Total = time.Since(start)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		r.metrics.observe(res)
		logger.Error("repair pass failed", "error", err, "took", res.Timings.Total)
		return res
	}

	synced, reason := r.view.Synced()
	t := time.Now()
	pools, allocs, err := r.list(ctx)
	res.Timings.List = time.Since(t)
	if err != nil {
		return fail(err)
	}
	synced, reason = r.stillSynced(synced, reason)

	t = time.Now()
	out, err := r.decide(ctx, r.input(pools, allocs, synced, reason, dryRun))
	res.Timings.Decide = time.Since(t)
	if err != nil {
		return fail(fmt.Errorf("decide: %w", err))
	}

	if r.beforeAct != nil && (len(out.Releases) > 0 || len(out.SliceDeletes) > 0 || len(out.PoolDeletes) > 0) {
		r.beforeAct(ctx, &out)
	}
	t = time.Now()
	done := r.act(ctx, logger, &out)
	res.Timings.Act = time.Since(t)
	r.strikes = out.Strikes

	r.fill(res, &out, done)
	logFindings(ctx, logger, res.Findings)
	res.Report.EndTime = timestamp(time.Now())
	res.Timings.Total = time.Since(start)
	if out.State == decide.StateComplete && !dryRun {
		r.emitEvents(&out, done)
	}
	r.metrics.observe(res)
	finished(span, logger, res, &out, len(allocs))
	return res
}

// stillSynced is whether the view is complete after the listing: an
// informer that lost its watch, or a source that went away, while the
// allocations were listed makes the view as incomplete as one that was
// never synced. synced and reason are what the view said before.
func (r *Runner) stillSynced(synced bool, reason string) (bool, string) {
	ok, why := r.view.Synced()
	if ok {
		return synced, reason
	}
	if synced {
		reason = why
	} else if why != reason {
		reason = reason + "; then: " + why
	}
	return false, reason
}

// input is what the pass hands to the decision.
func (r *Runner) input(pools []decide.Pool, allocs []decide.Allocation, synced bool, reason string, dryRun bool) decide.Input {
	return decide.Input{
		Now:            time.Now(),
		Pools:          pools,
		Allocations:    allocs,
		Owners:         r.view,
		Slices:         r.view.Slices(),
		Synced:         synced,
		UnsyncedReason: reason,
		DryRun:         dryRun,
		Strikes:        r.strikes,
		Config:         r.cfg,
	}
}

// logFindings logs every finding, at debug.
func logFindings(ctx context.Context, logger *slog.Logger, findings []*repairv1.Finding) {
	if !logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	for _, f := range findings {
		logger.Debug("finding", "kind", KindName(f.GetKind()), "pool", f.GetPool(), "address", f.GetAddress(),
			"slice", f.GetEndpointSlice(), "strikes", f.GetStrikes(), "action", ActionName(f.GetAction()), "message", f.GetMessage())
	}
}

// finished records a pass that ran to its end on its span and in the log.
func finished(span trace.Span, logger *slog.Logger, res *Result, out *decide.Output, allocs int) {
	span.SetAttributes(
		attribute.String("plexus.repair.state", res.Report.GetState().String()),
		attribute.Int("plexus.repair.allocations", allocs),
		attribute.Int("plexus.repair.findings", len(res.Findings)),
		attribute.Int64("plexus.repair.released", int64(res.Report.GetReleased())),
	)
	logger.Info("repair pass finished",
		"state", out.State, "reason", out.Reason, "allocations", out.Stats.Allocations, "unresolved", out.Stats.Unresolved,
		"in_deletion", out.Stats.InDeletion, "slices", out.Stats.Slices, "findings", len(out.Findings), "released", res.Report.GetReleased(),
		"slices_deleted", res.Report.GetSlicesDeleted(), "pools_deleted", res.Report.GetPoolsDeleted(), "took", res.Timings.Total,
		"list", res.Timings.List, "decide", res.Timings.Decide, "act", res.Timings.Act)
}

// list reads every pool and every allocation, a page at a time.
func (r *Runner) list(ctx context.Context) ([]decide.Pool, []decide.Allocation, error) {
	ctx, span := r.tracer.Start(ctx, "repair.list")
	defer span.End()
	var pools []decide.Pool
	for token := ""; ; {
		cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
		resp, err := r.alloc.ListPools(cctx, &allocatorv1.ListPoolsRequest{PageSize: DefaultPageSize, PageToken: token})
		cancel()
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "list pools")
			return nil, nil, fmt.Errorf("list pools: %w", err)
		}
		for _, p := range resp.GetPools() {
			dp := decide.Pool{ID: p.GetName(), Deleting: p.GetDeleting(), Etag: p.GetEtag(), UpdateTime: p.GetUpdateTime().AsTime()}
			for _, c := range p.GetCidrs() {
				prefix, err := netip.ParsePrefix(c)
				if err != nil {
					return nil, nil, fmt.Errorf("pool %s: CIDR %q: %w", p.GetName(), c, err)
				}
				dp.CIDRs = append(dp.CIDRs, prefix)
			}
			pools = append(pools, dp)
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	var allocs []decide.Allocation
	pages := 0
	for token := ""; ; {
		cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
		resp, err := r.alloc.ListAllocations(cctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/-", PageSize: DefaultPageSize, PageToken: token})
		cancel()
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "list allocations")
			return nil, nil, fmt.Errorf("list allocations (after %d pages): %w", pages, err)
		}
		pages++
		if allocs == nil {
			allocs = make([]decide.Allocation, 0, len(resp.GetAllocations()))
		}
		for _, a := range resp.GetAllocations() {
			addr, err := netip.ParseAddr(a.GetAddress())
			if err != nil {
				return nil, nil, fmt.Errorf("allocation %s: %w", a.GetName(), err)
			}
			o := a.GetOwner()
			allocs = append(allocs, decide.Allocation{
				Pool:    a.GetPool(),
				Address: addr,
				Owner: decide.Owner{Cluster: o.GetCluster(), Kind: o.GetKind(), Namespace: o.GetNamespace(),
					Name: o.GetName(), UID: o.GetUid()},
				Etag:       a.GetEtag(),
				CreateTime: a.GetCreateTime().AsTime(),
			})
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	span.SetAttributes(attribute.Int("plexus.repair.pools", len(pools)), attribute.Int("plexus.repair.allocations", len(allocs)),
		attribute.Int("plexus.repair.pages", pages))
	return pools, allocs, nil
}

func (r *Runner) decide(ctx context.Context, in decide.Input) (decide.Output, error) {
	_, span := r.tracer.Start(ctx, "repair.decide", trace.WithAttributes(
		attribute.Bool("plexus.repair.synced", in.Synced), attribute.Int("plexus.repair.slices", len(in.Slices))))
	defer span.End()
	out, err := decide.Decide(in)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "decide")
		return out, err
	}
	span.SetAttributes(attribute.Int("plexus.repair.findings", len(out.Findings)),
		attribute.Int("plexus.repair.releases", len(out.Releases)), attribute.Int("plexus.repair.slice_deletes", len(out.SliceDeletes)))
	return out, nil
}

// deletions are the outcomes of the deletions a pass planned: nil for
// done, absent for not attempted.
type deletions struct {
	slices map[decide.SliceRef]error
	pools  map[string]error
}

// act performs the planned releases and deletions, records the release
// outcomes in out, and returns the deletion outcomes.
func (r *Runner) act(ctx context.Context, logger *slog.Logger, out *decide.Output) deletions {
	if len(out.Releases) == 0 && len(out.SliceDeletes) == 0 && len(out.PoolDeletes) == 0 {
		return deletions{}
	}
	ctx, span := r.tracer.Start(ctx, "repair.act", trace.WithAttributes(
		attribute.Int("plexus.repair.releases", len(out.Releases)), attribute.Int("plexus.repair.slice_deletes", len(out.SliceDeletes)),
		attribute.Int("plexus.repair.pool_deletes", len(out.PoolDeletes))))
	defer span.End()

	results := make(map[decide.AllocationKey]error, len(out.Releases))
	var mu sync.Mutex
	work := make(chan decide.Release)
	var wg sync.WaitGroup
	for range min(DefaultReleaseWorkers, len(out.Releases)) {
		wg.Go(func() {
			for rel := range work {
				err := r.releaseOne(ctx, rel)
				switch {
				case err == nil:
					logger.Info("released leaked allocation", "pool", rel.Pool, "address", rel.Address, "etag", rel.Etag, "owner", rel.Owner.String())
				case errors.Is(err, decide.ErrChangedHands):
					logger.Warn("guarded release refused: the allocation changed hands", "pool", rel.Pool, "address", rel.Address, "etag", rel.Etag, "error", err)
				default:
					logger.Error("release failed", "pool", rel.Pool, "address", rel.Address, "error", err)
				}
				mu.Lock()
				results[rel.Key()] = err
				mu.Unlock()
			}
		})
	}
	for _, rel := range out.Releases {
		// Once the context ends or the guard fails (leadership lost,
		// shutdown) nothing more is started; ApplyReleaseResults marks
		// the rest as failed.
		if r.mayWrite(ctx) != nil {
			break
		}
		work <- rel
	}
	close(work)
	wg.Wait()
	if err := out.ApplyReleaseResults(results); err != nil {
		logger.Error("recording release outcomes", "error", err)
	}

	done := deletions{slices: make(map[decide.SliceRef]error, len(out.SliceDeletes)), pools: make(map[string]error, len(out.PoolDeletes))}
	for _, ref := range out.SliceDeletes {
		err := r.mayWrite(ctx)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, r.callTimeout)
			err = r.view.DeleteSlice(cctx, ref)
			cancel()
		}
		done.slices[ref] = err
		if err != nil {
			logger.Warn("orphaned slice not deleted", "namespace", ref.Namespace, "name", ref.Name, "error", err)
		} else {
			logger.Info("deleted orphaned slice", "namespace", ref.Namespace, "name", ref.Name, "service", ref.ServiceName)
		}
	}
	for _, del := range out.PoolDeletes {
		if r.mayWrite(ctx) != nil {
			break
		}
		n, err := r.finishDeletion(ctx, del)
		done.pools[del.Pool] = err
		switch {
		case errors.Is(err, errDeletionGoesOn):
			logger.Info("resumed a stalled pool deletion; the allocator goes on with it", "pool", del.Pool, "etag", del.Etag)
		case err != nil:
			logger.Warn("stalled pool deletion not finished", "pool", del.Pool, "etag", del.Etag, "error", err)
		default:
			logger.Info("finished a stalled pool deletion", "pool", del.Pool, "etag", del.Etag, "released", n)
		}
	}
	return done
}

// finishDeletion deletes a pool whose deletion stalled, with force, guarded
// by the etag the pass saw, and returns how many allocations went with it.
// The allocator goes on with a deletion in chunks when the call's deadline
// passes first; the next pass sees the pool shrink, or gone.
func (r *Runner) finishDeletion(ctx context.Context, del decide.PoolDelete) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	resp, err := r.alloc.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: del.Pool, Etag: del.Etag, Force: true})
	if timedOut(err) && ctx.Err() != nil {
		return 0, fmt.Errorf("delete pool %s: %w", del.Pool, errDeletionGoesOn)
	}
	if err != nil {
		return 0, fmt.Errorf("delete pool %s: %s", del.Pool, errorText(err))
	}
	return resp.GetReleased(), nil
}

// mayWrite tells whether a write may be sent now.
func (r *Runner) mayWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.guard()
}

// releaseOne performs one guarded release. A refusal because the
// allocation changed hands or is gone wraps decide.ErrChangedHands.
func (r *Runner) releaseOne(ctx context.Context, rel decide.Release) error {
	name := rel.Pool + "/allocations/" + rel.Address.String()
	if err := r.mayWrite(ctx); err != nil {
		return fmt.Errorf("release %s not sent: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.callTimeout)
	defer cancel()
	_, err := r.alloc.Release(ctx, &allocatorv1.ReleaseRequest{Name: name, Etag: rel.Etag, OwnerUid: rel.OwnerUID})
	if err == nil {
		return nil
	}
	if changedHands(err) {
		return fmt.Errorf("release %s: %s: %w", name, errorText(err), decide.ErrChangedHands)
	}
	return fmt.Errorf("release %s: %w", name, err)
}
