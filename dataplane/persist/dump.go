package persist

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// A dump is one filter in the snapshot's record format: a filter record, self-checking, that a
// peer streams to another for catch-up and repair (docs/persistence.md describes the format).

// WriteDump writes one filter's state to w.
func WriteDump(w io.Writer, st filter.State) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	err := writeFilterRecord(func(p []byte) error { _, err := bw.Write(p); return err }, st)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing the dump of %q: %w", st.Name, err)
	}
	return nil
}

// ReadDump reads one filter's state from r, which holds at most limit bytes: lengths are checked
// against it before anything is allocated, and the checksum before the state is answered. The
// bits are in filter.TransientWords: release gives them back, after which the state's Words must
// not be used.
func ReadDump(r io.Reader, limit int64) (st filter.State, release func(), err error) {
	rr := &recordReader{r: bufio.NewReaderSize(r, 1<<16), remaining: limit}
	b, err := rr.next()
	if errors.Is(err, io.EOF) {
		return filter.State{}, nil, fmt.Errorf("%w: empty dump", ErrCorrupt)
	}
	if err != nil {
		return filter.State{}, nil, err
	}
	d := decoder{r: b, left: b.length}
	if kind := d.u8(); kind != kindFilter && d.err == nil {
		d.fail("a dump holds a filter record, not kind %d", kind)
	}
	st = d.filterHead()
	release = func() {}
	if d.err == nil {
		if release, err = st.AllocTransient(); err != nil {
			return filter.State{}, nil, err
		}
	}
	var layers [][]uint64
	for _, l := range st.AllLayers() {
		layers = append(layers, l.Words)
	}
	d.words(layers)
	if err := b.verify(); err != nil {
		release()
		return filter.State{}, nil, err
	}
	if d.err != nil {
		release()
		return filter.State{}, nil, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	return st, release, nil
}
