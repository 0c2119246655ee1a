package gitmirror

import (
	"container/list"
	"sync"
)

// lru is a small least-recently-used cache, bounded by entries and by a cost the caller
// estimates (bytes, roughly). It is safe for concurrent use.
type lru[V any] struct {
	maxEntries int
	maxCost    int64
	cost       func(V) int64 // nil: every entry costs 0

	mu    sync.Mutex
	order *list.List // of *lruEntry[V], most recently used first
	byKey map[string]*list.Element
	total int64
}

type lruEntry[V any] struct {
	key  string
	val  V
	cost int64
}

func newLRU[V any](maxEntries int, maxCost int64, cost func(V) int64) *lru[V] {
	return &lru[V]{maxEntries: maxEntries, maxCost: maxCost, cost: cost, order: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the value under key and marks it used.
func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[V]).val, true
	}
	var zero V
	return zero, false
}

// add stores val under key, evicting the least recently used entries past the bounds. A value
// costing more than the whole bound is not kept.
func (c *lru[V]) add(key string, val V) {
	var cost int64
	if c.cost != nil {
		cost = c.cost(val)
	}
	if c.maxCost > 0 && cost > c.maxCost {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.total -= e.Value.(*lruEntry[V]).cost
		c.order.Remove(e)
	}
	c.byKey[key] = c.order.PushFront(&lruEntry[V]{key: key, val: val, cost: cost})
	c.total += cost
	for c.order.Len() > c.maxEntries || c.maxCost > 0 && c.total > c.maxCost {
		old := c.order.Remove(c.order.Back()).(*lruEntry[V])
		delete(c.byKey, old.key)
		c.total -= old.cost
	}
}
