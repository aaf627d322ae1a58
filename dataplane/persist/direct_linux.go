package persist

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Under SyncAlways every answer waits for the log to reach the disk, and how the wait is done
// decides the throughput more than anything else. A blocking fdatasync keeps the goroutine's P
// (Go's right to run code) for its whole duration unless the runtime's monitor, which polls
// lazily when it finds little to do, takes it back; on a pod pinned to one CPU, where Go runs with
// a single P, nothing else ran meanwhile: no request was read, so the next batch stayed empty.
// directSegment instead writes with O_DIRECT|O_DSYNC, which makes each write durable by itself,
// through Linux native AIO with completion signalled on an eventfd that Go's network poller
// watches: the writer parks like a goroutine waiting for a socket and requests go on. It doubled
// the throughput of `always` on our machines (docs/performance.md). Where the file system
// refuses O_DIRECT (tmpfs) or the kernel AIO (a seccomp profile), segments are buffered.

// directBlock aligns O_DIRECT writes: their offset, their length and their memory.
const directBlock = 4096

// directWriteSize bounds one write; larger batches are written in several.
const directWriteSize = 1 << 20

// directSegment writes a segment with O_DIRECT|O_DSYNC through an asyncIO. Writes are whole
// blocks: the block the records end in is written again, with the records that follow, by the
// next write; bytes before the end of the records are the same in both, so a write torn at a
// sector leaves earlier records intact.
type directSegment struct {
	file     *os.File // the segment, as created: trimmed at close
	direct   *os.File // the same file, opened with O_DIRECT|O_DSYNC
	aio      *asyncIO
	buf      []byte // directWriteSize bytes of aligned memory; starts with the records' last partial block
	size     int64  // bytes of records
	fileSize int64  // bytes of the file; those from size on are zeros
}

// openDirectSegment opens file, just created, for direct writes and preallocates its first
// chunk, which tells whether the file system takes them.
func openDirectSegment(file *os.File, aio *asyncIO) (segmentFile, error) {
	direct, err := os.OpenFile(file.Name(), os.O_WRONLY|syscall.O_DIRECT|syscall.O_DSYNC, 0)
	if err != nil {
		return nil, err
	}
	buf, err := alignedMemory(directWriteSize)
	if err != nil {
		_ = direct.Close()
		return nil, err
	}
	s := &directSegment{file: file, direct: direct, aio: aio, buf: buf}
	if err := s.allocate(preallocChunk); err != nil {
		_ = direct.Close()
		_ = unix.Munmap(buf)
		return nil, err
	}
	return s, nil
}

func (s *directSegment) write(records []byte, _ bool) (err error) {
	begin := s.size
	defer func() {
		if err != nil {
			s.size = begin // the blocks written hold part of the records: they count for nothing
		}
	}()
	for len(records) > 0 {
		start := s.size &^ (directBlock - 1)
		tail := int(s.size - start) // bytes of the last partial block, at the start of buf
		n := copy(s.buf[tail:], records)
		end := tail + n
		padded := int(roundUp(int64(end), directBlock))
		clear(s.buf[end:padded])
		if err := s.allocate(start + int64(padded)); err != nil {
			return err
		}
		if err := s.aio.pwrite(s.direct, s.buf[:padded], start); err != nil {
			return err
		}
		s.size += int64(n)
		records = records[n:]
		last := end &^ (directBlock - 1)
		copy(s.buf, s.buf[last:end])
	}
	return nil
}

// allocate grows the file with zeros, a chunk at a time, until it holds end bytes. O_DSYNC
// makes the new size durable with them.
func (s *directSegment) allocate(end int64) error {
	for s.fileSize < end {
		if err := s.aio.pwrite(s.direct, directZeros(), s.fileSize); err != nil {
			return err
		}
		s.fileSize += preallocChunk
	}
	return nil
}

// diskFailure tells a disk that failed a write (full, over quota, broken) from a file system or
// kernel that refuses direct I/O: only the latter turns direct I/O off.
func diskFailure(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO)
}

func (s *directSegment) recordBytes() int64 { return s.size }

func (s *directSegment) abandon() int64 {
	_ = s.direct.Close()
	_ = unix.Munmap(s.buf)
	_ = s.file.Close()
	return s.size
}

func (s *directSegment) close() error {
	err := s.direct.Close()
	if merr := unix.Munmap(s.buf); err == nil {
		err = merr
	}
	return errors.Join(err, closeTrimmed(s.file, s.size))
}

// directZeros is preallocChunk bytes of aligned zeros, never written.
var directZeros = sync.OnceValue(func() []byte {
	zeros, err := alignedMemory(preallocChunk)
	if err != nil {
		panic("persist: mapping " + fmt.Sprint(preallocChunk) + " bytes of zeros: " + err.Error())
	}
	return zeros
})

// alignedMemory maps n bytes of anonymous memory, page aligned as O_DIRECT wants it.
func alignedMemory(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// asyncIO does one write at a time through Linux native AIO (io_submit), and waits for its
// completion on an eventfd in Go's network poller.
type asyncIO struct {
	ctx   uintptr  // aio_context_t
	efd   int      // the eventfd; event.Fd would make it blocking
	event *os.File // the eventfd, in the network poller
}

// iocb and ioEvent are the kernel's struct iocb and struct io_event (linux/aio_abi.h); the
// blank fields are those left zero here. Of the two 32-bit fields after the first, the order
// differs on big-endian machines; both are zero.
type iocb struct {
	_      uint64 // aio_data
	_      uint32 // aio_key
	_      int32  // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdPwrite = 1
	iocbFlagResfd = 1 << 0
)

func newAsyncIO() (*asyncIO, error) {
	var ctx uintptr
	if err := retryEINTR(func() syscall.Errno {
		_, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0)
		return e
	}); err != nil {
		return nil, os.NewSyscallError("io_setup", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &asyncIO{ctx: ctx, efd: efd, event: os.NewFile(uintptr(efd), "eventfd")}, nil
}

// pwrite writes all of b at offset of f and returns when the write has completed; the calling
// goroutine is parked meanwhile. b must stay mapped until then (it is not Go memory).
func (a *asyncIO) pwrite(f *os.File, b []byte, offset int64) error {
	cb := iocb{
		opcode: iocbCmdPwrite,
		fildes: uint32(f.Fd()),
		buf:    uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))),
		nbytes: uint64(len(b)),
		offset: offset,
		flags:  iocbFlagResfd,
		resfd:  uint32(a.efd),
	}
	cbs := [1]*iocb{&cb}
	if err := retryEINTR(func() syscall.Errno {
		_, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		return e
	}); err != nil {
		return os.NewSyscallError("io_submit", err)
	}
	var count [8]byte
	if _, err := io.ReadFull(a.event, count[:]); err != nil {
		return fmt.Errorf("waiting for a log write: %w", err)
	}
	var ev ioEvent
	var noWait unix.Timespec
	var got uintptr
	if err := retryEINTR(func() syscall.Errno {
		var e syscall.Errno
		got, _, e = unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&noWait)), 0)
		return e
	}); err != nil {
		return os.NewSyscallError("io_getevents", err)
	}
	switch {
	case got != 1:
		return errors.New("io_getevents: no completion after the eventfd signalled one")
	case ev.res < 0:
		return &os.PathError{Op: "write", Path: f.Name(), Err: syscall.Errno(-ev.res)}
	case ev.res != int64(len(b)):
		// The device took part of the write: it is out of room, as a full tmpfs answers, and
		// must not be taken for a file system without direct I/O (diskFailure).
		return &os.PathError{Op: "write", Path: f.Name(), Err: fmt.Errorf("%w (wrote %d of %d bytes)", syscall.ENOSPC, ev.res, len(b))}
	}
	return nil
}

func (a *asyncIO) close() error {
	_, _, e := unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
	err := a.event.Close()
	if e != 0 {
		return errors.Join(os.NewSyscallError("io_destroy", e), err)
	}
	return err
}

func retryEINTR(call func() syscall.Errno) error {
	for {
		if e := call(); e != syscall.EINTR {
			if e != 0 {
				return e
			}
			return nil
		}
	}
}
