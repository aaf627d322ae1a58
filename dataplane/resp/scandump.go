package resp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// dumpCommands are RedisBloom's BF.SCANDUMP and BF.LOADCHUNK, with its chunk protocol and byte
// format (chunkformat.go).
var dumpCommands = map[string]command{
	"bf.scandump":  {arity: 3, filters: true, run: scandump},
	"bf.loadchunk": {arity: 4, filters: true, run: loadchunk},
}

// Loading a filter from chunks. The header chunk creates the filter, replicated as any create,
// with every layer it describes, empty; each data chunk ORs its bytes into its layer. Bits are
// only ever set, so a chunk loaded twice, or a key added meanwhile, changes nothing a later
// chunk needs. Until every byte of the header's layers was loaded, a check could answer 0 for
// a key of the dump: RedisBloom serves such a filter as it is, this port answers its commands
// that check or add keys (loadGuarded) with LOADING and how much is loaded, as Redis answers
// while it loads a dataset. That is this pod's knowledge: the HTTP API, other pods and this pod
// after a restart serve a filter whose load did not finish as it is.
//
// The loaded bits are made durable (a snapshot) before each chunk is answered, and reach the
// other pods through anti-entropy, as the bits of a merge do.

// loadGuarded are the commands refused on a filter whose load is not finished.
var loadGuarded = map[string]bool{
	"bf.add": true, "bf.madd": true, "bf.insert": true, "bf.exists": true, "bf.mexists": true, "bf.scandump": true,
}

// loads are the filters being loaded through this port, by name.
type loads struct {
	mu sync.Mutex
	m  map[string]*load
}

// load is one filter's progress: the byte ranges of all its layers together that were loaded.
type load struct {
	generation int64
	total      uint64
	// done are disjoint, sorted ranges [start, end) of loaded bytes.
	done [][2]uint64
}

// begin starts tracking the load of the incarnation generation of name, of total bytes.
func (l *loads) begin(name string, generation int64, total uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*load{}
	}
	if total == 0 {
		delete(l.m, name)
		return
	}
	l.m[name] = &load{generation: generation, total: total}
}

// loaded records bytes [start, end) of the incarnation generation of name as loaded, and ends
// the tracking once all are.
func (l *loads) loaded(name string, generation int64, start, end uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld, ok := l.m[name]
	if !ok || ld.generation != generation || start >= end {
		return
	}
	merged := [][2]uint64{}
	for _, r := range ld.done {
		if r[1] < start || r[0] > end { // disjoint and not touching
			merged = append(merged, r)
			continue
		}
		start, end = min(start, r[0]), max(end, r[1])
	}
	merged = append(merged, [2]uint64{start, end})
	ld.done = merged
	var sum uint64
	for _, r := range merged {
		sum += r[1] - r[0]
	}
	if sum >= ld.total {
		delete(l.m, name)
	}
}

// pending is the refusal of a command on name while its load (of the incarnation f is) is not
// finished; nil otherwise.
func (l *loads) pending(f *filter.Filter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ld, ok := l.m[f.Name()]
	switch {
	case !ok:
		return nil
	case ld.generation != f.Generation(): // replaced since
		delete(l.m, f.Name())
		return nil
	}
	var sum uint64
	for _, r := range ld.done {
		sum += r[1] - r[0]
	}
	return replyError(fmt.Sprintf("LOADING the filter is being loaded by BF.LOADCHUNK: %d of %d bytes loaded", sum, ld.total))
}

// loadPending is the refusal of cmd on the filter its first argument names while that filter's
// load is not finished.
func (s *Server) loadPending(c *call, cmd command) error {
	if !loadGuarded[cmd.name] || len(c.args) < 2 {
		return nil
	}
	f, ok := s.lookup(c.arg(1))
	if !ok {
		return nil
	}
	return s.loads.pending(f)
}

// dumpHead is the state of f without its bits, of every partition: a dump is of a whole filter.
func dumpHead(f *filter.Filter) (filter.State, error) {
	if f.HeldPartitions() != f.Partitions() {
		return filter.State{}, errorf("this pod holds %d of the filter's %d partitions; a dump is taken at a pod that holds them all", f.HeldPartitions(), f.Partitions())
	}
	var st filter.State
	err := f.StreamState(nil, filter.All, func(head filter.State) error {
		st = head
		return errHeadTaken
	}, nil)
	if !errors.Is(err, errHeadTaken) {
		return filter.State{}, err
	}
	return st, nil
}

var errHeadTaken = errors.New("head taken")

// layerAt finds the layer holding position pos of all of st's layers' bytes together: its index
// in AllLayers' order, the offset of pos in it and its size. ok is false past the last layer.
func layerAt(st filter.State, pos uint64) (layer int, offset, size uint64, ok bool) {
	for i, l := range st.AllLayers() {
		size := uint64(l.WordCount()) * 8
		if pos < size {
			return i, pos, size, true
		}
		pos -= size
	}
	return 0, 0, 0, false
}

// BF.SCANDUMP key iterator: iterator 0 answers the header and iterator 1; any other the data chunk
// at that iterator and the iterator of the next, or 0 and an empty string after the last.
func scandump(_ context.Context, s *Server, c *call) error {
	f, ok := s.lookup(c.arg(1))
	if !ok {
		return errNotFound
	}
	iter, err := strconv.ParseInt(c.arg(2), 10, 64)
	if err != nil {
		return replyError("Second argument must be numeric")
	}
	st, err := dumpHead(f)
	if err != nil {
		return err
	}
	if iter == 0 {
		c.w.WriteArray(2)
		c.w.WriteInt64(1)
		c.w.WriteBulkString(string(encodeHeader(st)))
		return nil
	}
	i, offset, size, ok := layerAt(st, uint64(iter-1))
	if iter < 1 || !ok {
		c.w.WriteArray(2)
		c.w.WriteInt64(0)
		c.w.WriteBulkString("")
		return nil
	}
	buf := make([]byte, min(size-offset, uint64(s.dumpChunk())))
	n, err := f.ReadLayerBytes(i, offset, buf)
	if err != nil {
		return err
	}
	c.w.WriteArray(2)
	c.w.WriteInt64(iter + int64(n))
	c.w.WriteBulkString(string(buf[:n]))
	return nil
}

// dumpChunk is the largest data chunk: RedisBloom's, or the port's bulk string limit if smaller.
func (s *Server) dumpChunk() int64 {
	if b := s.authenticated.bulk; b > 0 && b < maxDumpChunk {
		return b
	}
	return maxDumpChunk
}

// BF.LOADCHUNK key iterator data: iterator 1 on a missing key creates the filter the header data
// describes; any other loads a data chunk into the filter's bits, with RedisBloom's checks and
// error texts.
func loadchunk(ctx context.Context, s *Server, c *call) error {
	iter, err := strconv.ParseInt(c.arg(2), 10, 64)
	if err != nil {
		return replyError("ERR Second argument must be numeric")
	}
	name, data := c.arg(1), c.args[3]
	f, ok := s.lookup(name)
	if !ok && iter == 1 {
		if err := s.loadHeader(ctx, name, data); err != nil {
			return err
		}
		c.w.WriteString("OK")
		return nil
	}
	if !ok {
		return errNotFound
	}
	if iter <= 0 || iter < int64(len(data)) {
		return errBadData
	}
	st, err := dumpHead(f)
	if err != nil {
		return err
	}
	pos := uint64(iter) - uint64(len(data))
	if pos == 0 {
		return replyError("ERR invalid offset - no link found")
	}
	i, offset, size, ok := layerAt(st, pos-1)
	switch {
	case !ok:
		return replyError("ERR invalid offset - no link found")
	case uint64(len(data)) > size-offset:
		return replyError("ERR invalid chunk - Too big for current filter")
	}
	if _, err := f.OrLayerBytes(i, offset, data); err != nil {
		if errors.Is(err, filter.ErrInvalidOptions) {
			return errBadData
		}
		return err
	}
	if err := s.durable(); err != nil {
		return err
	}
	s.loads.loaded(name, f.Generation(), pos-1, pos-1+uint64(len(data)))
	c.w.WriteString("OK")
	return nil
}

// loadHeader creates the filter name that the header chunk data describes, with all its layers.
func (s *Server) loadHeader(ctx context.Context, name string, data []byte) error {
	st, err := decodeHeader(name, data)
	if err != nil {
		return err
	}
	created, err := s.create(ctx, name, st.Options)
	if err != nil {
		return err
	}
	if !created { // created meanwhile by another client: RedisBloom's answer to a header for a key that exists
		return errBadData
	}
	f, err := s.awaitFilter(ctx, name)
	if err != nil {
		return err
	}
	if f.HeldPartitions() != f.Partitions() {
		return errorf("this pod holds %d of the filter's %d partitions; BF.LOADCHUNK is served by a pod that holds them all", f.HeldPartitions(), f.Partitions())
	}
	if !f.Options().SameShape(st.Options) {
		return errBadData
	}
	st.Created, st.LastAccess = f.Created(), f.Created()
	var total uint64
	for _, l := range st.AllLayers() {
		total += uint64(l.WordCount()) * 8
	}
	s.loads.begin(name, f.Generation(), total)
	if _, err := f.MergeBits(st); err != nil {
		return err
	}
	return s.durable()
}

// durable makes what a load changed survive a crash before it is answered.
func (s *Server) durable() error {
	if s.opts.Durable == nil {
		return nil
	}
	if err := s.opts.Durable(); err != nil {
		return fmt.Errorf("loaded, but not yet durable: %w", err)
	}
	return nil
}
