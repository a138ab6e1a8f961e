package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
)

// addressIndex indexes Pods and ExternalWorkloads by the addresses they
// use, so a registration can be refused an address another holds.
const addressIndex = "address"

// podAddresses are the addresses a Pod holds: none for a host-network Pod
// (it shares its node's) or a Pod that ended (its address may be reused).
func podAddresses(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		out = append(out, p.Status.PodIP)
	}
	return out, nil
}

func workloadAddresses(obj any) ([]string, error) {
	if w, ok := obj.(*workloadv1alpha1.ExternalWorkload); ok {
		return w.Spec.WorkloadIPs, nil
	}
	return nil, nil
}

// AddressHolders returns who uses addr in the cluster as the caches show
// it, as "Pod namespace/name" or "ExternalWorkload namespace/name".
func (c *Controller) AddressHolders(addr string) []string {
	var out []string
	for _, inf := range []struct {
		kind string
		inf  cache.SharedIndexInformer
	}{{"Pod", c.podInf}, {workloadv1alpha1.KindExternalWorkload, c.workloadInf}} {
		objs, err := inf.inf.GetIndexer().ByIndex(addressIndex, addr)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
				out = append(out, inf.kind+" "+key)
			}
		}
	}
	return out
}
