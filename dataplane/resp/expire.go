package resp

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// expireCommands are Redis's commands of a key's time to live, mapped onto the filter's expiry:
// EXPIRE and PEXPIRE set a deadline, PERSIST makes the filter live until it is deleted, and
// TTL and PTTL read what is left. A change goes through the write service like any write.
var expireCommands = map[string]command{
	"expire":  {arity: -3, filters: true, run: expireIn(time.Second, "expire")},
	"pexpire": {arity: -3, filters: true, run: expireIn(time.Millisecond, "pexpire")},
	"ttl":     {arity: 2, filters: true, run: ttlIn(time.Second)},
	"pttl":    {arity: 2, filters: true, run: ttlIn(time.Millisecond)},
	"persist": {arity: 2, filters: true, run: persist},
}

// Redis 7's error texts of EXPIRE's options.
const (
	errNXWithOthers = replyError("ERR NX and XX, GT or LT options at the same time are not compatible")
	errGTAndLT      = replyError("ERR GT and LT options at the same time are not compatible")
	errNotInteger   = replyError("ERR value is not an integer or out of range")
)

// expireCondition is one of EXPIRE's options, or none.
type expireCondition struct{ nx, xx, gt, lt bool }

// parseExpireOptions reads EXPIRE's options after its key and time, as Redis does: any number
// of them, in any case, then the incompatible pairs.
func parseExpireOptions(args [][]byte) (expireCondition, error) {
	var c expireCondition
	for _, a := range args {
		switch strings.ToLower(string(a)) {
		case "nx":
			c.nx = true
		case "xx":
			c.xx = true
		case "gt":
			c.gt = true
		case "lt":
			c.lt = true
		default:
			return c, errorf("Unsupported option %s", a)
		}
	}
	switch {
	case c.nx && (c.xx || c.gt || c.lt):
		return c, errNXWithOthers
	case c.gt && c.lt:
		return c, errGTAndLT
	}
	return c, nil
}

// allows applies the condition as Redis does, in milliseconds, to a filter whose expiry is
// current (the zero time: none, which GT and LT take as infinite) and a new deadline of when.
func (c expireCondition) allows(current time.Time, when int64) bool {
	has := !current.IsZero()
	cur := current.UnixMilli()
	switch {
	case c.nx && has, c.xx && !has:
		return false
	case c.gt && (!has || when <= cur):
		return false
	case c.lt && has && when >= cur:
		return false
	}
	return true
}

// maxDeadlineMillis is the last deadline a filter can hold: the engine, its log and its replicas
// count time in int64 nanoseconds, which end in the year 2262. Redis takes later ones; Bloomery
// answers them as Redis answers a time that overflows.
const maxDeadlineMillis = math.MaxInt64 / int64(time.Millisecond)

// expireIn is EXPIRE (unit a second) or PEXPIRE (a millisecond): key, time, options. The checks
// follow Redis's order: options, the integer, its overflow, and only then the key.
func expireIn(unit time.Duration, name string) func(context.Context, *Server, *call) error {
	perUnit := int64(unit / time.Millisecond)
	return func(ctx context.Context, s *Server, c *call) error {
		cond, err := parseExpireOptions(c.args[3:])
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(c.arg(2), 10, 64)
		if err != nil {
			return errNotInteger
		}
		invalid := errorf("invalid expire time in '%s' command", name)
		if n > math.MaxInt64/perUnit || n < math.MinInt64/perUnit {
			return invalid
		}
		now := s.opts.Store.Now().UnixMilli()
		ms := n * perUnit
		if ms > math.MaxInt64-now {
			return invalid
		}
		when := now + ms
		if when > maxDeadlineMillis {
			return invalid
		}
		f, ok := s.liveFilter(c.arg(1))
		if !ok {
			c.w.WriteInt64(0)
			return nil
		}
		changed, err := s.opts.Writes.ChangeExpiry(ctx, s.level, f, func(current time.Time) (filter.Expiry, bool) {
			return filter.Expiry{Mode: filter.ExpiryAt, At: time.UnixMilli(when)}, cond.allows(current, when)
		})
		if err != nil {
			return err
		}
		c.w.WriteInt64(boolInt(changed))
		return nil
	}
}

// ttlIn is TTL (unit a second, rounded to the nearest as Redis does) or PTTL: -2 for a missing
// key, -1 for a filter that never expires, else what is left, never below 0.
func ttlIn(unit time.Duration) func(context.Context, *Server, *call) error {
	return func(_ context.Context, s *Server, c *call) error {
		f, ok := s.liveFilter(c.arg(1))
		if !ok {
			c.w.WriteInt64(-2)
			return nil
		}
		expiry := f.Expiry()
		if expiry.IsZero() {
			c.w.WriteInt64(-1)
			return nil
		}
		left := max(expiry.Sub(s.opts.Store.Now()).Milliseconds(), 0)
		if unit == time.Second {
			left = (left + 500) / 1000
		}
		c.w.WriteInt64(left)
		return nil
	}
}

// persist makes a filter that expires live until it is deleted: 1, or 0 for a missing key or a
// filter that never expired anyway.
func persist(ctx context.Context, s *Server, c *call) error {
	f, ok := s.liveFilter(c.arg(1))
	if !ok {
		c.w.WriteInt64(0)
		return nil
	}
	changed, err := s.opts.Writes.ChangeExpiry(ctx, s.level, f, func(current time.Time) (filter.Expiry, bool) {
		return filter.Expiry{Mode: filter.ExpiryNever}, !current.IsZero()
	})
	if err != nil {
		return err
	}
	c.w.WriteInt64(boolInt(changed))
	return nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
