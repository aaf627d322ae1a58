package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// describePlaced describes a filter whose partitions a placed membership spreads over the pods:
// each partition is described by a reader of it (this pod first when it is one), asked for
// several partitions at once, and the answers are summed. A request a peer routed here with
// ?partitions= describes those, which this pod must hold.
func (s *Server) describePlaced(c echo.Context, f *filter.Filter) (wire.Filter, error) {
	if forwarded(c) {
		only, err := dumpPartitions(c, f.Partitions())
		if err != nil {
			return wire.Filter{}, err
		}
		for p := range f.Partitions() {
			if only(p) && !f.Holds(p) {
				return wire.Filter{}, &writes.NotHomeError{Reason: fmt.Sprintf("this pod does not hold partition %d of %q", p, f.Name())}
			}
		}
		return s.describe(f.InfoOf(only)), nil
	}
	rt := s.Writes.Route(f.Name(), f.Partitions())
	// Partitions grouped by the readers that describe them, in the order to ask them.
	groups := map[string][]int{}
	var order []string
	for p := range f.Partitions() {
		key := strings.Join(rt.ReadOrder(p), ",")
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], p)
	}
	out := s.describe(f.InfoOf(func(int) bool { return false }))
	var fill, fpp float64
	for _, key := range order {
		parts := groups[key]
		part, err := s.describeOn(c, f, rt.Self(), strings.Split(key, ","), parts, rt.Member)
		if err != nil {
			return wire.Filter{}, err
		}
		out.Items += part.Items
		out.Bits += part.Bits
		out.SizeBytes += part.SizeBytes
		out.Layers = max(out.Layers, part.Layers)
		out.Hashes = max(out.Hashes, part.Hashes)
		fill += part.FillRatio * float64(part.Bits)
		fpp += part.EstimatedFPP * float64(len(parts))
	}
	if out.Bits > 0 {
		out.FillRatio = probability(fill / float64(out.Bits))
	}
	out.EstimatedFPP = probability(fpp / float64(f.Partitions()))
	return out, nil
}

// describeNew describes a filter just created, empty: all of it, whichever partitions this pod
// holds, from its options.
func (s *Server) describeNew(f *filter.Filter) wire.Filter {
	out := s.describe(f.Info())
	if shape, err := f.Options().LayerShape(0); err == nil {
		out.Bits, out.SizeBytes = uint64(shape.Bits)*uint64(f.Partitions()), shape.SizeBytes()*uint64(f.Partitions())
		out.Hashes, out.Layers = shape.Hashes, 1
	}
	return out
}

// describeOn describes the partitions parts of f on the first of servers that answers.
func (s *Server) describeOn(c echo.Context, f *filter.Filter, self string, servers []string, parts []int, member func(name string) wire.Member) (wire.Filter, error) {
	list := make([]string, len(parts))
	for i, p := range parts {
		list[i] = strconv.Itoa(p)
	}
	only := func(p int) bool { return slices.Contains(parts, p) }
	var failures []string
	for _, server := range servers {
		if server == self {
			if slices.ContainsFunc(parts, func(p int) bool { return !f.Holds(p) }) {
				failures = append(failures, self+" does not hold them")
				continue
			}
			return s.describe(f.InfoOf(only)), nil
		}
		uri := wire.FilterPath(f.Name()) + "?" + wire.PartitionsParam + "=" + strings.Join(list, ",")
		a, err := s.Node.Forward(c.Request().Context(), member(server), http.MethodGet, uri, "", nil)
		if err != nil {
			failures = append(failures, err.Error())
			continue
		}
		if err := a.Err(); err != nil {
			return wire.Filter{}, fmt.Errorf("describing partitions %s of %q on %s: %w", strings.Join(list, ","), f.Name(), server, err)
		}
		var part wire.Filter
		if err := json.Unmarshal(a.Body, &part); err != nil {
			return wire.Filter{}, fmt.Errorf("describing partitions %s of %q on %s: %w", strings.Join(list, ","), f.Name(), server, err)
		}
		return part, nil
	}
	return wire.Filter{}, &writes.NotHomeError{Reason: fmt.Sprintf("no pod holding partitions %s of %q answered: %s", strings.Join(list, ","), f.Name(), strings.Join(failures, "; "))}
}
