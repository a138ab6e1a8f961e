package materialize

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
)

// VIPs is the clusterset VIPs an import carries, and where they stand.
type VIPs struct {
	// IPs are the VIPs, IPv4 first; empty for a headless import or while
	// none are known.
	IPs []string
	// FromAllocator is true when the VIPs come from the allocator's pools
	// (and are pinned as the derived Service's cluster IPs).
	FromAllocator bool
	// Err is why the allocator gave none (FromAllocator only); the import
	// waits for them.
	Err error
	// Kept is set when the allocator failed but the ServiceImport already
	// carries VIPs, which are kept: allocations are idempotent per owner,
	// so they are the ones the allocator would answer with.
	Kept error
}

// ChooseVIPs returns the VIPs of a materialised import. With VIP pools
// (pools true) they are the allocator's answer (allocated, or allocErr),
// falling back to the ServiceImport's own when the allocator failed.
// Without pools they are the derived Service's own cluster IPs.
func ChooseVIPs(v View, d Decision, pools bool, allocated []string, allocErr error) VIPs {
	if !d.ClusterSetIP() {
		return VIPs{FromAllocator: pools}
	}
	if pools {
		switch {
		case allocErr == nil:
			return VIPs{IPs: SortVIPs(allocated), FromAllocator: true}
		case v.Import != nil && len(v.Import.Spec.IPs) > 0:
			return VIPs{IPs: slices.Clone(v.Import.Spec.IPs), FromAllocator: true, Kept: allocErr}
		}
		return VIPs{FromAllocator: true, Err: allocErr}
	}
	if v.Derived != nil && mcsnames.Managed(v.Derived.Labels) && v.Derived.Spec.ClusterIP != corev1.ClusterIPNone {
		return VIPs{IPs: slices.DeleteFunc(slices.Clone(v.Derived.Spec.ClusterIPs), func(ip string) bool { return ip == corev1.ClusterIPNone })}
	}
	if v.Import != nil {
		return VIPs{IPs: slices.Clone(v.Import.Spec.IPs)}
	}
	return VIPs{}
}

// importSpec returns the spec the decision asks for.
func importSpec(d Decision, vips []string) mcsv1beta1.ServiceImportSpec {
	ports := d.Merged.Ports
	if ports == nil {
		ports = []mcsv1beta1.ServicePort{}
	}
	spec := mcsv1beta1.ServiceImportSpec{
		Ports: ports, Type: d.Merged.Type, SessionAffinity: d.Merged.SessionAffinity,
		SessionAffinityConfig: d.Merged.SessionAffinityConfig.DeepCopy(),
		InternalTrafficPolicy: d.Merged.InternalTrafficPolicy, TrafficDistribution: d.Merged.TrafficDistribution,
	}
	switch {
	case len(vips) > 0:
		spec.IPs, spec.IPFamilies = slices.Clone(vips), Families(vips)
	case d.Merged.Type == mcsv1beta1.Headless:
		// A headless import has no VIPs; its families are the exports'.
		spec.IPFamilies = slices.Clone(d.Merged.IPFamilies)
	}
	return spec
}

// Import returns the ServiceImport to write: a new one when the view has
// none, the current one with the spec the decision asks for when that
// differs, or nil when the current one already says it. Fields the
// importer does not set are kept.
func Import(v View, d Decision, vips VIPs) *mcsv1beta1.ServiceImport {
	spec := importSpec(d, vips.IPs)
	labels, annotations := importMetadata(d)
	if v.Import == nil {
		return &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, Labels: labels, Annotations: annotations},
			Spec:       spec,
		}
	}
	if equality.Semantic.DeepEqual(v.Import.Spec, spec) && maps.Equal(v.Import.Labels, labels) && maps.Equal(v.Import.Annotations, annotations) {
		return nil
	}
	upd := v.Import.DeepCopy()
	upd.Spec, upd.Labels, upd.Annotations = spec, labels, annotations
	return upd
}

// importMetadata returns the ServiceImport's labels and annotations: the
// exported ones (KEP-1645: only those the ServiceExport names, the oldest
// export's when they differ) and the importer's managed-by label, which an
// exported label cannot replace.
func importMetadata(d Decision) (labels, annotations map[string]string) {
	labels = maps.Clone(d.Merged.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[mcsnames.LabelAppManagedBy] = mcsnames.ManagedBy
	if len(d.Merged.Annotations) > 0 {
		annotations = maps.Clone(d.Merged.Annotations)
	}
	return labels, annotations
}

// DerivedOp is the write the derived Service needs.
type DerivedOp int

// Derived Service writes.
const (
	DerivedNone DerivedOp = iota
	DerivedCreate
	DerivedUpdate
	// DerivedReplace deletes the current Service and creates the wanted
	// one: a change between headless and not, which cluster IPs being
	// immutable cannot express in an update.
	DerivedReplace
	// DerivedForeign: a Service of the derived name exists and is not
	// the importer's; the import cannot be materialised.
	DerivedForeign
)

// Derived returns the write the derived Service needs and the object to
// write (for DerivedUpdate the current Service brought up to date; for
// create and replace a new one). imp is the ServiceImport as written, whose
// uid the derived Service names as its owner.
func Derived(v View, d Decision, imp *mcsv1beta1.ServiceImport, vips VIPs) (DerivedOp, *corev1.Service) {
	want := derivedService(v, d, imp, vips)
	cur := v.Derived
	switch {
	case cur == nil:
		return DerivedCreate, want
	case !mcsnames.Managed(cur.Labels):
		return DerivedForeign, nil
	case (cur.Spec.ClusterIP == corev1.ClusterIPNone) != (d.Merged.Type == mcsv1beta1.Headless):
		return DerivedReplace, want
	}
	same := portsKey(cur.Spec.Ports) == portsKey(want.Spec.Ports) &&
		cur.Spec.SessionAffinity == want.Spec.SessionAffinity &&
		equality.Semantic.DeepEqual(cur.Spec.SessionAffinityConfig, want.Spec.SessionAffinityConfig) &&
		sameTraffic(cur.Spec, want.Spec) &&
		len(cur.Spec.Selector) == 0 && cur.Spec.Type == corev1.ServiceTypeClusterIP &&
		equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences)
	for k, val := range want.Labels {
		same = same && cur.Labels[k] == val
	}
	if same {
		return DerivedNone, cur
	}
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	upd.OwnerReferences = want.OwnerReferences
	upd.Spec.Ports, upd.Spec.Selector, upd.Spec.Type = want.Spec.Ports, nil, corev1.ServiceTypeClusterIP
	upd.Spec.SessionAffinity, upd.Spec.SessionAffinityConfig = want.Spec.SessionAffinity, want.Spec.SessionAffinityConfig
	if want.Spec.InternalTrafficPolicy != nil {
		// Unset, the API server defaults it to Cluster: keep that.
		upd.Spec.InternalTrafficPolicy = want.Spec.InternalTrafficPolicy
	} else {
		cluster := corev1.ServiceInternalTrafficPolicyCluster
		upd.Spec.InternalTrafficPolicy = &cluster
	}
	upd.Spec.TrafficDistribution = want.Spec.TrafficDistribution
	return DerivedUpdate, upd
}

// sameTraffic reports whether a Service's traffic policy and distribution
// are the wanted ones; an unset policy is Cluster, as the API server
// defaults it.
func sameTraffic(cur, want corev1.ServiceSpec) bool {
	policy := func(p *corev1.ServiceInternalTrafficPolicy) corev1.ServiceInternalTrafficPolicy {
		if p == nil {
			return corev1.ServiceInternalTrafficPolicyCluster
		}
		return *p
	}
	dist := func(d *string) string {
		if d == nil {
			return ""
		}
		return *d
	}
	return policy(cur.InternalTrafficPolicy) == policy(want.InternalTrafficPolicy) && dist(cur.TrafficDistribution) == dist(want.TrafficDistribution)
}

// derivedService returns the derived Service the import asks for.
func derivedService(v View, d Decision, imp *mcsv1beta1.ServiceImport, vips VIPs) *corev1.Service {
	controller := true
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: v.Namespace,
			Name:      v.DerivedName(),
			Labels:    map[string]string{mcsnames.LabelAppManagedBy: mcsnames.ManagedBy, mcsnames.LabelDerivedFrom: v.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: imp.Name, UID: imp.UID, Controller: &controller,
			}},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			Ports:                 servicePorts(d.Merged.Ports),
			SessionAffinity:       d.Merged.SessionAffinity,
			SessionAffinityConfig: d.Merged.SessionAffinityConfig.DeepCopy(),
			// kube-proxy honours them on the derived Service as on any.
			InternalTrafficPolicy: d.Merged.InternalTrafficPolicy,
			TrafficDistribution:   d.Merged.TrafficDistribution,
		},
	}
	switch {
	case d.Merged.Type == mcsv1beta1.Headless:
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case len(vips.IPs) > 0 && vips.FromAllocator:
		// kube-proxy programs the clusterset VIP as the derived Service's
		// cluster IP, so every member cluster reaches the service at the
		// same address.
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = vips.IPs[0], slices.Clone(vips.IPs)
		svc.Spec.IPFamilies = Families(vips.IPs)
		policy := corev1.IPFamilyPolicySingleStack
		if len(vips.IPs) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
	}
	return svc
}

// PinsVIPs reports whether svc asks the API server for given cluster IPs.
func PinsVIPs(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.ClusterIPs) > 0
}

// WithoutVIPs returns svc asking for cluster IPs of the cluster's own: what
// the runner creates when the API server refuses the VIPs (outside its
// service ranges, or a family it does not serve), so the import still works
// and the Ready condition says why.
func WithoutVIPs(svc *corev1.Service) *corev1.Service {
	out := svc.DeepCopy()
	out.Spec.ClusterIP, out.Spec.ClusterIPs, out.Spec.IPFamilies, out.Spec.IPFamilyPolicy = "", nil, nil, nil
	return out
}

// servicePorts returns the derived Service's ports: the merged ports with
// the target port spelled out, as the API server would default it.
func servicePorts(ports []mcsv1beta1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(ports))
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		out = append(out, corev1.ServicePort{Name: p.Name, Protocol: proto, Port: p.Port, AppProtocol: p.AppProtocol, TargetPort: intstr.FromInt32(p.Port)})
	}
	return out
}

// portsKey is equal for two Service port lists that mean the same.
func portsKey(ports []corev1.ServicePort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		app := ""
		if p.AppProtocol != nil {
			app = *p.AppProtocol
		}
		keys[i] = p.Name + "/" + string(proto) + "/" + strconv.Itoa(int(p.Port)) + "/" + app
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// Families returns the IP families of addrs, in order.
func Families(addrs []string) []corev1.IPFamily {
	out := make([]corev1.IPFamily, 0, len(addrs))
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() {
			out = append(out, corev1.IPv6Protocol)
		} else {
			out = append(out, corev1.IPv4Protocol)
		}
	}
	return out
}

// SortVIPs puts IPv4 first, as Kubernetes lists a dual-stack Service's IPs
// in its primary family's order and IPv4 is the common primary.
func SortVIPs(addrs []string) []string {
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b string) int {
		fa, fb := Families([]string{a})[0], Families([]string{b})[0]
		switch {
		case fa == fb:
			return 0
		case fa == corev1.IPv4Protocol:
			return -1
		}
		return 1
	})
	return out
}
