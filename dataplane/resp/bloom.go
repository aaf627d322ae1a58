package resp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
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
	"bf.debug":   {arity: 2, filters: true, run: debug},
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
	errBadInfoField   = replyError("Invalid information value")
	// errBadInsertArgument is BF.INSERT's answer to an option out of range, once every option
	// parsed.
	errBadInsertArgument = replyError("Bad argument received")
)

// errNotInserted prefixes RedisBloom's text for an item it could not add, the filter unable to
// grow, to Bloomery's reason (a memory limit, the layer limit).
const errNotInserted = "ERR problem inserting into filter: "

// maxCapacity is the HTTP API's bound too: far beyond any memory limit, and exact in a float.
const maxCapacity = 1 << 53

// defaults are the options of a filter that BF.ADD, BF.MADD or BF.INSERT creates: RedisBloom's
// defaults as configured (respInitialSize, respErrorRate), its expansion, the expiry of a create
// over HTTP that gives none, and RedisBloom's layout, so that its dumps load into RedisBloom and
// RedisBloom's into it.
func (s *Server) defaults() filter.Options {
	cfg := s.opts.Config
	return filter.Options{
		Capacity:         cfg.RESPInitialSize,
		FPP:              cfg.RESPErrorRate,
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
		return notInserted(err)
	case full:
		return errFull
	}
	c.w.WriteBool(!answers[0])
	return nil
}

// BF.MADD key item [item ...]
func bfMAdd(ctx context.Context, s *Server, c *call) error {
	opts := s.defaults()
	return s.addAndReply(ctx, c, c.arg(1), &opts, c.args[2:])
}

// BF.INSERT key [CAPACITY capacity] [ERROR error] [EXPANSION expansion] [NOCREATE] [NONSCALING]
// ITEMS item [item ...]: RedisBloom's order of checks, each option's value parsed as it comes,
// then ITEMS, then the values' ranges.
func insert(ctx context.Context, s *Server, c *call) error {
	opts := s.defaults()
	create := &opts
	capacity, growth := int64(opts.Capacity), int64(opts.Growth)
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
			capacity, err = parseInt(c.arg(i), replyError("Bad capacity"))
		case "ERROR":
			opts.FPP, err = parseFloat(c.arg(i), replyError("Bad error rate"))
		case "EXPANSION":
			growth, err = parseInt(c.arg(i), replyError("Bad expansion"))
		}
		if err != nil {
			return err
		}
	}
	if i+1 >= len(c.args) { // no ITEMS, or nothing after it
		return wrongArity("bf.insert")
	}
	if !(opts.FPP > 0 && opts.FPP < 1) || capacity < 1 || capacity > maxCapacity || growth < 1 || growth > filter.MaxGrowth {
		return errBadInsertArgument
	}
	opts.Capacity, opts.Growth = uint64(capacity), uint(growth)
	return s.addAndReply(ctx, c, c.arg(1), create, c.args[i+1:])
}

// addAndReply adds items and answers RedisBloom's array: 1 for an item newly added, 0 for one
// that may have been there. When a non-scaling filter fills up, its error takes the place of the
// first item that did not fit, and nothing after it is added. When the filter cannot grow (a
// memory limit, the layer limit), the error takes the place of each item it could not add: those
// after the first are tried one by one, and an item already there answers 0, as in RedisBloom.
// So an error in the array names every item not added, and an error as the whole reply means
// none was.
func (s *Server) addAndReply(ctx context.Context, c *call, name string, create *filter.Options, args [][]byte) error {
	items := make([]string, len(args))
	for i, a := range args {
		items[i] = string(a)
	}
	answers, full, err := s.add(ctx, name, create, items)
	stopped := asStopped(err)
	if err != nil && stopped == nil {
		return err
	}
	n := len(answers)
	switch {
	case full:
		n++
	case stopped != nil:
		n = len(items)
	}
	c.w.WriteArray(n)
	for _, present := range answers {
		c.w.WriteBool(!present)
	}
	switch {
	case full:
		c.w.WriteError(string(errFull))
	case stopped != nil:
		s.answerNotAdded(ctx, c.w, name, stopped, items[len(answers)+1:])
	}
	return nil
}

// answerNotAdded writes the error of the item the filter stopped at, then tries each of the rest
// alone: 0 for an item already there, the error for one the filter cannot take either.
func (s *Server) answerNotAdded(ctx context.Context, w writer, name string, stopped error, rest []string) {
	w.WriteError(oneLine(replyText(notInserted(stopped))))
	for _, item := range rest {
		present, _, err := s.add(ctx, name, nil, []string{item})
		if err != nil {
			w.WriteError(oneLine(replyText(notInserted(err))))
			continue
		}
		w.WriteBool(!present[0])
	}
}

// notInserted is the error of an add the filter could not take because it could not grow, in
// RedisBloom's words and with the reason; any other error as it is.
func notInserted(err error) error {
	if !errors.Is(err, filter.ErrTooLarge) {
		return err
	}
	return replyError(errNotInserted + strings.TrimPrefix(err.Error(), "ERR "))
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
		present = !s.opts.Writes.Placed() && f.Check(c.arg(2))
		if !present && (s.opts.Writes.Placed() || s.opts.Writes.AsksPeers(wire.ConsistencyOne)) {
			answers, err := s.check(ctx, f, []string{c.arg(2)})
			if err != nil {
				return err
			}
			present = answers[0]
		}
	}
	c.w.WriteBool(present)
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
		c.w.WriteBool(p)
	}
	return nil
}

// RedisBloom counts in a filter's size, beside its bit arrays, its chain (SBChain, 32 bytes) and
// each layer's link (SBLink, 64 bytes).
const (
	chainBytes = 32
	linkBytes  = 64
)

// layer is one layer of a filter as RedisBloom describes it: every partition's together.
type layer struct {
	bytes, bits, capacity, items uint64
	hashes                       uint
	ratio                        float64
}

// layersOf describes f's layers from its options and counters. Every layer but the newest holds
// its capacity, as a filter grows a layer only once the one before is full; the newest holds the
// rest.
func layersOf(f *filter.Filter, u filter.Usage) []layer {
	o := f.Options()
	parts := uint64(o.PartitionCount())
	out := make([]layer, 0, u.Layers)
	left := u.Items
	for i := range u.Layers {
		shape, err := o.LayerShape(i)
		if err != nil { // a layer that exists has a shape
			break
		}
		l := layer{
			bytes: shape.SizeBytes() * parts, bits: uint64(shape.Bits) * parts, capacity: shape.Capacity * parts,
			hashes: shape.Hashes, ratio: o.FPP,
		}
		if o.Scalable {
			l.ratio = o.FPP * (1 - o.Tightening) * math.Pow(o.Tightening, float64(i))
		}
		l.items = min(left, l.capacity)
		if i == u.Layers-1 {
			l.items = left
		}
		left -= l.items
		out = append(out, l)
	}
	return out
}

// BF.INFO key [CAPACITY | SIZE | FILTERS | ITEMS | EXPANSION]: RedisBloom's fields, from the
// filter's counters (no count of its bits). Capacity is every layer's together; Size is
// RedisBloom's, the bit arrays' bytes and its overhead of 32 bytes a filter and 64 a layer; a
// non-scaling filter's expansion rate is nil.
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
	for _, l := range layersOf(f, u) {
		capacity += l.capacity
	}
	fields := []struct {
		name, label string
		value       int64
		null        bool
	}{
		{"CAPACITY", "Capacity", clampInt(capacity), false},
		{"SIZE", "Size", clampInt(chainBytes + linkBytes*uint64(u.Layers) + u.SizeBytes), false},
		{"FILTERS", "Number of filters", int64(u.Layers), false},
		{"ITEMS", "Number of items inserted", clampInt(u.Items), false},
		{"EXPANSION", "Expansion rate", int64(o.Growth), !o.Scalable},
	}
	if len(c.args) == 3 {
		for _, fd := range fields {
			if !strings.EqualFold(c.arg(2), fd.name) {
				continue
			}
			// RedisBloom's one field is an array of its value in RESP2, and a map of it in RESP3.
			if c.w.resp3 {
				c.w.WriteMap(1)
				c.w.WriteString(fd.label)
			} else {
				c.w.WriteArray(1)
			}
			writeIntOrNull(c.w, fd.value, fd.null)
			return nil
		}
		return errBadInfoField
	}
	c.w.WriteMap(len(fields))
	for _, fd := range fields {
		c.w.WriteString(fd.label)
		writeIntOrNull(c.w, fd.value, fd.null)
	}
	return nil
}

func writeIntOrNull(w writer, v int64, null bool) {
	if null {
		w.WriteNull()
		return
	}
	w.WriteInt64(v)
}

// BF.DEBUG key: RedisBloom's description of a filter, one line for the filter (its items) and one
// for each layer: its bytes, bits, hashes, hash width (64, as RedisBloom's filters), capacity,
// items and error rate.
func debug(_ context.Context, s *Server, c *call) error {
	f, ok := s.lookup(c.arg(1))
	if !ok {
		return errNotFound
	}
	u := f.Usage()
	layers := layersOf(f, u)
	c.w.WriteArray(1 + len(layers))
	c.w.WriteBulkString("size:" + strconv.FormatUint(u.Items, 10))
	for _, l := range layers {
		c.w.WriteBulkString(fmt.Sprintf("bytes:%d bits:%d hashes:%d hashwidth:64 capacity:%d size:%d ratio:%s",
			l.bytes, l.bits, l.hashes, l.capacity, l.items, strconv.FormatFloat(l.ratio, 'g', 6, 64)))
	}
	return nil
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
	v, err := parseFloat(s, bad)
	if err != nil {
		return 0, err
	}
	if !(v > 0 && v < 1) { // NaN too
		return 0, errErrorRateRange
	}
	return v, nil
}

// parseCapacity reads a capacity: an integer, else bad; then at least 1.
func parseCapacity(s string, bad error) (uint64, error) {
	v, err := parseInt(s, bad)
	switch {
	case err != nil:
		return 0, err
	case v <= 0:
		return 0, errCapacityRange
	case v > maxCapacity:
		return 0, bad
	}
	return uint64(v), nil
}

// parseExpansion reads an expansion: an integer from 1 to RedisBloom's largest, 32768, else bad.
// A layer that would not fit the memory limits is refused when the filter grows into it.
func parseExpansion(s string, bad error) (uint, error) {
	v, err := parseInt(s, bad)
	if err != nil || v < 1 || v > filter.MaxGrowth {
		return 0, bad
	}
	return uint(v), nil
}

// parseInt reads an integer as Redis does, or answers bad.
func parseInt(s string, bad error) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, bad
	}
	return v, nil
}

// parseFloat reads a number, or answers bad.
func parseFloat(s string, bad error) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, bad
	}
	return v, nil
}
