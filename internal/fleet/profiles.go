package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
	inventoryv1alpha1 "github.com/plexusnet/plexus/api/inventory/v1alpha1"
)

// FromProfile reads the member a ClusterProfile describes. It returns
// false and why when the profile is not a member Plexus follows: not
// joined (its Joined condition is False), of another clusterset than
// clusterSet (when both are known), without a membership address, or
// with invalid values. The member's name is the profile's
// cluster.clusterset.k8s.io property, else its metadata name.
func FromProfile(p *inventoryv1alpha1.ClusterProfile, clusterSet string) (Member, string, bool) {
	if c := meta.FindStatusCondition(p.Status.Conditions, inventoryv1alpha1.ConditionJoined); c != nil && c.Status == "False" {
		return Member{}, "its Joined condition is False", false
	}
	if set, ok := p.Property(aboutv1alpha1.ClusterSetProperty); ok && clusterSet != "" && set != clusterSet {
		return Member{}, fmt.Sprintf("it belongs to clusterset %q, not %q", clip(set), clusterSet), false
	}
	addr, ok := p.Property(inventoryv1alpha1.PropertyMembershipAddress)
	if !ok {
		return Member{}, "it has no " + inventoryv1alpha1.PropertyMembershipAddress + " property", false
	}
	m := Member{Name: p.Name, Addr: addr}
	m.ClusterSet, _ = p.Property(aboutv1alpha1.ClusterSetProperty)
	if id, ok := p.Property(aboutv1alpha1.ClusterIDProperty); ok {
		m.Name = id
	}
	m.ServerName, _ = p.Property(inventoryv1alpha1.PropertyMembershipServerName)
	if ranges, ok := p.Property(inventoryv1alpha1.PropertyMembershipRanges); ok {
		for _, r := range strings.Split(ranges, ",") {
			if r = strings.TrimSpace(r); r != "" {
				m.Ranges = append(m.Ranges, r)
			}
		}
	}
	if err := m.Validate(); err != nil {
		return Member{}, "invalid: " + err.Error(), false
	}
	return m, "", true
}

// Skipped is a profile that names no member, and why.
type Skipped struct {
	// Profile is namespace/name.
	Profile string
	Reason  string
}

// FromProfiles reads the members of a set of profiles. Two profiles that
// name the same cluster: the first by namespace/name wins, the other is
// skipped. At most MaxMembers; the rest are skipped.
func FromProfiles(profiles []*inventoryv1alpha1.ClusterProfile, clusterSet string) ([]Member, []Skipped) {
	sorted := slices.Clone(profiles)
	slices.SortFunc(sorted, func(a, b *inventoryv1alpha1.ClusterProfile) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var members []Member
	var skipped []Skipped
	byName := map[string]string{}
	for _, p := range sorted {
		key := p.Namespace + "/" + p.Name
		m, why, ok := FromProfile(p, clusterSet)
		switch {
		case !ok:
			skipped = append(skipped, Skipped{key, why})
		case byName[m.Name] != "":
			skipped = append(skipped, Skipped{key, fmt.Sprintf("cluster %q is already named by %s", m.Name, byName[m.Name])})
		case len(members) >= MaxMembers:
			skipped = append(skipped, Skipped{key, fmt.Sprintf("more than %d members", MaxMembers)})
		default:
			byName[m.Name] = key
			members = append(members, m)
		}
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return members, skipped
}

// Profiles is the inventory of the ClusterProfiles in one namespace of an
// inventory cluster, followed through an informer.
type Profiles struct {
	client     dynamic.Interface
	namespace  string
	clusterSet string
	logger     *slog.Logger
}

// NewProfiles returns the inventory of the ClusterProfiles in namespace,
// keeping those of clusterSet (any, when empty).
func NewProfiles(client dynamic.Interface, namespace, clusterSet string, logger *slog.Logger) *Profiles {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Profiles{client: client, namespace: namespace, clusterSet: clusterSet,
		logger: logger.With("inventory_namespace", namespace)}
}

// Describe implements Inventory.
func (p *Profiles) Describe() string { return "ClusterProfiles in namespace " + p.namespace }

// Run reports the members whenever a profile changes. The first report
// waits for the informer's first list; until then the set is unknown, not
// empty.
func (p *Profiles) Run(ctx context.Context, update func([]Member)) error {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(p.client, 0, p.namespace, nil)
	inf := factory.ForResource(inventoryv1alpha1.ClusterProfilesResource).Informer()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	reasons := map[string]string{}
	for {
		profiles := p.list(inf.GetStore().List())
		members, skipped := FromProfiles(profiles, p.clusterSet)
		p.report(skipped, reasons)
		update(members)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		// Changes often come in bursts (a manager writing the spec, then
		// the status): take them as one.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// list converts the informer's objects.
func (p *Profiles) list(objs []any) []*inventoryv1alpha1.ClusterProfile {
	out := make([]*inventoryv1alpha1.ClusterProfile, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var cp inventoryv1alpha1.ClusterProfile
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cp); err != nil {
			p.logger.Warn("ClusterProfile not understood", "profile", u.GetNamespace()+"/"+u.GetName(), "error", err)
			continue
		}
		out = append(out, &cp)
	}
	return out
}

// report logs the profiles skipped, each once per reason: a profile of a
// cluster that runs no membership is normal (info), a clash or an invalid
// value is not (warning).
func (p *Profiles) report(skipped []Skipped, reasons map[string]string) {
	now := map[string]bool{}
	for _, s := range skipped {
		now[s.Profile] = true
		if reasons[s.Profile] == s.Reason {
			continue
		}
		reasons[s.Profile] = s.Reason
		if strings.HasPrefix(s.Reason, "invalid") || strings.Contains(s.Reason, "already named") {
			p.logger.Warn("ClusterProfile skipped", "profile", s.Profile, "reason", s.Reason)
		} else {
			p.logger.Info("ClusterProfile skipped", "profile", s.Profile, "reason", s.Reason)
		}
	}
	for k := range reasons {
		if !now[k] {
			delete(reasons, k)
		}
	}
}
