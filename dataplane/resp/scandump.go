package resp

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/dataplane/writes"
)

// dumpCommands are RedisBloom's BF.SCANDUMP and BF.LOADCHUNK, with its chunk protocol and byte
// format (chunkformat.go).
var dumpCommands = map[string]command{
	"bf.scandump":  {arity: 3, filters: true, run: scandump},
	"bf.loadchunk": {arity: 4, filters: true, run: loadchunk},
}

// Loading a filter from chunks. The header chunk creates the filter, replicated as any create,
// then applies the header (filter.Load), which adds every layer it describes, empty; each data
// chunk ORs its bytes into its layer. Both are writes of the write service (writes.Service.Load):
// journaled, replicated to every pod holding the filter and acknowledged at the port's write
// consistency, raised to quorum as an add of new items is (writes.CheckAndSetLevel), so that
// the pod that serves an item's next BF.ADD holds the loaded bits. Bits are only ever set, so a
// chunk loaded twice, or a key added meanwhile, changes nothing a later chunk needs.
//
// Until every byte of the header's layers was loaded, a check could answer 0 for a key of the
// dump: RedisBloom serves such a filter as it is, this port answers its commands that check or
// add keys (loadGuarded) with LOADING and how much is loaded, as Redis answers while it loads a
// dataset, on every pod that applied the header (filter.Filter.LoadProgress says when that
// ends).

// loadGuarded are the commands refused on a filter whose load is not finished.
var loadGuarded = map[string]bool{
	"bf.add": true, "bf.madd": true, "bf.insert": true, "bf.exists": true, "bf.mexists": true, "bf.scandump": true,
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
	done, total, loading := f.LoadProgress()
	if !loading {
		return nil
	}
	return replyError(fmt.Sprintf("LOADING the filter is being loaded by BF.LOADCHUNK: %d of %d bytes loaded", done, total))
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
		c.w.WriteBulk(encodeHeader(st))
		return nil
	}
	i, offset, size, ok := layerAt(st, uint64(iter-1))
	if iter < 1 || !ok {
		c.w.WriteArray(2)
		c.w.WriteInt64(0)
		c.w.WriteBulkString("")
		return nil
	}
	return f.ViewLayerBytes(i, offset, int(min(size-offset, uint64(s.dumpChunk()))), func(b []byte) {
		c.w.WriteArray(2)
		c.w.WriteInt64(iter + int64(len(b)))
		c.w.WriteBulk(b)
	})
}

// dumpChunk is the largest data chunk: RedisBloom's, or what the port's limits let a
// BF.LOADCHUNK carry if that is smaller, so that a dump taken here loads into a port of the same
// limits: a bulk string of the chunk, in a command of the chunk and loadChunkFraming.
func (s *Server) dumpChunk() int64 {
	size := int64(maxDumpChunk)
	if b := s.authenticated.bulk; b > 0 {
		size = min(size, b)
	}
	if c := s.authenticated.command; c > 0 {
		size = min(size, c-loadChunkFraming)
	}
	return max(size, 8)
}

// loadChunkFraming bounds what a BF.LOADCHUNK command takes besides its chunk's bytes: the array
// and bulk string headers, the command's name, the longest filter name and the largest iterator.
const loadChunkFraming = 512

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
	partition, layer := partitionLayer(st, i)
	err = s.opts.Writes.Load(ctx, s.loadLevel(), f, filter.Load{Partition: partition, Layer: layer, Offset: offset, Bytes: data})
	if err != nil {
		return loadError(err)
	}
	c.w.WriteString("OK")
	return nil
}

// partitionLayer is the partition of layer i of st in AllLayers' order, and its index there.
func partitionLayer(st filter.State, i int) (partition, layer int) {
	for p, part := range st.Parts {
		if i < len(part.Layers) {
			return p, i
		}
		i -= len(part.Layers)
	}
	return len(st.Parts), i // past the layers: refused by the filter
}

// loadLevel is the consistency a piece of a load waits for: the port's, raised as an add of new
// items is, for loaded bits are new items' bits.
func (s *Server) loadLevel() wire.Consistency { return writes.CheckAndSetLevel(s.level, false) }

// loadError maps a piece the filter refused to RedisBloom's answer to bad data.
func loadError(err error) error {
	if errors.Is(err, filter.ErrInvalidOptions) || errors.Is(err, filter.ErrNoSuchLayer) {
		return errBadData
	}
	return err
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
	return loadError(s.opts.Writes.Load(ctx, s.loadLevel(), f, filter.LoadHeadOf(st)))
}
