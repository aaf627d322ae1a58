package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// filterStatus answers what the operator reports of a filter, from counters read in time
// proportional to the layers: counting the bits instead, as getFilter does, would read the whole
// bit array while its writers wait, and the operator reads the statuses of every filter of a pod
// at once (filterStatuses).
func (s *Server) filterStatus(c echo.Context) error {
	f, err := s.lookup(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.statusOf(f))
}

// statusOf is what the operator reports of f on this pod.
func (s *Server) statusOf(f *filter.Filter) wire.FilterStatus {
	o, u := f.Options(), f.Usage()
	out := wire.FilterStatus{
		Name:               f.Name(),
		ExpectedInsertions: o.Capacity,
		FPP:                o.FPP,
		Scalable:           o.Scalable,
		Partitions:         o.PartitionCount(),
		PartitionsHeld:     f.HeldPartitions(),
		PartitionsOwned:    o.PartitionCount(),
		Items:              u.Items,
		Layers:             u.Layers,
		SizeBytes:          u.SizeBytes,
		EstimatedFillRatio: u.EstimatedFillRatio,
		EstimatedFPP:       u.EstimatedFPP,
		Owner:              ownerText(o.Owner),
	}
	if s.Writes.Placed() {
		rt := s.Writes.Route(f.Name(), f.Partitions())
		out.PartitionsOwned = 0
		for p := range f.Partitions() {
			if rt.Owns(p) {
				out.PartitionsOwned++
			}
		}
	}
	if o.Scalable {
		out.Growth = o.Growth
	}
	if s.LastSnapshot != nil {
		if at := s.LastSnapshot(); !at.IsZero() {
			out.LastSnapshot = at.UTC().Format(wire.TimeFormat)
		}
	}
	return out
}
