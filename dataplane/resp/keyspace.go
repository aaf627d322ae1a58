package resp

import (
	"cmp"
	"context"
	"hash/fnv"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// keyspaceCommands see the filters as Redis keys of RedisBloom's type.
var keyspaceCommands = map[string]command{
	"del":    {arity: -2, filters: true, run: del},
	"exists": {arity: -2, filters: true, run: exists},
	"type":   {arity: 2, filters: true, run: keyType},
	"keys":   {arity: 2, filters: true, run: keys},
	"scan":   {arity: -2, filters: true, run: scan},
	// UNLINK is DEL: a delete frees the filter's memory at once either way.
	"unlink":   {arity: -2, filters: true, run: del},
	"dbsize":   {arity: 1, filters: true, run: dbsize},
	"flushdb":  {arity: -1, filters: true, run: flush},
	"flushall": {arity: -1, filters: true, run: flush},
	"rename":   {arity: 3, run: notRenamed},
	"renamenx": {arity: 3, run: notRenamed},
	"copy":     {arity: -3, run: notRenamed},
}

// bloomType is RedisBloom's type name, which TYPE answers for a filter.
const bloomType = "MBbloom--"

// del deletes through the write service, so that the delete is replicated; it counts the keys
// that existed here.
func del(ctx context.Context, s *Server, c *call) error {
	var deleted int64
	for _, key := range c.args[1:] {
		if s.live(string(key)) {
			deleted++
		}
	}
	for _, key := range c.args[1:] {
		if !validName(string(key)) {
			continue // no filter can have this name
		}
		if err := s.opts.Writes.Delete(ctx, s.level, string(key)); err != nil {
			return err
		}
	}
	c.w.WriteInt64(deleted)
	return nil
}

// exists counts the keys that are filters, a key named twice twice, as Redis does.
func exists(_ context.Context, s *Server, c *call) error {
	var n int64
	for _, key := range c.args[1:] {
		if s.live(string(key)) {
			n++
		}
	}
	c.w.WriteInt64(n)
	return nil
}

func keyType(_ context.Context, s *Server, c *call) error {
	if s.live(c.arg(1)) {
		c.w.WriteString(bloomType)
	} else {
		c.w.WriteString("none")
	}
	return nil
}

// live reports whether a filter of that name is there and has not expired: as in Redis, a key
// past its time to live no longer exists, even before the purge removes it.
func (s *Server) live(name string) bool {
	_, ok := s.liveFilter(name)
	return ok
}

// liveFilter is the filter of that name if it is there and has not expired.
func (s *Server) liveFilter(name string) (*filter.Filter, bool) {
	f, err := s.opts.Store.Get(name)
	return f, err == nil
}

func keys(_ context.Context, s *Server, c *call) error {
	var out []string
	for _, name := range s.opts.Store.Names() {
		if globMatch(c.arg(1), name) {
			out = append(out, name)
		}
	}
	writeStrings(c.w, out)
	return nil
}

// globMatch is Redis's glob for filter names: names have no '/', so path.Match's rules are
// Redis's (*, ?, [a-z], [^a], \x); a malformed pattern matches nothing, as in Redis.
func globMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return ok && err == nil
}

// scanDefaultCount is Redis's default COUNT.
const scanDefaultCount = 10

// scan walks the names in the order of their 64-bit FNV-1a hashes; the cursor is the hash to
// resume from. A name present for the whole walk is returned exactly once whatever is created or
// deleted meanwhile, as Redis guarantees. Each page sorts every name: SCAN over many thousands of
// filters costs what KEYS does.
func scan(_ context.Context, s *Server, c *call) error {
	cursor, err := strconv.ParseUint(c.arg(1), 10, 64)
	if err != nil {
		return errorf("invalid cursor")
	}
	pattern, count, typ := "*", scanDefaultCount, ""
	for i := 2; i < len(c.args); i += 2 {
		if i+1 >= len(c.args) {
			return errorf("syntax error")
		}
		switch strings.ToLower(c.arg(i)) {
		case "match":
			pattern = c.arg(i + 1)
		case "count":
			n, err := strconv.ParseInt(c.arg(i+1), 10, 64)
			switch {
			case err != nil:
				return errorf("value is not an integer or out of range")
			case n < 1:
				return errorf("syntax error")
			}
			count = int(min(n, 1<<20))
		case "type":
			typ = c.arg(i + 1)
		default:
			return errorf("syntax error")
		}
	}
	type hashed struct {
		hash uint64
		name string
	}
	var all []hashed
	for _, name := range s.opts.Store.Names() {
		if h := nameHash(name); h >= cursor {
			all = append(all, hashed{h, name})
		}
	}
	slices.SortFunc(all, func(a, b hashed) int { return cmp.Or(cmp.Compare(a.hash, b.hash), strings.Compare(a.name, b.name)) })
	page := all[:min(count, len(all))]
	// Names of one hash go in one page: the cursor cannot point between them.
	for len(page) < len(all) && len(page) > 0 && all[len(page)].hash == page[len(page)-1].hash {
		page = all[:len(page)+1]
	}
	next := uint64(0) // the walk is over
	if len(page) < len(all) {
		next = all[len(page)].hash
	}
	var out []string
	for _, h := range page {
		if globMatch(pattern, h.name) && (typ == "" || strings.EqualFold(typ, bloomType)) {
			out = append(out, h.name)
		}
	}
	c.w.WriteArray(2)
	c.w.WriteBulkString(strconv.FormatUint(next, 10))
	writeStrings(c.w, out)
	return nil
}

// nameHash orders SCAN's walk. Hash 0 would be read as the end of the walk, so no name has it.
func nameHash(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name)) // a hash never fails to write
	return max(h.Sum64(), 1)
}

func writeStrings(w replier, ss []string) {
	w.WriteArray(len(ss))
	for _, s := range ss {
		w.WriteBulkString(s)
	}
}

// dbsize counts the live filters, as KEYS * would list them.
func dbsize(_ context.Context, s *Server, c *call) error {
	c.w.WriteInt64(int64(len(s.opts.Store.Names())))
	return nil
}

// flush is FLUSHDB and FLUSHALL [ASYNC|SYNC]: one database, so both delete every filter, each
// through the write service as DEL does, so that the deletes are replicated. ASYNC and SYNC are
// accepted and alike: a filter's delete frees it at once. A delete that fails (a write below its
// consistency) does not stop the others; the first error is answered, with how many failed.
func flush(ctx context.Context, s *Server, c *call) error {
	if len(c.args) > 2 {
		return errorf("syntax error")
	}
	if len(c.args) == 2 && !strings.EqualFold(c.arg(1), "async") && !strings.EqualFold(c.arg(1), "sync") {
		return errorf("syntax error")
	}
	var first error
	failed := 0
	for _, name := range s.opts.Store.Names() {
		if err := s.opts.Writes.Delete(ctx, s.level, name); err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if first != nil {
		return errorf("%d filters were not deleted as the write consistency asks; the first: %v", failed, first)
	}
	c.w.WriteString("OK")
	return nil
}

// errNotRenamed answers RENAME, RENAMENX and COPY. A filter's name is its identity on every pod:
// its incarnation, its home and its partitions' owners follow from it, and replication has no
// operation that moves a filter from one name to another, so a rename could leave the old name on
// one pod and the new on another.
const errNotRenamed = replyError("ERR Bloomery cannot rename or copy a filter: its name is its identity on every replica. Create the new filter and add the items to it instead")

func notRenamed(context.Context, *Server, *call) error { return errNotRenamed }
