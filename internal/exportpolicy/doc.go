// Package exportpolicy decides, from the clusterset's ClusterSetPolicy
// (group policy.plexus.dev), whether a member cluster may export the
// services of a namespace and whether a member cluster imports them. It is
// a pure core: Parse turns the object as the API server stores it into a
// Policy, and the Policy's methods answer; nothing here talks to a server.
//
// Both sides ask: membership, before it publishes an export of its own
// cluster (a refused export gets Valid=False, reason ExportNotPermitted,
// on its ServiceExport and is not streamed), and the importer, before it
// writes anything of a namespace into its cluster (outside the import set
// it writes nothing, and what it wrote goes), and again for every source
// cluster's export, so that a membership whose copy of the policy is older
// or missing cannot place what the importer's copy refuses.
//
// Without a policy (a nil *Policy) every cluster may export and every
// cluster imports, as before the policy existed. A policy that does not
// parse refuses everything and says why in every refusal: a mistaken
// policy must not open what it was meant to close.
package exportpolicy
