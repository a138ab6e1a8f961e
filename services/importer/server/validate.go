package server

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/endpointrules"
	"github.com/plexusnet/plexus/services/importer/exports"
)

// Limits of a pushed endpoint set.
const (
	maxPorts     = 100
	maxGroups    = 100
	maxEndpoints = 10000
	maxAddresses = 100
	// maxRequestID bounds a request_id, as the allocator does: the
	// importer remembers recent ones.
	maxRequestID = 128
	// maxAffinityTimeout is the longest ClientIP session affinity
	// Kubernetes accepts.
	maxAffinityTimeout = 86400 * time.Second
)

// violations collects field violations.
type violations []apierr.FieldViolation

func (v *violations) add(field, format string, args ...any) {
	*v = append(*v, apierr.FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

func (v violations) err() error {
	if len(v) == 0 {
		return nil
	}
	return apierr.InvalidField(ReasonInvalidArgument, v...)
}

func checkLabel(v *violations, field, s string) {
	if s == "" {
		v.add(field, "required")
		return
	}
	if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
		v.add(field, "%s", strings.Join(msgs, "; "))
	}
}

// parseImportName reads "namespaces/{namespace}/serviceimports/{service}".
func parseImportName(v *violations, field, name string) exports.Key {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "namespaces" || parts[2] != "serviceimports" {
		v.add(field, "must look like namespaces/{namespace}/serviceimports/{service}, got %q", name)
		return exports.Key{}
	}
	key, err := exports.ParseServiceName("namespaces/" + parts[1] + "/services/" + parts[3])
	if err != nil {
		v.add(field, "%s", err.Error())
	}
	return key
}

func parseServiceName(v *violations, field, name string) exports.Key {
	key, err := exports.ParseServiceName(name)
	if err != nil {
		v.add(field, "%s", err.Error())
	}
	return key
}

func checkPort(v *violations, field string, port int32, name string, proto membershipv1.Protocol, appProtocol string) {
	if port < 1 || port > 65535 {
		v.add(field+".port", "must be between 1 and 65535, got %d", port)
	}
	if err := endpointrules.PortName(field+".name", name); err != nil {
		v.addErr(err)
	} else if name != "" {
		// A pushed port's name is an IANA service name, as a named
		// target port must be: a number or a 20-character name would
		// be found out only when the import is written.
		if msgs := validation.IsValidPortName(name); len(msgs) > 0 {
			v.add(field+".name", "%q: %s", bounded(name), strings.Join(msgs, "; "))
		}
	}
	if err := endpointrules.AppProtocol(field+".app_protocol", appProtocol); err != nil {
		v.addErr(err)
	}
	if _, ok := membershipv1.Protocol_name[int32(proto)]; !ok {
		v.add(field+".protocol", "unknown protocol %d", proto)
	}
}

// addErr adds a refusal of the endpoint rules, naming its field.
func (v *violations) addErr(err error) {
	var re *endpointrules.Error
	if errors.As(err, &re) {
		v.add(re.Field, "%s", strings.TrimPrefix(re.Error(), re.Field+" "))
		return
	}
	v.add("endpoints", "%s", err.Error())
}

// checkEndpoint checks one endpoint by the API server's EndpointSlice
// rules, so that a push the importer could not write is refused here and
// not found out when the write fails.
func checkEndpoint(v *violations, field string, ep *membershipv1.Endpoint, v6 bool) {
	if n := len(ep.GetAddresses()); n == 0 || n > maxAddresses {
		v.add(field+".addresses", "between 1 and %d addresses, got %d", maxAddresses, n)
	}
	for k, a := range ep.GetAddresses() {
		if _, err := endpointrules.Address(fmt.Sprintf("%s.addresses[%d]", field, k), a, v6); err != nil {
			v.addErr(err)
		}
	}
	if h := ep.GetHostname(); h != "" {
		if err := endpointrules.Hostname(field+".hostname", h); err != nil {
			v.addErr(err)
		}
	}
	if n := ep.GetNodeName(); n != "" {
		if err := endpointrules.NodeName(field+".node_name", n); err != nil {
			v.addErr(err)
		}
	}
	if err := endpointrules.ZoneHints(field+".hints.for_zones", ep.GetHints().GetForZones()); err != nil {
		v.addErr(err)
	}
}

// Limits of a push's exported labels and annotations: the ServiceImport of
// every member cluster carries them.
const (
	maxExportedLabels = 64
	maxExportedBytes  = 64 << 10
)

// checkExportInfo checks the traffic policy, the traffic distribution and
// the exported labels and annotations the way the API server would check
// them on the ServiceImport.
func checkExportInfo(v *violations, info *membershipv1.ExportInfo) {
	switch info.GetInternalTrafficPolicy() {
	case "", "Cluster", "Local":
	default:
		v.add("endpoints.export.internal_traffic_policy", "must be Cluster, Local or empty, got %q", bounded(info.GetInternalTrafficPolicy()))
	}
	switch info.GetTrafficDistribution() {
	case "", "PreferClose", "PreferSameZone", "PreferSameNode":
	default:
		v.add("endpoints.export.traffic_distribution", "must be PreferClose, PreferSameZone, PreferSameNode or empty, got %q", bounded(info.GetTrafficDistribution()))
	}
	size := 0
	for k, val := range info.GetExportedLabels() {
		size += len(k) + len(val)
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(val)...); len(msgs) > 0 {
			v.add("endpoints.export.exported_labels["+bounded(k)+"]", "%s", strings.Join(msgs, "; "))
		}
	}
	for k, val := range info.GetExportedAnnotations() {
		size += len(k) + len(val)
		if msgs := validation.IsQualifiedName(strings.ToLower(k)); len(msgs) > 0 {
			v.add("endpoints.export.exported_annotations["+bounded(k)+"]", "%s", strings.Join(msgs, "; "))
		}
	}
	if n := len(info.GetExportedLabels()) + len(info.GetExportedAnnotations()); n > maxExportedLabels || size > maxExportedBytes {
		v.add("endpoints.export", "at most %d exported labels and annotations of %d bytes in all, got %d of %d bytes", maxExportedLabels, maxExportedBytes, n, size)
	}
}

// checkAffinity checks a session affinity timeout, when one is given: from
// a second to a day, as Kubernetes accepts.
func checkAffinity(v *violations, info *membershipv1.ExportInfo) {
	t := info.GetSessionAffinityTimeout()
	if t == nil {
		return
	}
	if err := t.CheckValid(); err != nil {
		v.add("endpoints.export.session_affinity_timeout", "%s", err.Error())
		return
	}
	if d := t.AsDuration(); d < time.Second || d > maxAffinityTimeout {
		v.add("endpoints.export.session_affinity_timeout", "must be from 1s to %s, got %s", maxAffinityTimeout, d)
	}
}

// bounded cuts a client's text to a short prefix for an error message.
func bounded(s string) string {
	if len(s) <= 128 {
		return s
	}
	return s[:128] + "..."
}

// validateApply checks a push the way the importer would otherwise find out
// only when the API server refuses its writes.
func (s *Server) validateApply(req *importerv1.ApplyImportRequest) error {
	var v violations
	eps := req.GetEndpoints()
	if eps == nil {
		v.add("endpoints", "required")
		return v.err()
	}
	if n := len(req.GetRequestId()); n > maxRequestID {
		v.add("request_id", "at most %d characters, got %d", maxRequestID, n)
	}
	checkAffinity(&v, eps.GetExport())
	parseServiceName(&v, "endpoints.service", eps.GetService())
	checkLabel(&v, "endpoints.cluster", eps.GetCluster())
	if c := eps.GetCluster(); c != "" && s.cfg.Store.IsSource(c) {
		v.add("endpoints.cluster", "%s is a configured source; its exports come from its stream", c)
	}
	if !eps.GetExport().GetExported() {
		v.add("endpoints.export.exported", "must be true; use WithdrawImport to stop exporting")
	}
	if t := eps.GetExport().GetType(); t != membershipv1.ServiceType_SERVICE_TYPE_UNSPECIFIED &&
		t != membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP && t != membershipv1.ServiceType_SERVICE_TYPE_HEADLESS {
		v.add("endpoints.export.type", "unknown type %d", t)
	}
	checkExportInfo(&v, eps.GetExport())
	if sa := eps.GetExport().GetSessionAffinity(); membershipv1.SessionAffinity_name[int32(sa)] == "" {
		v.add("endpoints.export.session_affinity", "unknown session affinity %d", sa)
	}
	if len(eps.GetPorts()) > maxPorts {
		v.add("endpoints.ports", "at most %d ports", maxPorts)
	}
	for i, p := range eps.GetPorts() {
		checkPort(&v, fmt.Sprintf("endpoints.ports[%d]", i), p.GetPort(), p.GetName(), p.GetProtocol(), p.GetAppProtocol())
	}
	if len(eps.GetGroups()) > maxGroups {
		v.add("endpoints.groups", "at most %d groups", maxGroups)
	}
	total := 0
	for i, g := range eps.GetGroups() {
		field := fmt.Sprintf("endpoints.groups[%d]", i)
		v6 := false
		switch g.GetAddressType() {
		case membershipv1.AddressType_ADDRESS_TYPE_IPV4:
		case membershipv1.AddressType_ADDRESS_TYPE_IPV6:
			v6 = true
		default:
			v.add(field+".address_type", "must be IPv4 or IPv6")
		}
		if len(g.GetPorts()) > maxPorts {
			v.add(field+".ports", "at most %d ports", maxPorts)
		}
		names := make([]string, len(g.GetPorts()))
		for j, p := range g.GetPorts() {
			checkPort(&v, fmt.Sprintf("%s.ports[%d]", field, j), p.GetPort(), p.GetName(), p.GetProtocol(), p.GetAppProtocol())
			names[j] = p.GetName()
		}
		if err := endpointrules.PortNames(field+".ports", names); err != nil {
			v.addErr(err)
		}
		total += len(g.GetEndpoints())
		for j, ep := range g.GetEndpoints() {
			checkEndpoint(&v, fmt.Sprintf("%s.endpoints[%d]", field, j), ep, v6)
			if len(v) > 20 {
				v.add("endpoints", "more errors left out")
				return v.err()
			}
		}
	}
	if total > maxEndpoints {
		v.add("endpoints.groups", "at most %d endpoints, got %d", maxEndpoints, total)
	}
	return v.err()
}
