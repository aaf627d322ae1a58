package persist

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
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
		var logs bytes.Buffer
		w, err := openWAL(dir, 1, SyncAlways, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.close() }()
		_, direct := w.file.(*bufferedSegment)
		direct = !direct
		if direct != wantDirect {
			t.Errorf("direct segment: %t, want %t; logs: %s", direct, wantDirect, logs.String())
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
		dir := t.TempDir()
		if !directIOWorks(dir) {
			t.Skipf("%s does not take O_DIRECT", dir)
		}
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
