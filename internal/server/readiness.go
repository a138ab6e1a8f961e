package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readiness runs the readiness checks in the background and keeps their
// last results, so /readyz answers at once and a probe storm cannot multiply
// the load on a dependency.
type readiness struct {
	logger *slog.Logger
	gauge  *prometheus.GaugeVec

	mu      sync.Mutex
	checks  []readinessCheck
	results map[string]checkResult
	wake    chan struct{}
}

type readinessCheck struct {
	name string
	fn   func(context.Context) error
}

type checkResult struct {
	err   error
	since time.Time // when the check entered its current state
}

func newReadiness(logger *slog.Logger) *readiness {
	return &readiness{
		logger: logger,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "plexus_readiness_check_ok",
			Help: "1 when the named readiness check passed its last run, 0 otherwise.",
		}, []string{"check"}),
		results: map[string]checkResult{},
		wake:    make(chan struct{}, 1),
	}
}

func (r *readiness) add(name string, fn func(context.Context) error) {
	r.mu.Lock()
	r.checks = append(r.checks, readinessCheck{name: name, fn: fn})
	r.mu.Unlock()
	r.gauge.WithLabelValues(name).Set(0)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Until every check has passed once (since the last was added), the checks
// run again after startupRetry, doubling up to startupRetryMax: a process
// that becomes ready a moment after its first run (caches synced, a leader
// seen) says so then, not a whole interval later (a restarted importer was
// ready 4 s before its /readyz said so). From then on they run every
// interval.
const (
	startupRetry    = 50 * time.Millisecond
	startupRetryMax = 500 * time.Millisecond
)

func (r *readiness) loop(ctx context.Context, interval, timeout time.Duration) {
	retry, started := startupRetry, false
	for {
		wait := interval
		if started = r.runOnce(ctx, timeout) || started; !started {
			wait, retry = min(retry, interval), min(2*retry, startupRetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-r.wake:
			// A check was added: it is new, so it starts as at start-up.
			t.Stop()
			retry, started = startupRetry, false
		}
	}
}

// runOnce runs every check concurrently, each under timeout, logs the
// checks whose state changed, and reports whether all passed.
func (r *readiness) runOnce(ctx context.Context, timeout time.Duration) bool {
	r.mu.Lock()
	checks := append([]readinessCheck(nil), r.checks...)
	r.mu.Unlock()

	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = c.fn(cctx)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}

	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	all := true
	for i, c := range checks {
		err := errs[i]
		all = all && err == nil
		prev, seen := r.results[c.name]
		switch {
		case !seen || (prev.err == nil) != (err == nil):
			r.results[c.name] = checkResult{err: err, since: now}
			switch {
			case err == nil:
				r.logger.Info("readiness check passing", "check", c.name)
			case !seen:
				// Starting up: not ready yet is what is expected, not a
				// fault (a store that cannot be reached says so itself).
				r.logger.Info("readiness check not passing yet", "check", c.name, "error", err)
			default:
				r.logger.Warn("readiness check failing", "check", c.name, "error", err)
			}
		default:
			r.results[c.name] = checkResult{err: err, since: prev.since}
		}
		v := 0.0
		if err == nil {
			v = 1
		}
		r.gauge.WithLabelValues(c.name).Set(v)
	}
	return all
}

// report renders the checks the way Kubernetes' own /readyz does: one
// "[+]name ok" or "[-]name failed: why" line per check, then a verdict.
func (r *readiness) report(draining bool) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	ok := true
	if draining {
		ok = false
		b.WriteString("[-]shutdown failed: server is draining\n")
	}
	for _, c := range r.checks {
		res, seen := r.results[c.name]
		switch {
		case !seen:
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: not checked yet\n", c.name)
		case res.err != nil:
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v (since %s)\n", c.name, res.err, res.since.UTC().Format(time.RFC3339))
		default:
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	if ok {
		b.WriteString("readyz check passed\n")
	} else {
		b.WriteString("readyz check failed\n")
	}
	return ok, b.String()
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{
		EnableOpenMetrics: true, // carries the trace-id exemplars
		Registry:          s.registry,
	}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, body := s.ready.report(s.draining.Load())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, body)
	})
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
