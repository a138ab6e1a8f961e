// Package fleet finds the member clusters whose memberships the importer
// and repair follow, and keeps one follower per member running while the
// set changes, without restarts.
//
// An Inventory reports the whole set of members whenever it changes. Three
// are built in, one per way a fleet is run:
//
//   - Static: the repeatable --source NAME=ADDR flag, fixed for the
//     process's life;
//   - File: a YAML file (--sources-file), re-read when it changes, the way a
//     mounted ConfigMap or Secret is updated in place; no hub needed;
//   - Profiles: ClusterProfile objects (multicluster.x-k8s.io, KEP-4322)
//     in a namespace of an inventory cluster (--inventory-namespace,
//     --inventory-kubeconfig), each carrying the member's membership
//     address in its status properties.
//
// A Group turns the changes into work: it dials a member that joins and
// starts its follower, reconnects one whose address or TLS identity
// changed (the follower's successor resumes where it stopped), and stops
// one that left. What a member left behind (the importer's imports of its
// exports) is removed only once the grace has passed without the member
// coming back, so a profile deleted and recreated by a cluster manager,
// or a file rewritten in two steps, disturbs nothing.
package fleet
