// Package server is the gRPC face of repair: RunRepair runs a pass on the
// leader, GetLatestReport and ListFindings read the latest pass this
// replica ran.
//
// # Leadership
//
// Only the leader runs passes. A replica that does not lead answers
// RunRepair with FAILED_PRECONDITION, reason NOT_LEADER, and the leader's
// identity in the ErrorInfo metadata ("leader"). GetLatestReport and
// ListFindings are answered by every replica from the latest pass it ran
// itself — on a replica that never led, NOT_FOUND (NO_REPORT) — so the
// report's pass number and times tell a reader how old it is.
//
// # A pass already running
//
// RunRepair waits for a running pass (periodic or on demand) to finish and
// then runs its own. If the call's deadline passes while it waits, it fails
// with ABORTED, reason PASS_IN_PROGRESS; once its own pass has started, the
// pass runs to its end even if the caller goes away, and its report becomes
// the latest.
package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/pagination"
	"github.com/plexusnet/plexus/services/repair/pass"
)

// ServiceName is the full name of the repair gRPC service.
const ServiceName = "plexus.repair.v1.RepairService"

// Reasons of the repair API (see the proto documentation).
const (
	ReasonNoReport        = "NO_REPORT"
	ReasonNotLeader       = "NOT_LEADER"
	ReasonPassInProgress  = "PASS_IN_PROGRESS"
	ReasonInvalidArgument = "INVALID_ARGUMENT"
)

var (
	errNoReport  = errors.New("no repair pass has finished on this replica yet")
	errNotLeader = errors.New("this replica is not the repair leader")
)

// errorTable maps domain errors to codes and reasons; it is the only place
// where that happens.
var errorTable = apierr.Table{
	{Err: errNoReport, Code: codes.NotFound, Reason: ReasonNoReport},
	{Err: pass.ErrPassInProgress, Code: codes.Aborted, Reason: ReasonPassInProgress},
}

// Leadership tells whether this replica leads.
type Leadership interface {
	// Lead returns the context of the current term when this replica
	// leads (it ends with the term); otherwise ok is false and leader is
	// the identity of the leader, when known.
	Lead() (term context.Context, leader string, ok bool)
}

// Runner runs passes; *pass.Runner implements it.
type Runner interface {
	Begin(ctx context.Context) (*pass.Turn, error)
	Latest() *pass.Result
}

// Server implements repairv1.RepairServiceServer.
type Server struct {
	repairv1.UnimplementedRepairServiceServer
	runner Runner
	leader Leadership
}

// New returns the API over runner, answering RunRepair only while leader
// says this replica leads.
func New(runner Runner, leader Leadership) *Server {
	return &Server{runner: runner, leader: leader}
}

// Register registers the server on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	repairv1.RegisterRepairServiceServer(g, s)
}

func notLeader(leader string) error {
	msg := errNotLeader.Error()
	if leader != "" {
		msg += "; the leader is " + leader
	}
	return apierr.New(codes.FailedPrecondition, ReasonNotLeader, msg, map[string]string{"leader": leader})
}

// RunRepair implements RepairService.RunRepair.
func (s *Server) RunRepair(ctx context.Context, req *repairv1.RunRepairRequest) (*repairv1.RunRepairResponse, error) {
	term, leader, ok := s.leader.Lead()
	if !ok {
		return nil, notLeader(leader)
	}
	// Stop waiting for a running pass a little before the caller's
	// deadline, so the caller hears PASS_IN_PROGRESS rather than its own
	// DEADLINE_EXCEEDED.
	wait := ctx
	if dl, ok := ctx.Deadline(); ok {
		margin := min(time.Until(dl)/10, time.Second)
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, dl.Add(-margin))
		defer cancel()
	}
	turn, err := s.runner.Begin(wait)
	if err != nil {
		return nil, apierr.Map(err, errorTable)
	}
	// The pass lives in the leader's term and is traced under this call.
	passCtx := trace.ContextWithSpan(term, trace.SpanFromContext(ctx))
	done := make(chan *pass.Result, 1)
	go func() { done <- turn.Run(passCtx, req.GetDryRun()) }()
	select {
	case res := <-done:
		return &repairv1.RunRepairResponse{Report: res.Report}, nil
	case <-ctx.Done():
		return nil, apierr.Map(fmt.Errorf("the pass goes on and its report will be the latest: %w", ctx.Err()), errorTable)
	}
}

func (s *Server) latest() (*pass.Result, error) {
	res := s.runner.Latest()
	if res == nil {
		if _, leader, ok := s.leader.Lead(); !ok && leader != "" {
			return nil, apierr.New(codes.NotFound, ReasonNoReport, errNoReport.Error()+"; the leader is "+leader, map[string]string{"leader": leader})
		}
		return nil, apierr.Map(errNoReport, errorTable)
	}
	return res, nil
}

// GetLatestReport implements RepairService.GetLatestReport.
func (s *Server) GetLatestReport(context.Context, *repairv1.GetLatestReportRequest) (*repairv1.GetLatestReportResponse, error) {
	res, err := s.latest()
	if err != nil {
		return nil, err
	}
	return &repairv1.GetLatestReportResponse{Report: res.Report}, nil
}

// pageToken is the position after which a ListFindings page starts, with
// the pass and the filter it belongs to, so a token is never applied to
// another pass's findings or another filter.
type pageToken struct {
	Pass   uint64 `json:"p"`
	Offset int    `json:"o"`
	Kind   int32  `json:"k,omitempty"`
	Pool   string `json:"l,omitempty"`
}

func invalid(field, format string, args ...any) error {
	return apierr.InvalidField(ReasonInvalidArgument, apierr.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// ListFindings implements RepairService.ListFindings.
func (s *Server) ListFindings(_ context.Context, req *repairv1.ListFindingsRequest) (*repairv1.ListFindingsResponse, error) {
	size, err := pagination.Size(req.GetPageSize())
	if err != nil {
		return nil, invalid("page_size", "%v", err)
	}
	if _, known := repairv1.FindingKind_name[int32(req.GetKind())]; !known {
		return nil, invalid("kind", "unknown finding kind %d", req.GetKind())
	}
	if p := req.GetPool(); p != "" {
		id, found := strings.CutPrefix(p, "pools/")
		if !found || id == "" || strings.Contains(id, "/") {
			return nil, invalid("pool", "%q is not a pool name (pools/{pool_id})", p)
		}
	}
	res, err := s.latest()
	if err != nil {
		return nil, err
	}
	pos := pageToken{Pass: res.Report.GetPass(), Kind: int32(req.GetKind()), Pool: req.GetPool()}
	if tok := req.GetPageToken(); tok != "" {
		var got pageToken
		if err := pagination.Decode(tok, &got); err != nil || got.Offset < 0 {
			return nil, invalid("page_token", "invalid page token")
		}
		switch {
		case got.Pass != pos.Pass:
			return nil, invalid("page_token", "the token belongs to pass %d, whose findings were replaced by those of pass %d; list again from the start", got.Pass, pos.Pass)
		case got.Kind != pos.Kind || got.Pool != pos.Pool:
			return nil, invalid("page_token", "the token was issued for another kind or pool filter")
		}
		pos.Offset = got.Offset
	}

	match := func(f *repairv1.Finding) bool {
		return (req.GetKind() == repairv1.FindingKind_FINDING_KIND_UNSPECIFIED || f.GetKind() == req.GetKind()) &&
			(req.GetPool() == "" || f.GetPool() == req.GetPool())
	}
	resp := &repairv1.ListFindingsResponse{Pass: pos.Pass}
	i := min(pos.Offset, len(res.Findings))
	for ; i < len(res.Findings) && len(resp.Findings) < size; i++ {
		if f := res.Findings[i]; match(f) {
			resp.Findings = append(resp.Findings, f)
		}
	}
	// Another page only when another match exists, so the last page never
	// comes back empty.
	for ; i < len(res.Findings); i++ {
		if match(res.Findings[i]) {
			pos.Offset = i
			resp.NextPageToken = pagination.Encode(pos)
			break
		}
	}
	return resp, nil
}
