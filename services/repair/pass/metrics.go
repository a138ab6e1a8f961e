package pass

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
)

// metrics are the runner's Prometheus collectors. Every label value exists
// from the start (at zero), so a dashboard can tell "none" from "not
// reported".
type metrics struct {
	passes      *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	findings    *prometheus.GaugeVec
	actions     *prometheus.CounterVec
	lastState   *prometheus.GaugeVec
	lastEnd     prometheus.Gauge
	allocations prometheus.Gauge
	unresolved  prometheus.Gauge
}

var passStates = []repairv1.PassState{
	repairv1.PassState_PASS_STATE_COMPLETE, repairv1.PassState_PASS_STATE_UNSYNCED, repairv1.PassState_PASS_STATE_FAILED,
}

func stateName(s repairv1.PassState) string { return trimPrefix(s.String(), "PASS_STATE_") }

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_repair_passes_total",
			Help: "Repair passes run, by how they ended and whether they were dry runs.",
		}, []string{"state", "dry_run"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "plexus_repair_pass_duration_seconds",
			Help:    "Time of repair passes, whole (phase total) and by phase: list (pools and allocations from the allocator), decide, act (releases and deletions).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"phase"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "plexus_repair_findings",
			Help: "Findings of the latest pass that reached a decision, by kind.",
		}, []string{"kind"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_repair_actions_total",
			Help: "Findings by what repair did about them (RELEASED, RELEASE_REFUSED, DELETED, WAITING_STRIKES, ...), summed over the passes that are not dry runs.",
		}, []string{"action"}),
		lastState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "plexus_repair_last_pass_state",
			Help: "1 for the state the latest pass ended in, 0 for the others.",
		}, []string{"state"}),
		lastEnd: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_repair_last_pass_end_time_seconds",
			Help: "When the latest pass ended, in seconds since the epoch.",
		}),
		allocations: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_repair_allocations",
			Help: "Allocations examined by the latest pass that listed them.",
		}),
		unresolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_repair_unresolved_allocations",
			Help: "Allocations of the latest pass whose owner kind or cluster this repair cannot resolve (never judged as leaks).",
		}),
	}
	for _, s := range passStates {
		m.lastState.WithLabelValues(stateName(s))
		for _, dry := range []bool{false, true} {
			m.passes.WithLabelValues(stateName(s), strconv.FormatBool(dry))
		}
	}
	for v := range repairv1.FindingKind_name {
		if k := repairv1.FindingKind(v); k != repairv1.FindingKind_FINDING_KIND_UNSPECIFIED {
			m.findings.WithLabelValues(KindName(k))
		}
	}
	for v := range repairv1.Action_name {
		if a := repairv1.Action(v); a != repairv1.Action_ACTION_UNSPECIFIED {
			m.actions.WithLabelValues(ActionName(a))
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.passes, m.duration, m.findings, m.actions, m.lastState, m.lastEnd, m.allocations, m.unresolved} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, errors.New("pass: repair metrics are already registered on this registry")
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(res *Result) {
	rep := res.Report
	state := stateName(rep.GetState())
	m.passes.WithLabelValues(state, strconv.FormatBool(rep.GetDryRun())).Inc()
	for _, s := range passStates {
		v := 0.0
		if s == rep.GetState() {
			v = 1
		}
		m.lastState.WithLabelValues(stateName(s)).Set(v)
	}
	m.lastEnd.Set(float64(rep.GetEndTime().AsTime().UnixNano()) / 1e9)
	m.duration.WithLabelValues("total").Observe(res.Timings.Total.Seconds())
	m.duration.WithLabelValues("list").Observe(res.Timings.List.Seconds())
	if rep.GetState() == repairv1.PassState_PASS_STATE_FAILED {
		return
	}
	m.duration.WithLabelValues("decide").Observe(res.Timings.Decide.Seconds())
	m.duration.WithLabelValues("act").Observe(res.Timings.Act.Seconds())
	m.allocations.Set(float64(rep.GetAllocations()))
	m.unresolved.Set(float64(rep.GetUnresolved()))
	for v := range repairv1.FindingKind_name {
		if k := repairv1.FindingKind(v); k != repairv1.FindingKind_FINDING_KIND_UNSPECIFIED {
			m.findings.WithLabelValues(KindName(k)).Set(float64(rep.GetFindingsByKind()[KindName(k)]))
		}
	}
	if rep.GetDryRun() {
		// A dry run does nothing: counting its DRY_RUN and WAITING_*
		// findings would count every dry run's look as an action.
		return
	}
	for _, f := range res.Findings {
		m.actions.WithLabelValues(ActionName(f.GetAction())).Inc()
	}
}
