package decide

import "fmt"

// ChargedCluster is the member cluster an allocation counts against for a
// cluster quota: its owner's cluster, or, for an owner of no cluster (a
// clusterset VIP), the cluster whose caller created it (creator; empty for
// a fleet or shared caller, which nothing charges).
func ChargedCluster(o Owner, creator string) string {
	if o.Cluster != "" {
		return o.Cluster
	}
	return creator
}

// CheckClusterQuota decides whether cluster may be charged one more
// address in pool, whose cluster quota is quota (0: none), when it is
// charged held there, committed or being committed (see ChargedCluster).
// Nothing is charged to no cluster.
func CheckClusterQuota(pool string, quota uint32, cluster string, held int) error {
	if quota == 0 || cluster == "" || held < int(quota) {
		return nil
	}
	return fmt.Errorf("cluster %s holds %d allocations in pool %s (with the clusterset VIPs it created), its quota: %w", Clip(cluster), held, pool, ErrClusterQuotaExceeded)
}
