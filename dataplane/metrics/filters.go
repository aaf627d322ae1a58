package metrics

import (
	"container/heap"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// filterCollector reads the store at scrape time. The request path only bumps each filter's own
// atomic counters (in the engine); nothing here runs per request, and no lock is shared by all
// filters.
type filterCollector struct {
	store       *filter.Store
	maxLabelled int
	now         func() time.Time

	filters, unlabelled, items, bytes, bytesLimit, filterBytesLimit *prometheus.Desc
	checked, set                                                    *prometheus.Desc

	perItems, perBytes, perLayers, perFill, perChecked, perSet *prometheus.Desc
	perFPP, perTargetFPP, perCapacity, perScalable             *prometheus.Desc

	// last are the totals reported last, so that they never go down; see Collect.
	mu                   sync.Mutex
	lastChecked, lastSet uint64
}

func newFilterCollector(store *filter.Store, maxLabelled int) *filterCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	perFilter := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc(name("filter_"+n), help+" Only for the first filters by name, up to metricsMaxLabelledFilters.", []string{"filter"}, nil)
	}
	return &filterCollector{
		store:       store,
		maxLabelled: max(maxLabelled, 0),
		now:         time.Now,

		filters:          prometheus.NewDesc(name("filters"), "Live filters.", nil, nil),
		unlabelled:       prometheus.NewDesc(name("filters_unlabelled"), "Live filters beyond metricsMaxLabelledFilters, which have no bloomery_filter_* series of their own.", nil, nil),
		items:            prometheus.NewDesc(name("filters_items"), "Keys in all live filters (approximate: a key is counted when no layer held it).", nil, nil),
		bytes:            prometheus.NewDesc(name("filters_bytes"), "Memory maxTotalBytes counts: the bit arrays of all filters and 1 KiB each beside, expired ones not yet purged included.", nil, nil),
		bytesLimit:       prometheus.NewDesc(name("filters_bytes_limit"), "maxTotalBytes: the most all filters together may hold. Absent when unlimited.", nil, nil),
		filterBytesLimit: prometheus.NewDesc(name("filter_bytes_limit"), "maxFilterBytes: the most one filter may hold. Absent when unlimited.", nil, nil),
		checked:          prometheus.NewDesc(name("filters_checked_keys_total"), "Keys tested by check and multi-check, on all filters, deleted ones included.", nil, nil),
		set:              prometheus.NewDesc(name("filters_set_keys_total"), "Keys written by set, multi-set, check-and-set and multi-check-and-set, on all filters, deleted ones included.", nil, nil),

		perItems:   perFilter("items", "Keys in the filter (approximate)."),
		perBytes:   perFilter("bytes", "Memory of the filter's bit arrays."),
		perLayers:  perFilter("layers", "Layers of the filter; a scalable filter adds one when the newest is full."),
		perFill:    perFilter("fill_ratio", "Estimated share of the filter's bits that are set, from the keys each layer took."),
		perChecked: perFilter("checked_keys_total", "Keys tested by check and multi-check on the filter."),
		perSet:     perFilter("set_keys_total", "Keys written to the filter by set, multi-set, check-and-set and multi-check-and-set."),

		perFPP:       perFilter("estimated_fpp", "Estimated false positive probability of the filter, from the keys each layer took."),
		perTargetFPP: perFilter("target_fpp", "False positive probability the filter was created for (fpp)."),
		perCapacity:  perFilter("capacity", "Keys the filter was created for (capacity): a fixed filter's rate rises past it, a scalable one adds layers."),
		perScalable:  perFilter("scalable", "1 for a scalable filter, 0 for a fixed one."),
	}
}

// Describe implements prometheus.Collector.
func (c *filterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.filters, c.unlabelled, c.items, c.bytes, c.bytesLimit, c.filterBytesLimit, c.checked, c.set,
		c.perItems, c.perBytes, c.perLayers, c.perFill, c.perChecked, c.perSet,
		c.perFPP, c.perTargetFPP, c.perCapacity, c.perScalable,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It ranges over every filter once, reading atomics, and
// takes each labelled filter's read lock once, for its layer count.
func (c *filterCollector) Collect(ch chan<- prometheus.Metric) {
	// Retired first: a filter leaves the map before its counts are retired, so none is counted
	// twice (see Store.Retired).
	checked, set := c.store.Retired()
	now := c.now()
	var live, items uint64
	labelled := &byName{}
	c.store.Range(func(f *filter.Filter) bool {
		fc, fs := f.Traffic()
		checked, set = checked+fc, set+fs
		if f.Expired(now) {
			return true // its memory still counts, in UsedBytes; its keys answer 404
		}
		live++
		items += f.Items()
		labelled.offer(f, c.maxLabelled)
		return true
	})
	// A filter that leaves the store while the range runs is in neither the range nor the retired
	// counts read before it; the totals dip for one scrape. Reporting the largest seen keeps them
	// monotonic, as counters must be, at the cost of lagging by that filter for one scrape.
	c.mu.Lock()
	c.lastChecked, c.lastSet = max(c.lastChecked, checked), max(c.lastSet, set)
	checked, set = c.lastChecked, c.lastSet
	c.mu.Unlock()

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(c.filters, float64(live))
	gauge(c.unlabelled, float64(live-uint64(labelled.Len())))
	gauge(c.items, float64(items))
	gauge(c.bytes, float64(c.store.UsedBytes()))
	if limits := c.store.Limits(); limits.TotalBytes > 0 {
		gauge(c.bytesLimit, float64(limits.TotalBytes))
	}
	if limits := c.store.Limits(); limits.FilterBytes > 0 {
		gauge(c.filterBytesLimit, float64(limits.FilterBytes))
	}
	counter(c.checked, float64(checked))
	counter(c.set, float64(set))
	for _, f := range *labelled {
		u, name, opts := f.Usage(), f.Name(), f.Options()
		gauge(c.perItems, float64(u.Items), name)
		gauge(c.perBytes, float64(u.SizeBytes), name)
		gauge(c.perLayers, float64(u.Layers), name)
		gauge(c.perFill, u.EstimatedFillRatio, name)
		counter(c.perChecked, float64(u.Checked), name)
		counter(c.perSet, float64(u.Set), name)
		gauge(c.perFPP, u.EstimatedFPP, name)
		gauge(c.perTargetFPP, opts.FPP, name)
		gauge(c.perCapacity, float64(opts.Capacity), name)
		scalable := 0.0
		if opts.Scalable {
			scalable = 1
		}
		gauge(c.perScalable, scalable, name)
	}
}

// byName keeps the first filters by name: a max-heap of at most the cap, so choosing them costs
// O(n log cap) for n filters rather than sorting all n. First by name, rather than say the
// largest, so that the same filters keep their series from scrape to scrape, and every replica
// labels the same ones.
type byName []*filter.Filter

func (h byName) Len() int           { return len(h) }
func (h byName) Less(i, j int) bool { return h[i].Name() > h[j].Name() }
func (h byName) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byName) Push(x any)        { *h = append(*h, x.(*filter.Filter)) }
func (h *byName) Pop() any {
	old := *h
	f := old[len(old)-1]
	*h = old[:len(old)-1]
	return f
}

// offer keeps f if it is among the first limit names seen so far.
func (h *byName) offer(f *filter.Filter, limit int) {
	switch {
	case limit == 0:
	case h.Len() < limit:
		heap.Push(h, f)
	case f.Name() < (*h)[0].Name():
		(*h)[0] = f
		heap.Fix(h, 0)
	}
}
