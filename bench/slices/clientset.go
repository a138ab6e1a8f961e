package slices

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	namespace   = "bench"
	serviceName = "web"
	targetPort  = 8080
)

// store is a fake clientset that names created slices as the API server
// completes generateName, and counts EndpointSlice writes.
type store struct {
	client                    *fake.Clientset
	generated                 int
	creates, updates, deletes int
}

func newStore() *store {
	s := &store{client: fake.NewSimpleClientset()}
	s.client.PrependReactor("create", "endpointslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(*discovery.EndpointSlice)
		if obj.Name == "" && obj.GenerateName != "" {
			s.generated++
			obj.Name = obj.GenerateName + strconv.Itoa(s.generated)
		}
		// Not handled: the default reactor stores the now named object.
		return false, nil, nil
	})
	return s
}

// count adds the writes recorded since the last call.
func (s *store) count() {
	for _, a := range s.client.Actions() {
		if a.GetResource().Resource != "endpointslices" {
			continue
		}
		switch a.GetVerb() {
		case "create":
			s.creates++
		case "update":
			s.updates++
		case "delete":
			s.deletes++
		}
	}
	s.client.ClearActions()
}

func (s *store) list() ([]*discovery.EndpointSlice, error) {
	l, err := s.client.DiscoveryV1().EndpointSlices(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list slices: %w", err)
	}
	out := make([]*discovery.EndpointSlice, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

func (s *store) sizes() ([]int, []string, error) {
	ss, err := s.list()
	if err != nil {
		return nil, nil, err
	}
	s.client.ClearActions()
	var sizes []int
	var eps []string
	for _, sl := range ss {
		sizes = append(sizes, len(sl.Endpoints))
		for _, e := range sl.Endpoints {
			eps = append(eps, fmt.Sprintf("%v/%v", e.Addresses, *e.Conditions.Ready))
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	sort.Strings(eps)
	return sizes, eps, nil
}

func (s *store) placement() (map[string]string, int, error) {
	ss, err := s.list()
	if err != nil {
		return nil, 0, err
	}
	s.client.ClearActions()
	at := make(map[string]string)
	for _, sl := range ss {
		for _, e := range sl.Endpoints {
			for _, a := range e.Addresses {
				at[a] = sl.Name
			}
		}
	}
	return at, len(ss), nil
}

func nodeName(i int) string { return "node-" + strconv.Itoa(i) }
func zoneName(i int) string { return "zone-" + strconv.Itoa(i%3) }

// endpoint is the endpoint the Kubernetes reconciler makes of a pod, so both
// implementations are asked for the same content.
func endpoint(p Pod) discovery.Endpoint {
	ready, serving, terminating := p.Ready, p.Ready, false
	node, zone := nodeName(p.Node), zoneName(p.Node)
	return discovery.Endpoint{
		Addresses:  []string{p.IP},
		Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: p.Name, UID: podUID(p)},
		NodeName:   &node,
		Zone:       &zone,
	}
}
