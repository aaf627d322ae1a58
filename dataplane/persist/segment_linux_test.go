package persist

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// TestAlwaysWritesDirectlyWhereItCan checks which segments SyncAlways picks: direct ones where the
// file system takes O_DIRECT, buffered ones (and a log line saying why) where it refuses them;
// either way an answered record is in the file.
func TestAlwaysWritesDirectlyWhereItCan(t *testing.T) {
	if _, err := newAsyncIO(); err != nil {
		t.Skipf("no kernel AIO here: %v", err)
	}
	check := func(t *testing.T, dir string, wantDirect bool) {
		t.Helper()
		var logs bytes.Buffer
		w, err := openWAL(dir, 1, 0, SyncAlways, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.close() }()
		_, direct := w.file.(*bufferedSegment)
		direct = !direct
		if direct != wantDirect {
			t.Errorf("direct segment: %t, want %t; logs: %s", direct, wantDirect, logs.String())
		}
		if d, ok := w.file.(*directSegment); ok {
			// Each direct write is durable by itself only with both flags: the kernel says which
			// the file was opened with.
			if flags := openFlags(t, d.direct); flags&(syscall.O_DIRECT|syscall.O_DSYNC) != syscall.O_DIRECT|syscall.O_DSYNC {
				t.Errorf("the direct segment is open with flags %#o, want O_DIRECT|O_DSYNC", flags)
			}
		}
		if !wantDirect && !bytes.Contains(logs.Bytes(), []byte("fdatasync")) {
			t.Errorf("logs %q: want a line saying that writes go through fdatasync", logs.String())
		}
		ticket, err := w.append([]byte("record"))
		if err == nil {
			err = w.commit(ticket)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, segmentName(1))); !bytes.Contains(got, []byte("record")) {
			t.Errorf("the committed record is not in the segment")
		}
	}
	t.Run("disk", func(t *testing.T) {
		dir := directIODir(t)
		check(t, dir, true)
	})
	t.Run("refused", func(t *testing.T) {
		// As on a file system without O_DIRECT: opening the segment for direct writes fails.
		defer func(saved func(*os.File, *asyncIO) (segmentFile, error)) { openDirect = saved }(openDirect)
		openDirect = func(*os.File, *asyncIO) (segmentFile, error) {
			return nil, &os.PathError{Op: "open", Path: "segment", Err: syscall.EINVAL}
		}
		check(t, t.TempDir(), false)
	})
}

// directIODir is a temporary directory on a file system that takes O_DIRECT.
func directIODir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if directIOWorks(dir) {
		return dir
	}
	// A fresh machine's /tmp may be a tmpfs, and -short asks no more of the machine than Go and
	// a C compiler.
	if testing.Short() {
		t.Skipf("%s does not take O_DIRECT, which -short does not ask for: set TMPDIR to a real disk to test direct writes", dir)
	}
	// Skipping must be asked for, and never in CI, which runs on a disk that takes it.
	if os.Getenv("CI") != "" || os.Getenv("BLOOMERY_SKIP_DIRECT_IO_TESTS") != "1" {
		t.Fatalf("%s does not take O_DIRECT: run the tests with TMPDIR on a disk that does, "+
			"or set BLOOMERY_SKIP_DIRECT_IO_TESTS=1 to skip this on your machine", dir)
	}
	t.Skipf("%s does not take O_DIRECT", dir)
	return ""
}

// A full disk fails the preallocation of a new direct segment as it fails any write: that is no
// sign that the file system refuses O_DIRECT. The segment is not created (no empty file left per
// attempt), and the next segment, once there is room, is direct again.
func TestAFullDiskDoesNotTurnDirectIOOff(t *testing.T) {
	if _, err := newAsyncIO(); err != nil {
		t.Skipf("no kernel AIO here: %v", err)
	}
	dir := directIODir(t)
	var logs bytes.Buffer
	w, err := openWAL(dir, 1, 0, SyncAlways, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.close() }()
	defer func(saved func(*os.File, *asyncIO) (segmentFile, error)) { openDirect = saved }(openDirect)
	directOpen := openDirect
	openDirect = func(*os.File, *asyncIO) (segmentFile, error) {
		return nil, &os.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
	}
	if _, err := w.rotate(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("rotation onto a full disk: %v, want ENOSPC", err)
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(2))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the segment that could not be opened is left behind: %v", err)
	}
	openDirect = directOpen
	if _, err := w.rotate(); err != nil {
		t.Fatalf("rotation once the disk has room: %v", err)
	}
	if _, direct := w.file.(*directSegment); !direct || strings.Contains(logs.String(), "fdatasync") {
		t.Errorf("after a full disk the log writes through %T; logs: %s", w.file, logs.String())
	}
}

func directIOWorks(dir string) bool {
	path := filepath.Join(dir, "probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644)
	_ = os.Remove(path)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// The kernel reads struct iocb as 64 bytes and writes struct io_event as 32.
func TestAIOStructSizes(t *testing.T) {
	if got := unsafe.Sizeof(iocb{}); got != 64 {
		t.Errorf("iocb is %d bytes, want 64", got)
	}
	if got := unsafe.Sizeof(ioEvent{}); got != 32 {
		t.Errorf("ioEvent is %d bytes, want 32", got)
	}
}

// openFlags reads the flags f was opened with from /proc/self/fdinfo.
func openFlags(t *testing.T, f *os.File) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(flags)
		}
	}
	t.Fatalf("no flags in fdinfo: %s", raw)
	return 0
}

// Under always every answered write went through fdatasync on its segment; under everysec the
// timed flush does it; under no nothing does. A segment written without it would pass every
// crash test of the process alone: the page cache outlives the process.
func TestDurableMeansFdatasync(t *testing.T) {
	defer func(saved func(*os.File, *asyncIO) (segmentFile, error)) { openDirect = saved }(openDirect)
	openDirect = func(*os.File, *asyncIO) (segmentFile, error) { return nil, syscall.EINVAL } // buffered segments
	var calls atomic.Int64
	defer func(saved func(int) error) { fdatasync = saved }(fdatasync)
	fdatasync = func(fd int) error {
		calls.Add(1)
		return syscall.Fdatasync(fd)
	}
	for _, tc := range []struct {
		policy SyncPolicy
		want   bool
	}{{SyncAlways, true}, {SyncEverySecond, true}, {SyncNo, false}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			w, err := openWAL(t.TempDir(), 1, 0, tc.policy, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.close() }()
			before := calls.Load()
			ticket, err := w.append([]byte("record"))
			if err == nil {
				err = w.commit(ticket)
			}
			if err == nil && tc.policy != SyncAlways {
				err = w.flush(tc.policy == SyncEverySecond) // what the timer does once a second
			}
			if err != nil {
				t.Fatal(err)
			}
			if synced := calls.Load() > before; synced != tc.want {
				t.Errorf("fdatasync called: %t, want %t", synced, tc.want)
			}
		})
	}
}
