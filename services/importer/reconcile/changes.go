package reconcile

import (
	"sync"
	"time"

	"github.com/plexusnet/plexus/services/importer/exports"
)

// maxLinks bounds the trace contexts kept for one service's next
// reconcile: a burst of changes links to its first few, which is enough to
// follow it in a trace viewer.
const maxLinks = 8

// pending is what the next reconcile of one service must account for.
type pending struct {
	// since maps each cluster with a change not yet written to the oldest
	// observation time among its changes: the export-to-import latency
	// is measured from it, and a withdrawal in it is that cluster's last
	// word about the service.
	since map[string]time.Time
	// links are the trace contexts of those changes, oldest first, at most
	// maxLinks.
	links []map[string]string
}

func (p *pending) note(cluster string, observed time.Time, link map[string]string) {
	if p.since == nil {
		p.since = map[string]time.Time{}
	}
	if old, ok := p.since[cluster]; !ok || observed.Before(old) {
		p.since[cluster] = observed
	}
	if len(link) > 0 && len(p.links) < maxLinks {
		p.links = append(p.links, link)
	}
}

// merge adds o to p: the older time per cluster, links up to the bound.
func (p *pending) merge(o pending) {
	for c, t := range o.since {
		p.note(c, t, nil)
	}
	for _, l := range o.links {
		if len(p.links) >= maxLinks {
			break
		}
		p.links = append(p.links, l)
	}
}

// changes holds, per service, the changes its next reconcile must account
// for. It is safe for concurrent use.
type changes struct {
	mu    sync.Mutex
	byKey map[exports.Key]*pending
}

// note records one change of the exports store.
func (c *changes) note(ch exports.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[exports.Key]*pending{}
	}
	p := c.byKey[ch.Key]
	if p == nil {
		p = &pending{}
		c.byKey[ch.Key] = p
	}
	p.note(ch.Cluster, ch.Observed, ch.TraceContext)
}

// take returns and clears what is pending for a service.
func (c *changes) take(key exports.Key) pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.byKey[key]
	if p == nil {
		return pending{}
	}
	delete(c.byKey, key)
	return *p
}

// restore gives back what a reconcile took and did not write, merged with
// whatever arrived in the meantime.
func (c *changes) restore(key exports.Key, p pending) {
	if len(p.since) == 0 && len(p.links) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[exports.Key]*pending{}
	}
	cur := c.byKey[key]
	if cur == nil {
		cur = &pending{}
		c.byKey[key] = cur
	}
	cur.merge(p)
}

// reset forgets everything pending: a leadership term ended, and the next
// one reconciles every service from what it then reads.
func (c *changes) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byKey = nil
}

// len is how many services have something pending.
func (c *changes) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}
