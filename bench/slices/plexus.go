package slices

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	packing "github.com/plexusnet/plexus/services/importer/slices"
)

// Plexus is Plexus's packing core with the writes of a thin adapter.
type Plexus struct {
	store  *store
	packer *packing.Packer
	tmpl   packing.Template
	ports  []discovery.EndpointPort
}

// NewPlexus returns Plexus's packing core writing to a fake clientset.
func NewPlexus(maxEndpointsPerSlice int) (*Plexus, error) {
	packer, err := packing.New(packing.WithMaxEndpointsPerSlice(maxEndpointsPerSlice))
	if err != nil {
		return nil, fmt.Errorf("new packer: %w", err)
	}
	name, proto, port := "http", corev1.ProtocolTCP, int32(targetPort)
	return &Plexus{
		store:  newStore(),
		packer: packer,
		tmpl: packing.Template{
			Namespace:    namespace,
			GenerateName: serviceName + "-",
			Labels: map[string]string{
				discovery.LabelServiceName: serviceName,
				discovery.LabelManagedBy:   packing.ManagedBy,
			},
		},
		ports: []discovery.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}, nil
}

// Reconcile implements Reconciler.
func (x *Plexus) Reconcile(pods []Pod) error {
	existing, err := x.store.list()
	if err != nil {
		return err
	}
	eps := make([]discovery.Endpoint, len(pods))
	for i, p := range pods {
		eps[i] = endpoint(p)
	}
	plan, err := x.packer.Plan(x.tmpl, []packing.Group{{AddressType: discovery.AddressTypeIPv4, Ports: x.ports, Endpoints: eps}}, existing)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	api := x.store.client.DiscoveryV1().EndpointSlices(namespace)
	ctx := context.Background()
	for _, s := range plan.Create {
		if _, err := api.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create slice: %w", err)
		}
	}
	for _, s := range plan.Update {
		if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update slice %s: %w", s.Name, err)
		}
	}
	for _, s := range plan.Delete {
		if err := api.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete slice %s: %w", s.Name, err)
		}
	}
	x.store.count()
	return nil
}

// Writes implements Reconciler.
func (x *Plexus) Writes() (int, int, int) { return x.store.creates, x.store.updates, x.store.deletes }

// SliceSizes implements Reconciler.
func (x *Plexus) SliceSizes() ([]int, []string, error) { return x.store.sizes() }

// Placement implements Reconciler.
func (x *Plexus) Placement() (map[string]string, int, error) { return x.store.placement() }
