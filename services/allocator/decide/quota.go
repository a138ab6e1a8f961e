package decide

import "fmt"

// CheckClusterQuota decides whether an owner of o's cluster may take one
// more address in pool, whose cluster quota is quota (0: none), when that
// cluster holds held there, committed or being committed. Owners of no
// cluster (clusterset VIPs) are not counted.
func CheckClusterQuota(pool string, quota uint32, o Owner, held int) error {
	if quota == 0 || o.Cluster == "" || held < int(quota) {
		return nil
	}
	return fmt.Errorf("cluster %s holds %d allocations in pool %s, its quota: %w", Clip(o.Cluster), held, pool, ErrClusterQuotaExceeded)
}
