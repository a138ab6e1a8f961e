package mcs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Properties named in a Conflict.
const (
	PropertyPorts                 = "ports"
	PropertyType                  = "type"
	PropertySessionAffinity       = "sessionAffinity"
	PropertySessionAffinityConfig = "sessionAffinityConfig"
	PropertyInternalTrafficPolicy = "internalTrafficPolicy"
	PropertyTrafficDistribution   = "trafficDistribution"
	PropertyLabels                = "exportedLabels"
	PropertyAnnotations           = "exportedAnnotations"
	PropertyIPFamilies            = "ipFamilies"
)

// Reasons of a Conflict, as mcs-api names them for the Conflict condition.
const (
	ReasonPortConflict                  = string(mcsv1beta1.ServiceExportReasonPortConflict)
	ReasonTypeConflict                  = string(mcsv1beta1.ServiceExportReasonTypeConflict)
	ReasonSessionAffinityConflict       = string(mcsv1beta1.ServiceExportReasonSessionAffinityConflict)
	ReasonSessionAffinityConfigConflict = string(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict)
	ReasonInternalTrafficPolicyConflict = string(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict)
	ReasonTrafficDistributionConflict   = string(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict)
	ReasonLabelsConflict                = string(mcsv1beta1.ServiceExportReasonLabelsConflict)
	ReasonAnnotationsConflict           = string(mcsv1beta1.ServiceExportReasonAnnotationsConflict)
	ReasonIPFamilyConflict              = string(mcsv1beta1.ServiceExportReasonIPFamilyConflict)
	// ReasonNoConflicts is the reason of a False Conflict condition.
	ReasonNoConflicts = string(mcsv1beta1.ServiceExportReasonNoConflicts)
)

// Errors returned by Merge, wrapped with the offending export.
var (
	ErrNoExports              = errors.New("no cluster exports the service")
	ErrNoCluster              = errors.New("export has no cluster name")
	ErrDuplicateCluster       = errors.New("cluster exports the service twice")
	ErrInvalidType            = errors.New("type must be ClusterSetIP or Headless")
	ErrInvalidSessionAffinity = errors.New("session affinity must be None or ClientIP")
	ErrInvalidPort            = errors.New("invalid port")
	ErrInvalidAffinityTimeout = errors.New("session affinity timeout must be between 1 and 86400 seconds")
	ErrInvalidTrafficPolicy   = errors.New("internal traffic policy must be Cluster or Local")
)

// maxClientIPAffinitySeconds is the API server's limit for the ClientIP
// affinity timeout.
const maxClientIPAffinitySeconds int32 = 86400

// Export is what one source cluster exports for the service.
type Export struct {
	// Cluster is the source cluster's name.
	Cluster string
	// Created is the ServiceExport's creation time; zero when unknown.
	Created time.Time
	// Type is ClusterSetIP or Headless.
	Type mcsv1beta1.ServiceImportType
	// Ports are the exported Service's ports.
	Ports []mcsv1beta1.ServicePort
	// SessionAffinity is None, ClientIP or empty (None).
	SessionAffinity corev1.ServiceAffinity
	// SessionAffinityConfig holds the ClientIP timeout, if any.
	SessionAffinityConfig *corev1.SessionAffinityConfig
	// InternalTrafficPolicy and TrafficDistribution are the Service's
	// (empty: unset).
	InternalTrafficPolicy string
	TrafficDistribution   string
	// Labels and Annotations are the ServiceExport's exportedLabels and
	// exportedAnnotations.
	Labels, Annotations map[string]string
	// IPFamilies are the exported Service's IP families; empty when
	// unknown, which conflicts with nothing.
	IPFamilies []corev1.IPFamily
}

// Conflict is one property on which exports disagree.
type Conflict struct {
	// Property is one of the Property constants.
	Property string
	// Reason is one of the Reason constants (UpperCamelCase).
	Reason string
	// Clusters are the clusters involved: the winner(s) first, then the
	// others, each list in precedence order.
	Clusters []string
	// Message says what differed and which value was kept.
	Message string
}

// Result is the merged import.
type Result struct {
	// Type of the import, from the oldest export when they differ.
	Type mcsv1beta1.ServiceImportType
	// Ports is the union of the exported ports, sorted by port, protocol,
	// name.
	Ports []mcsv1beta1.ServicePort
	// SessionAffinity is None or ClientIP; None for headless imports.
	SessionAffinity corev1.ServiceAffinity
	// SessionAffinityConfig is set exactly when SessionAffinity is ClientIP,
	// always with its timeout.
	SessionAffinityConfig *corev1.SessionAffinityConfig
	// InternalTrafficPolicy and TrafficDistribution are the oldest
	// export's; nil when it sets none.
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy
	TrafficDistribution   *string
	// Labels and Annotations are the oldest export's exported labels and
	// annotations, which the ServiceImport carries.
	Labels, Annotations map[string]string
	// IPFamilies are the families of the oldest export that names any:
	// what a headless import, which has no VIPs to take them from,
	// reports as its own.
	IPFamilies []corev1.IPFamily
	// Clusters are the exporting clusters sorted by name, for
	// status.clusters.
	Clusters []string
	// Precedence is the exporting clusters from oldest export to newest.
	Precedence []string
	// Conflicts lists the disagreements, in the order ports, type,
	// internal traffic policy, traffic distribution, exported labels,
	// exported annotations, IP families, session affinity, session
	// affinity config;
	// empty when there are none.
	Conflicts []Conflict
}

// ConflictReason returns the reason for the Conflict condition: the
// conflict reasons joined by commas, as mcs-api suggests, or NoConflicts.
func (r Result) ConflictReason() string {
	if len(r.Conflicts) == 0 {
		return ReasonNoConflicts
	}
	reasons := make([]string, len(r.Conflicts))
	for i, c := range r.Conflicts {
		reasons[i] = c.Reason
	}
	return strings.Join(reasons, ",")
}

// ConflictMessage returns the message for the Conflict condition.
func (r Result) ConflictMessage() string {
	msgs := make([]string, len(r.Conflicts))
	for i, c := range r.Conflicts {
		msgs[i] = c.Message
	}
	return strings.Join(msgs, "; ")
}

// Merge merges the exports of one service. The result does not depend on the
// order of exports.
func Merge(exports []Export) (Result, error) {
	if len(exports) == 0 {
		return Result{}, ErrNoExports
	}
	ordered, err := normalize(exports)
	if err != nil {
		return Result{}, err
	}
	sort.Slice(ordered, func(i, j int) bool { return precedes(&ordered[i], &ordered[j]) })

	var r Result
	for i := range ordered {
		r.Precedence = append(r.Precedence, ordered[i].Cluster)
	}
	r.Clusters = append([]string(nil), r.Precedence...)
	sort.Strings(r.Clusters)

	var conflict *Conflict
	r.Ports, conflict = mergePorts(ordered)
	if conflict != nil {
		r.Conflicts = append(r.Conflicts, *conflict)
	}

	oldest := &ordered[0]
	r.Type = oldest.Type
	if c := disagreement(ordered, PropertyType, ReasonTypeConflict, func(e *Export) string { return string(e.Type) }); c != nil {
		r.Conflicts = append(r.Conflicts, *c)
	}
	r.mergeMetadata(ordered)

	if r.Type == mcsv1beta1.Headless {
		r.SessionAffinity = corev1.ServiceAffinityNone
		return r, nil
	}
	r.SessionAffinity = oldest.SessionAffinity
	r.SessionAffinityConfig = oldest.SessionAffinityConfig.DeepCopy()
	if c := disagreement(ordered, PropertySessionAffinity, ReasonSessionAffinityConflict, func(e *Export) string { return string(e.SessionAffinity) }); c != nil {
		r.Conflicts = append(r.Conflicts, *c)
		return r, nil
	}
	// Timeouts only compare between exports that all use ClientIP; when the
	// affinities differ, the affinity conflict already covers it.
	if r.SessionAffinity == corev1.ServiceAffinityClientIP {
		if c := disagreement(ordered, PropertySessionAffinityConfig, ReasonSessionAffinityConfigConflict, func(e *Export) string {
			return fmt.Sprintf("timeout %ds", *e.SessionAffinityConfig.ClientIP.TimeoutSeconds)
		}); c != nil {
			r.Conflicts = append(r.Conflicts, *c)
		}
	}
	return r, nil
}

// mergeMetadata takes the traffic policies and the exported labels and
// annotations from the oldest export and reports the exports that differ.
func (r *Result) mergeMetadata(ordered []Export) {
	oldest := &ordered[0]
	if v := oldest.InternalTrafficPolicy; v != "" {
		p := corev1.ServiceInternalTrafficPolicy(v)
		r.InternalTrafficPolicy = &p
	}
	if v := oldest.TrafficDistribution; v != "" {
		r.TrafficDistribution = &v
	}
	r.Labels, r.Annotations = maps.Clone(oldest.Labels), maps.Clone(oldest.Annotations)
	for i := range ordered {
		if len(ordered[i].IPFamilies) > 0 {
			r.IPFamilies = slices.Clone(ordered[i].IPFamilies)
			break
		}
	}
	for _, d := range []struct {
		property, reason string
		value            func(*Export) string
	}{
		{PropertyInternalTrafficPolicy, ReasonInternalTrafficPolicyConflict, func(e *Export) string { return orUnset(e.InternalTrafficPolicy) }},
		{PropertyTrafficDistribution, ReasonTrafficDistributionConflict, func(e *Export) string { return orUnset(e.TrafficDistribution) }},
		{PropertyLabels, ReasonLabelsConflict, func(e *Export) string { return mapText(e.Labels) }},
		{PropertyAnnotations, ReasonAnnotationsConflict, func(e *Export) string { return mapText(e.Annotations) }},
	} {
		if c := disagreement(ordered, d.property, d.reason, d.value); c != nil {
			r.Conflicts = append(r.Conflicts, *c)
		}
	}
	if c := familyConflict(ordered); c != nil {
		r.Conflicts = append(r.Conflicts, *c)
	}
}

// familyConflict reports exports whose IP families differ: traffic of a
// family then reaches only the clusters that export it. The import's own
// families are its VIPs', so nothing is "kept"; exports of unknown
// families take no part.
func familyConflict(ordered []Export) *Conflict {
	var known []Export
	for _, e := range ordered {
		if len(e.IPFamilies) > 0 {
			known = append(known, e)
		}
	}
	if len(known) < 2 {
		return nil
	}
	c := disagreement(known, PropertyIPFamilies, ReasonIPFamilyConflict, func(e *Export) string { return familyText(e.IPFamilies) })
	if c == nil {
		return nil
	}
	parts := make([]string, len(known))
	for i := range known {
		parts[i] = known[i].Cluster + " " + familyText(known[i].IPFamilies)
	}
	c.Message = PropertyIPFamilies + " differ (" + strings.Join(parts, ", ") +
		"): traffic of a family reaches only the clusters that export it"
	return c
}

// familyText renders a set of IP families in a stable order.
func familyText(fs []corev1.IPFamily) string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		if !slices.Contains(out, string(f)) {
			out = append(out, string(f))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "+")
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

// mapText renders a map in a stable order, "{}" when empty.
func mapText(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// precedes orders exports oldest first, unknown times last, then by name.
func precedes(a, b *Export) bool {
	az, bz := a.Created.IsZero(), b.Created.IsZero()
	switch {
	case az != bz:
		return bz
	case !a.Created.Equal(b.Created):
		return a.Created.Before(b.Created)
	default:
		return a.Cluster < b.Cluster
	}
}

// normalize validates the exports and returns copies with defaults spelled
// out, so that equal meaning compares equal.
func normalize(exports []Export) ([]Export, error) {
	seen := make(map[string]bool, len(exports))
	out := make([]Export, len(exports))
	for i, e := range exports {
		if e.Cluster == "" {
			return nil, fmt.Errorf("export %d: %w", i, ErrNoCluster)
		}
		if seen[e.Cluster] {
			return nil, fmt.Errorf("cluster %s: %w", e.Cluster, ErrDuplicateCluster)
		}
		seen[e.Cluster] = true
		if e.Type != mcsv1beta1.ClusterSetIP && e.Type != mcsv1beta1.Headless {
			return nil, fmt.Errorf("cluster %s: type %q: %w", e.Cluster, e.Type, ErrInvalidType)
		}
		n := Export{Cluster: e.Cluster, Created: e.Created, Type: e.Type, TrafficDistribution: e.TrafficDistribution,
			Labels: e.Labels, Annotations: e.Annotations, IPFamilies: e.IPFamilies}
		switch p := corev1.ServiceInternalTrafficPolicy(e.InternalTrafficPolicy); p {
		case "", corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal:
			n.InternalTrafficPolicy = string(p)
		default:
			return nil, fmt.Errorf("cluster %s: internal traffic policy %q: %w", e.Cluster, p, ErrInvalidTrafficPolicy)
		}
		for j, p := range e.Ports {
			p := *p.DeepCopy()
			if p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
			switch p.Protocol {
			case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			default:
				return nil, fmt.Errorf("cluster %s: port %d: protocol %q: %w", e.Cluster, j, p.Protocol, ErrInvalidPort)
			}
			if p.Port < 1 || p.Port > 65535 {
				return nil, fmt.Errorf("cluster %s: port %d: number %d: %w", e.Cluster, j, p.Port, ErrInvalidPort)
			}
			if p.AppProtocol != nil && *p.AppProtocol == "" {
				p.AppProtocol = nil
			}
			n.Ports = append(n.Ports, p)
		}
		switch e.SessionAffinity {
		case "", corev1.ServiceAffinityNone:
			n.SessionAffinity = corev1.ServiceAffinityNone
		case corev1.ServiceAffinityClientIP:
			n.SessionAffinity = corev1.ServiceAffinityClientIP
			timeout := corev1.DefaultClientIPServiceAffinitySeconds
			if c := e.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
				timeout = *c.ClientIP.TimeoutSeconds
			}
			if timeout < 1 || timeout > maxClientIPAffinitySeconds {
				return nil, fmt.Errorf("cluster %s: %d: %w", e.Cluster, timeout, ErrInvalidAffinityTimeout)
			}
			n.SessionAffinityConfig = &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout},
			}
		default:
			return nil, fmt.Errorf("cluster %s: %q: %w", e.Cluster, e.SessionAffinity, ErrInvalidSessionAffinity)
		}
		out[i] = n
	}
	return out, nil
}

// disagreement reports a conflict when any export's value differs from the
// oldest export's.
func disagreement(ordered []Export, property, reason string, value func(*Export) string) *Conflict {
	win := value(&ordered[0])
	var losers []string
	byValue := map[string][]string{}
	var values []string
	for i := 1; i < len(ordered); i++ {
		v := value(&ordered[i])
		if v == win {
			continue
		}
		losers = append(losers, ordered[i].Cluster)
		if _, ok := byValue[v]; !ok {
			values = append(values, v)
		}
		byValue[v] = append(byValue[v], ordered[i].Cluster)
	}
	if len(losers) == 0 {
		return nil
	}
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = fmt.Sprintf("%s from %s", v, strings.Join(byValue[v], ", "))
	}
	return &Conflict{
		Property: property,
		Reason:   reason,
		Clusters: append([]string{ordered[0].Cluster}, losers...),
		Message: fmt.Sprintf("%s %s from %s (oldest export) conflicts with %s; using %s",
			property, win, ordered[0].Cluster, strings.Join(parts, ", "), win),
	}
}

type protoPort struct {
	protocol corev1.Protocol
	port     int32
}

// mergePorts builds the union of ports in precedence order and reports the
// ports it had to leave out.
func mergePorts(ordered []Export) ([]mcsv1beta1.ServicePort, *Conflict) {
	var (
		merged   []mcsv1beta1.ServicePort
		owner    []int // index into ordered of the export that contributed merged[i]
		byName   = map[string]int{}
		byPair   = map[protoPort]int{}
		involved = map[int]bool{}
		winners  = map[int]bool{}
		msgs     []string
	)
	lose := func(loser, winner int, p mcsv1beta1.ServicePort, why string) {
		involved[loser] = true
		if winner >= 0 {
			winners[winner] = true
		}
		msgs = append(msgs, fmt.Sprintf("port %s from %s %s", describe(p), ordered[loser].Cluster, why))
	}
	for ei := range ordered {
		for _, p := range ordered[ei].Ports {
			if i, ok := byName[p.Name]; ok {
				if !samePort(merged[i], p) {
					lose(ei, owner[i], p, fmt.Sprintf("conflicts with %s from %s", describe(merged[i]), ordered[owner[i]].Cluster))
				}
				continue
			}
			pair := protoPort{p.Protocol, p.Port}
			if i, ok := byPair[pair]; ok {
				lose(ei, owner[i], p, fmt.Sprintf("conflicts with %s from %s", describe(merged[i]), ordered[owner[i]].Cluster))
				continue
			}
			if len(merged) > 0 && (p.Name == "" || hasUnnamed(merged)) {
				// Report against the unnamed port that blocks it.
				blocker := 0
				for i := range merged {
					if merged[i].Name == "" {
						blocker = i
					}
				}
				lose(ei, owner[blocker], p, fmt.Sprintf("cannot join %s from %s: a Service with several ports must name them all",
					describe(merged[blocker]), ordered[owner[blocker]].Cluster))
				continue
			}
			byName[p.Name] = len(merged)
			byPair[pair] = len(merged)
			merged = append(merged, p)
			owner = append(owner, ei)
		}
	}
	sort.Slice(merged, func(i, j int) bool {
		a, b := merged[i], merged[j]
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		if a.Protocol != b.Protocol {
			return a.Protocol < b.Protocol
		}
		return a.Name < b.Name
	})
	if len(msgs) == 0 {
		return merged, differentSets(ordered, merged)
	}
	var clusters []string
	for i := range ordered {
		if winners[i] && !involved[i] {
			clusters = append(clusters, ordered[i].Cluster)
		}
	}
	for i := range ordered {
		if involved[i] {
			clusters = append(clusters, ordered[i].Cluster)
		}
	}
	return merged, &Conflict{
		Property: PropertyPorts,
		Reason:   ReasonPortConflict,
		Clusters: clusters,
		Message:  strings.Join(msgs, "; ") + "; the older ports are kept",
	}
}

// differentSets reports a conflict when the exports' port sets differ
// although none clashes: the import carries their union, so a client of the
// clusterset may reach a port that some clusters do not serve, which the
// MCS API (and its conformance suite) wants raised as a PortConflict.
func differentSets(ordered []Export, union []mcsv1beta1.ServicePort) *Conflict {
	want := portSet(union)
	var clusters, msgs []string
	for i := range ordered {
		if portSet(ordered[i].Ports) != want {
			clusters = append(clusters, ordered[i].Cluster)
			msgs = append(msgs, fmt.Sprintf("%s exports %d of the %d ports", ordered[i].Cluster, len(ordered[i].Ports), len(union)))
		}
	}
	if len(clusters) == 0 {
		return nil
	}
	if clusters[0] != ordered[0].Cluster {
		clusters = append([]string{ordered[0].Cluster}, clusters...)
	}
	return &Conflict{
		Property: PropertyPorts,
		Reason:   ReasonPortConflict,
		Clusters: clusters,
		Message:  "the clusters export different port sets (" + strings.Join(msgs, "; ") + "); the import carries their union",
	}
}

// portSet is equal for two port lists of the same ports in any order.
func portSet(ports []mcsv1beta1.ServicePort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		keys[i] = describe(p)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func hasUnnamed(ports []mcsv1beta1.ServicePort) bool {
	for _, p := range ports {
		if p.Name == "" {
			return true
		}
	}
	return false
}

func samePort(a, b mcsv1beta1.ServicePort) bool {
	if a.Name != b.Name || a.Protocol != b.Protocol || a.Port != b.Port {
		return false
	}
	if a.AppProtocol == nil || b.AppProtocol == nil {
		return a.AppProtocol == b.AppProtocol
	}
	return *a.AppProtocol == *b.AppProtocol
}

func describe(p mcsv1beta1.ServicePort) string {
	s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
	if p.AppProtocol != nil {
		s += " (" + *p.AppProtocol + ")"
	}
	if p.Name == "" {
		return "unnamed " + s
	}
	return fmt.Sprintf("%q %s", p.Name, s)
}
