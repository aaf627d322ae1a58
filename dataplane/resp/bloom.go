package resp

import (
	"context"
	"math"
	"strconv"
	"strings"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// bloomCommands are RedisBloom's Bloom filter commands, with its syntax, replies and error texts.
var bloomCommands = map[string]command{
	"bf.reserve": {arity: -4, filters: true, run: reserve},
	"bf.add":     {arity: 3, filters: true, run: bfAdd},
	"bf.madd":    {arity: -3, filters: true, run: bfMAdd},
	"bf.insert":  {arity: -4, filters: true, run: insert},
	"bf.exists":  {arity: 3, filters: true, run: bfExists},
	"bf.mexists": {arity: -3, filters: true, run: bfMExists},
	"bf.info":    {arity: -2, filters: true, run: info},
	"bf.card":    {arity: 2, filters: true, run: card},
}

// RedisBloom's error texts, as its module answers them (the trailing space of the error rate's
// is RedisBloom's too).
const (
	errItemExists     = replyError("ERR item exists")
	errNotFound       = replyError("ERR not found")
	errFull           = replyError("ERR non scaling filter is full")
	errBadErrorRate   = replyError("ERR bad error rate")
	errErrorRateRange = replyError("ERR (0 < error rate range < 1) ")
	errBadCapacity    = replyError("ERR bad capacity")
	errCapacityRange  = replyError("ERR (capacity should be larger than 0)")
	errBadExpansion   = replyError("ERR bad expansion")
	errNoExpansion    = replyError("ERR no expansion")
	errNonScalingGrow = replyError("Nonscaling filters cannot expand")
	errBadInfoField   = replyError("ERR Invalid information value")
)

// maxCapacity is the HTTP API's bound too: far beyond any memory limit, and exact in a float.
const maxCapacity = 1 << 53

// defaults are the options of a filter that BF.ADD, BF.MADD or BF.INSERT creates: the
// configuration's, as for a create over HTTP that gives none, in RedisBloom's layout, so that
// its dumps load into RedisBloom and RedisBloom's into it.
func (s *Server) defaults() filter.Options {
	cfg := s.opts.Config
	return filter.Options{
		Capacity:         cfg.DefaultExpectedInsertions,
		FPP:              cfg.DefaultFPP,
		Scalable:         true,
		Growth:           filter.DefaultGrowth,
		Tightening:       filter.DefaultTightening,
		ValidAfterCreate: cfg.DefaultValidAfterCreate,
		Layout:           filter.LayoutRedisBloom,
	}
}

// BF.RESERVE key error_rate capacity [EXPANSION expansion] [NONSCALING]
func reserve(ctx context.Context, s *Server, c *call) error {
	if len(c.args) > 7 {
		return wrongArity("bf.reserve")
	}
	opts := s.defaults()
	var err error
	if opts.FPP, err = parseErrorRate(c.arg(2), errBadErrorRate); err != nil {
		return err
	}
	if opts.Capacity, err = parseCapacity(c.arg(3), errBadCapacity); err != nil {
		return err
	}
	expansion := ""
	for i := 4; i < len(c.args); i++ {
		switch strings.ToUpper(c.arg(i)) {
		case "NONSCALING":
			opts.Scalable = false
		case "EXPANSION":
			if i+1 == len(c.args) {
				return errNoExpansion
			}
			i++
			expansion = c.arg(i)
		default:
			return replyError("ERR unknown argument received")
		}
	}
	if expansion != "" {
		if !opts.Scalable {
			return errNonScalingGrow
		}
		if opts.Growth, err = parseExpansion(expansion, errBadExpansion); err != nil {
			return err
		}
	}
	created, err := s.create(ctx, c.arg(1), opts)
	if err != nil {
		return err
	}
	if !created {
		return errItemExists
	}
	c.w.WriteString("OK")
	return nil
}

// BF.ADD key item
func bfAdd(ctx context.Context, s *Server, c *call) error {
	opts := s.defaults()
	answers, full, err := s.add(ctx, c.arg(1), &opts, []string{c.arg(2)})
	switch {
	case err != nil:
		return err
	case full:
		return errFull
	}
	c.w.WriteInt64(added(answers[0]))
	return nil
}

// BF.MADD key item [item ...]
func bfMAdd(ctx context.Context, s *Server, c *call) error {
	opts := s.defaults()
	return s.addAndReply(ctx, c, c.arg(1), &opts, c.args[2:])
}

// BF.INSERT key [CAPACITY capacity] [ERROR error] [EXPANSION expansion] [NOCREATE] [NONSCALING]
// ITEMS item [item ...]
func insert(ctx context.Context, s *Server, c *call) error {
	opts := s.defaults()
	create := &opts
	var err error
	i := 2
	for ; i < len(c.args); i++ {
		keyword := strings.ToUpper(c.arg(i))
		if keyword == "ITEMS" {
			break
		}
		switch keyword {
		case "NOCREATE":
			create = nil
			continue
		case "NONSCALING":
			opts.Scalable = false
			continue
		case "CAPACITY", "ERROR", "EXPANSION":
		default:
			return replyError("Unknown argument received")
		}
		if i+1 == len(c.args) {
			return wrongArity("bf.insert")
		}
		i++
		switch keyword {
		case "CAPACITY":
			opts.Capacity, err = parseCapacity(c.arg(i), replyError("Bad capacity"))
		case "ERROR":
			opts.FPP, err = parseErrorRate(c.arg(i), replyError("Bad error rate"))
		case "EXPANSION":
			opts.Growth, err = parseExpansion(c.arg(i), replyError("Bad expansion"))
		}
		if err != nil {
			return err
		}
	}
	if i+1 >= len(c.args) { // no ITEMS, or nothing after it
		return wrongArity("bf.insert")
	}
	return s.addAndReply(ctx, c, c.arg(1), create, c.args[i+1:])
}

// addAndReply adds items and answers RedisBloom's array: 1 for an item newly added, 0 for one
// that may have been there, and, when a non-scaling filter fills up, its error in place of the
// first item that did not fit, after which nothing more is added.
func (s *Server) addAndReply(ctx context.Context, c *call, name string, create *filter.Options, args [][]byte) error {
	items := make([]string, len(args))
	for i, a := range args {
		items[i] = string(a)
	}
	answers, full, err := s.add(ctx, name, create, items)
	if err != nil {
		return err
	}
	n := len(answers)
	if full {
		n++
	}
	c.w.WriteArray(n)
	for _, present := range answers {
		c.w.WriteInt64(added(present))
	}
	if full {
		c.w.WriteError(string(errFull))
	}
	return nil
}

func added(present bool) int64 {
	if present {
		return 0
	}
	return 1
}

// BF.EXISTS key item: 0 for a key that is no filter, as in RedisBloom.
func bfExists(ctx context.Context, s *Server, c *call) error {
	present := false
	if f, ok := s.lookup(c.arg(1)); ok {
		if !s.opts.Writes.Placed() {
			present = f.Check(c.arg(2))
		} else {
			answers, err := s.check(ctx, f, []string{c.arg(2)})
			if err != nil {
				return err
			}
			present = answers[0]
		}
	}
	c.w.WriteInt64(1 - added(present))
	return nil
}

// BF.MEXISTS key item [item ...]
func bfMExists(ctx context.Context, s *Server, c *call) error {
	items := make([]string, len(c.args)-2)
	for i, a := range c.args[2:] {
		items[i] = string(a)
	}
	present := make([]bool, len(items))
	if f, ok := s.lookup(c.arg(1)); ok {
		var err error
		if present, err = s.check(ctx, f, items); err != nil {
			return err
		}
	}
	c.w.WriteArray(len(present))
	for _, p := range present {
		c.w.WriteInt64(1 - added(p))
	}
	return nil
}

// BF.INFO key [CAPACITY | SIZE | FILTERS | ITEMS | EXPANSION]: RedisBloom's fields, from the
// filter's counters (no count of its bits). Capacity is every layer's together, Size the bytes
// of the bit arrays; a non-scaling filter's expansion rate is nil.
func info(_ context.Context, s *Server, c *call) error {
	if len(c.args) > 3 {
		return wrongArity("bf.info")
	}
	f, ok := s.lookup(c.arg(1))
	if !ok {
		return errNotFound
	}
	u, o := f.Usage(), f.Options()
	var capacity uint64
	for i := range u.Layers {
		if shape, err := o.LayerShape(i); err == nil { // a layer that exists has a shape
			capacity += shape.Capacity
		}
	}
	fields := []struct {
		name, label string
		value       int64
		null        bool
	}{
		{"CAPACITY", "Capacity", clampInt(capacity), false},
		{"SIZE", "Size", clampInt(u.SizeBytes), false},
		{"FILTERS", "Number of filters", int64(u.Layers), false},
		{"ITEMS", "Number of items inserted", clampInt(u.Items), false},
		{"EXPANSION", "Expansion rate", int64(o.Growth), !o.Scalable},
	}
	if len(c.args) == 3 {
		for _, fd := range fields {
			if strings.EqualFold(c.arg(2), fd.name) {
				c.w.WriteArray(1)
				writeIntOrNull(c.w, fd.value, fd.null)
				return nil
			}
		}
		return errBadInfoField
	}
	c.w.WriteArray(2 * len(fields))
	for _, fd := range fields {
		c.w.WriteString(fd.label)
		writeIntOrNull(c.w, fd.value, fd.null)
	}
	return nil
}

func writeIntOrNull(w replier, v int64, null bool) {
	if null {
		w.WriteNull()
		return
	}
	w.WriteInt64(v)
}

// BF.CARD key: the items added, 0 for a key that is no filter.
func card(_ context.Context, s *Server, c *call) error {
	var n uint64
	if f, ok := s.lookup(c.arg(1)); ok {
		n = f.Items()
	}
	c.w.WriteInt64(clampInt(n))
	return nil
}

func clampInt(n uint64) int64 { return int64(min(n, math.MaxInt64)) }

// lookup finds a live filter; a name no filter can have is no filter.
func (s *Server) lookup(name string) (*filter.Filter, bool) {
	f, err := s.opts.Store.Get(name)
	return f, err == nil
}

func validName(name string) bool { return filter.ValidateName(name) == nil }

// parseErrorRate reads an error rate as RedisBloom does: a number, else bad; then in (0, 1).
func parseErrorRate(s string, bad error) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, bad
	}
	if !(v > 0 && v < 1) { // NaN too
		return 0, errErrorRateRange
	}
	return v, nil
}

// parseCapacity reads a capacity: an integer, else bad; then at least 1.
func parseCapacity(s string, bad error) (uint64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		return 0, bad
	case v <= 0:
		return 0, errCapacityRange
	case v > maxCapacity:
		return 0, bad
	}
	return uint64(v), nil
}

// parseExpansion reads an expansion: Bloomery's layers grow by 1 to 16 times, RedisBloom's by
// any factor.
func parseExpansion(s string, bad error) (uint, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 || v > 16 {
		return 0, bad
	}
	return uint(v), nil
}
