// Package sources follows the configured source clusters: one
// WatchServices stream (exported services only) per source cluster's
// membership, feeding a Sink (the importer's exports.Store).
//
// # Snapshots and resuming
//
// A stream starts with a snapshot (SNAPSHOT_START … SNAPSHOT_END) or, when
// it resumes, with what the client missed. A snapshot is buffered and handed
// to the Sink whole at SNAPSHOT_END, which replaces everything the source
// exported before: a service missing from it is withdrawn. A stream cut in
// the middle of a snapshot changes nothing, and the position the next
// stream resumes from (revision and epoch) only moves at SNAPSHOT_END and
// with live events, never with snapshot events, whose revisions do not say
// that every earlier change was received.
//
// # Reachability
//
// While a source is unreachable its last known exports stay in the Sink
// (marked stale through SetConnected), so the member cluster keeps routing
// to them; the stream is retried with exponential backoff and jitter. A
// stream counts as up once it delivered an event or stayed open for a
// moment (a resumed stream with nothing to catch up on is silent).
//
// # Who may speak for a source
//
// A source cluster's membership speaks only for that cluster. Each stream
// is checked before anything it says is taken (Trust): the membership's
// server certificate, with TLS, must not name another cluster, clusterset
// or service (a shared legacy identity is accepted unless
// Trust.RequireClusterIdentities); every event must not say that the
// membership serves another cluster (WatchServicesResponse.cluster); and
// every export and withdrawal must not name another cluster as its own.
// An event or export with no cluster (a membership from before these
// fields) counts as the source's. A refused stream ends: what it sent
// since its last complete snapshot or live event is dropped, its last
// accepted exports stay (stale, as for an unreachable source), and it is
// retried with backoff. The refusal is reported through Source.Refusal,
// the metric plexus_importer_source_refusals_total, Config.OnRefused and
// an info log line "source refused" naming the identity and the reason,
// once per refusal that differs from the one before. This is what keeps
// two sources that reach one membership under two names from importing
// one cluster twice.
package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/services/importer/exports"
)

// Defaults of a Source.
const (
	DefaultBackoffMin = 200 * time.Millisecond
	DefaultBackoffMax = 10 * time.Second
	// DefaultSettle is how long a silent stream must stay open to count as
	// up.
	DefaultSettle = time.Second
	// healthyStream is how long a stream must have lived for the backoff
	// to start again from its minimum.
	healthyStream = 10 * time.Second
	// DefaultUnavailableQuiet is how long a member may answer UNAVAILABLE
	// (it is starting, not synced yet, or restarting) before that is worth
	// a warning; until then each failed attempt is logged at info.
	DefaultUnavailableQuiet = 30 * time.Second
)

// Sink receives what a source says. exports.Store implements it.
type Sink interface {
	Replace(cluster string, origin exports.Origin, updates []exports.Update) (int, error)
	Upsert(cluster string, origin exports.Origin, u exports.Update) (exports.Key, bool, error)
	Withdraw(cluster string, key exports.Key, observed time.Time, traceContext map[string]string) bool
	SetConnected(cluster string, connected bool, at time.Time)
	Heard(cluster string, at time.Time)
}

// Config configures a Source.
type Config struct {
	// Name is the source cluster's name; the exports are recorded under it
	// whatever cluster name the stream's events carry.
	Name string
	// Addr is the membership's address, for messages.
	Addr string
	// Conn is a connection to the membership.
	Conn grpc.ClientConnInterface
	// Sink receives the exports.
	Sink Sink
	// Logger; nil discards.
	Logger *slog.Logger
	// Metrics; nil records none.
	Metrics *Metrics
	// BackoffMin and BackoffMax bound the wait between two attempts;
	// defaults when zero.
	BackoffMin, BackoffMax time.Duration
	// Settle is how long a silent stream must stay open to count as up;
	// DefaultSettle when zero.
	Settle time.Duration
	// UnavailableQuiet is how long streams refused or cut with UNAVAILABLE
	// are logged at info before they are warned about;
	// DefaultUnavailableQuiet when zero.
	UnavailableQuiet time.Duration
	// Start is where the first stream resumes from: the position of the
	// Source this one replaces (the member's membership moved), or zero
	// for a snapshot.
	Start Position
	// Trust says which memberships may speak for the source.
	Trust Trust
	// OnRefused, when set, is called when the source is refused, once per
	// refusal that differs from the last one (reason or identity).
	OnRefused func(Refusal)
}

// Position is where a stream resumes from.
type Position struct {
	Epoch    string
	Revision uint64
}

// Source follows one source cluster.
type Source struct {
	cfg    Config
	client membershipv1.MembershipServiceClient
	logger *slog.Logger

	mu      sync.Mutex
	pos     Position
	lastErr error
	// refusal is why the last stream was refused; nil once a stream was
	// up without one.
	refusal *Refusal
	// identity is the principal of the certificate the membership last
	// presented.
	identity string
}

// New returns a Source; Run follows it.
func New(cfg Config) (*Source, error) {
	if cfg.Name == "" || cfg.Conn == nil || cfg.Sink == nil {
		return nil, errors.New("sources: a source needs a name, a connection and a sink")
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.UnavailableQuiet <= 0 {
		cfg.UnavailableQuiet = DefaultUnavailableQuiet
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(DefaultBackoffMax, cfg.BackoffMin)
	}
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSettle
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Source{
		cfg:    cfg,
		pos:    cfg.Start,
		client: membershipv1.NewMembershipServiceClient(cfg.Conn),
		logger: logger.With("source", cfg.Name, "addr", cfg.Addr),
	}, nil
}

// Name returns the source cluster's name.
func (s *Source) Name() string { return s.cfg.Name }

// Position returns where the next stream resumes from.
func (s *Source) Position() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

// LastError returns why the last stream ended, or nil.
func (s *Source) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// Refusal returns why the source is refused, or nil.
func (s *Source) Refusal() *Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusal
}

// Identity returns the principal of the certificate the membership last
// presented; empty without TLS.
func (s *Source) Identity() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity
}

// Run follows the source until ctx ends.
func (s *Source) Run(ctx context.Context) {
	backoff := s.cfg.BackoffMin
	var unavailableSince time.Time // zero: the last stream did not end UNAVAILABLE
	for ctx.Err() == nil {
		started := time.Now()
		err := s.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		s.cfg.Metrics.streamEnded(s.cfg.Name)
		var refused *Refusal
		if errors.As(err, &refused) {
			s.refused(ctx, refused)
		}
		if time.Since(started) >= healthyStream {
			backoff = s.cfg.BackoffMin
			unavailableSince = time.Time{}
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		level := slog.LevelWarn
		switch {
		case refused != nil:
			// The audit line said it.
			level = slog.LevelDebug
		case status.Code(err) != codes.Unavailable:
			unavailableSince = time.Time{}
		case unavailableSince.IsZero():
			unavailableSince = started
			level = slog.LevelInfo
		case time.Since(unavailableSince) < s.cfg.UnavailableQuiet:
			level = slog.LevelInfo
		}
		s.logger.Log(ctx, level, "source stream ended; keeping its last known exports", "error", describe(err), "retry_in", wait.Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.BackoffMax)
	}
}

// watch runs one stream until it fails.
func (s *Source) watch(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pos := s.Position()
	stream, err := s.client.WatchServices(ctx, &membershipv1.WatchServicesRequest{
		ExportedOnly: true, StartRevision: pos.Revision, Epoch: pos.Epoch,
	})
	if err != nil {
		return fmt.Errorf("start watch: %w", err)
	}
	p, _ := peer.FromContext(stream.Context())
	principal := peerPrincipal(p)
	s.mu.Lock()
	s.identity = principal
	s.mu.Unlock()
	if r := s.cfg.Trust.Check(s.cfg.Name, principal); r != nil {
		return r
	}

	var once sync.Once
	wasUp := false
	up := func() {
		once.Do(func() {
			wasUp = true
			s.mu.Lock()
			s.refusal = nil
			s.mu.Unlock()
			s.cfg.Sink.SetConnected(s.cfg.Name, true, time.Now())
			s.cfg.Metrics.setConnected(s.cfg.Name, true)
			s.logger.Info("source stream up", "resume_revision", pos.Revision, "epoch", pos.Epoch)
		})
	}
	settle := time.AfterFunc(s.cfg.Settle, up)
	defer func() {
		settle.Stop()
		// Waits for an up() in flight, so "down" is never overtaken by it.
		once.Do(func() {})
		if wasUp {
			s.cfg.Sink.SetConnected(s.cfg.Name, false, time.Now())
			s.cfg.Metrics.setConnected(s.cfg.Name, false)
		}
	}()

	var snap snapshot
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the source ended the stream")
			}
			return err
		}
		if r := s.speaksForItself(ev, principal); r != nil {
			return r
		}
		up()
		s.cfg.Sink.Heard(s.cfg.Name, time.Now())
		s.cfg.Metrics.event(s.cfg.Name, ev.GetType())
		if err := s.handle(ev, &snap); err != nil {
			return err
		}
	}
}

// snapshot collects the updates of a snapshot until its end.
type snapshot struct {
	open    bool
	updates []exports.Update
}

// handle applies one event of the stream; an error ends the stream.
func (s *Source) handle(ev *membershipv1.WatchServicesResponse, snap *snapshot) error {
	switch ev.GetType() {
	case membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START:
		*snap = snapshot{open: true}
	case membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END:
		if !snap.open {
			return errors.New("protocol error: SNAPSHOT_END without SNAPSHOT_START")
		}
		n, err := s.cfg.Sink.Replace(s.cfg.Name, exports.OriginWatch, snap.updates)
		if err != nil {
			s.logger.Warn("snapshot holds endpoint sets that were skipped", "error", err)
		}
		s.logger.Info("snapshot applied", "services", len(snap.updates), "changed", n, "revision", ev.GetRevision(), "epoch", ev.GetEpoch())
		*snap = snapshot{}
		s.advance(ev)
	case membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT:
		u := s.update(ev)
		if snap.open {
			snap.updates = append(snap.updates, u)
			return nil
		}
		if _, _, err := s.cfg.Sink.Upsert(s.cfg.Name, exports.OriginWatch, u); err != nil {
			s.logger.Warn("endpoint set skipped", "service", ev.GetEndpoints().GetService(), "error", err)
		}
		s.advance(ev)
	case membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE:
		if snap.open {
			return errors.New("protocol error: DELETE inside a snapshot")
		}
		key, err := exports.ParseServiceName(ev.GetEndpoints().GetService())
		if err != nil {
			s.logger.Warn("deletion skipped", "error", err)
		} else {
			s.cfg.Sink.Withdraw(s.cfg.Name, key, observeTime(ev), ev.GetTraceContext())
		}
		s.advance(ev)
	default:
		s.logger.Debug("unknown event type ignored", "type", ev.GetType())
	}
	return nil
}

// speaksForItself refuses an event of a membership that serves another
// cluster, or that carries another cluster's export.
func (s *Source) speaksForItself(ev *membershipv1.WatchServicesResponse, principal string) *Refusal {
	if c := ev.GetCluster(); c != "" && c != s.cfg.Name {
		return &Refusal{Reason: RefusedServesOther, Identity: principal,
			Detail: fmt.Sprintf("the membership serves cluster %s, not %s", clipName(c), s.cfg.Name)}
	}
	if c := ev.GetEndpoints().GetCluster(); c != "" && c != s.cfg.Name {
		return &Refusal{Reason: RefusedExportCluster, Identity: principal,
			Detail: fmt.Sprintf("%s names cluster %s, not %s", clipName(ev.GetEndpoints().GetService()), clipName(c), s.cfg.Name)}
	}
	return nil
}

// refused records and reports a refusal; one that repeats the last is only
// counted.
func (s *Source) refused(ctx context.Context, r *Refusal) {
	s.cfg.Metrics.refused(s.cfg.Name, r.Reason)
	s.mu.Lock()
	again := s.refusal != nil && s.refusal.Reason == r.Reason && s.refusal.Identity == r.Identity
	s.refusal = r
	s.mu.Unlock()
	if again {
		return
	}
	s.logger.InfoContext(ctx, "source refused", "identity", r.Identity, "reason", r.Reason, "detail", r.Detail)
	if s.cfg.OnRefused != nil {
		s.cfg.OnRefused(*r)
	}
}

// clipName cuts a name a membership sent for a message.
func clipName(s string) string {
	if len(s) <= 253 {
		return s
	}
	return s[:253] + "…"
}

func (s *Source) update(ev *membershipv1.WatchServicesResponse) exports.Update {
	return exports.Update{
		Endpoints:    ev.GetEndpoints(),
		Revision:     ev.GetRevision(),
		ObserveTime:  observeTime(ev),
		TraceContext: ev.GetTraceContext(),
	}
}

func (s *Source) advance(ev *membershipv1.WatchServicesResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.GetEpoch() != s.pos.Epoch || ev.GetRevision() > s.pos.Revision {
		s.pos = Position{Epoch: ev.GetEpoch(), Revision: ev.GetRevision()}
	}
}

func observeTime(ev *membershipv1.WatchServicesResponse) time.Time {
	if ev.GetObserveTime() == nil {
		return time.Time{}
	}
	return ev.GetObserveTime().AsTime()
}

// describe renders a stream error without the noise of gRPC's wrapping.
func describe(err error) string {
	if err == nil {
		return ""
	}
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// Metrics are the sources' Prometheus metrics.
type Metrics struct {
	connected *prometheus.GaugeVec
	events    *prometheus.CounterVec
	ended     *prometheus.CounterVec
	refusals  *prometheus.CounterVec
}

// NewMetrics registers the sources' metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "plexus_importer_source_connected",
			Help: "1 while the source cluster's WatchServices stream is up.",
		}, []string{"source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_source_events_total",
			Help: "WatchServices events received, by source and type.",
		}, []string{"source", "type"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_source_streams_ended_total",
			Help: "WatchServices streams that ended and were retried, by source.",
		}, []string{"source"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_source_refusals_total",
			Help: "WatchServices streams refused because the membership may not speak for the source cluster, by source and reason (IDENTITY_CLUSTER_MISMATCH, IDENTITY_CLUSTERSET_MISMATCH, IDENTITY_SERVICE_MISMATCH, CLUSTER_IDENTITY_REQUIRED, SERVES_OTHER_CLUSTER, EXPORT_CLUSTER_MISMATCH).",
		}, []string{"source", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.connected, m.events, m.ended, m.refusals} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register source metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) setConnected(source string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.connected.WithLabelValues(source).Set(v)
}

func (m *Metrics) event(source string, t membershipv1.WatchEventType) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(source, strings.ToLower(strings.TrimPrefix(t.String(), "WATCH_EVENT_TYPE_"))).Inc()
}

func (m *Metrics) streamEnded(source string) {
	if m == nil {
		return
	}
	m.ended.WithLabelValues(source).Inc()
}

func (m *Metrics) refused(source, reason string) {
	if m == nil {
		return
	}
	m.refusals.WithLabelValues(source, reason).Inc()
}
