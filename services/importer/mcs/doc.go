// Package mcs merges the exports of one service from several clusters into
// the spec of one ServiceImport, following the conflict rules of the
// Multi-Cluster Services API (KEP-1645, sigs.k8s.io/mcs-api v1beta1).
//
// Merge is a pure function; the importer's Kubernetes adapter writes its
// result as the ServiceImport spec, the derived Service and a Conflict
// condition.
//
// # Precedence
//
// A property that cannot simply be merged takes the value of the export with
// the oldest ServiceExport creation time. Equal times are ordered by cluster
// name, so every importer computes the same result from the same exports. An
// export whose creation time is unknown (zero) ranks after every export with a
// known time: an unknown age must not win a conflict.
//
// # Ports
//
// The import carries the union of the exported ports. Following the KEP,
// ports merge first by name, then by the (protocol, port) pair; protocol
// defaults to TCP. Processing exports from oldest to newest, a port:
//   - is the same port when name, protocol, number and appProtocol all equal
//     a port already taken, and merges with it;
//   - conflicts when its name is taken by a different port (for example the
//     same name with another protocol or number), or when its (protocol,
//     port) pair is taken under another name, because a Service may hold
//     neither duplicated names nor duplicated (protocol, port) pairs;
//   - conflicts when it would leave an unnamed port beside another port,
//     because a Service with more than one port must name all of them;
//   - is added otherwise. The same number with another protocol under
//     another name (dns 53/UDP beside dns-tcp 53/TCP) is not a conflict.
//
// A conflicting port is left out; the older port stays. Conflicts are
// reported per property with the reasons of mcs-api (PortConflict,
// TypeConflict, SessionAffinityConflict, SessionAffinityConfigConflict,
// InternalTrafficPolicyConflict, TrafficDistributionConflict,
// LabelsConflict, AnnotationsConflict, IPFamilyConflict) and the clusters
// involved, the winning cluster first.
//
// # IP families
//
// The import's families are its clusterset VIPs'. When clusters export
// Services of different IP families (one IPv4, another dual-stack),
// traffic of a family reaches only the clusters that export it, so the
// merge reports IPFamilyConflict; an export whose families are unknown
// takes no part.
//
// # Session affinity
//
// An unset affinity means None; ClientIP without a timeout means the
// Kubernetes default of 10800 seconds, so exports that say the same thing in
// different words do not conflict. Session affinity is ignored for headless
// imports (as the ServiceImport API documents), so a headless import carries
// None and reports no affinity conflict.
package mcs
