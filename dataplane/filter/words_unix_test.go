//go:build unix

package filter

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bloomery/bloomery/internal/await"
)

// refuseMappings makes the system refuse every anonymous mapping until the test ends.
func refuseMappings(t *testing.T) {
	t.Helper()
	mmap = func(int, int64, int, int, int) ([]byte, error) { return nil, syscall.ENOMEM }
	t.Cleanup(func() { mmap = syscall.Mmap })
}

// A mapping the system refuses is an out-of-memory error for the write that needed it: the
// budget gets its reservation back and the filter keeps serving.
func TestRefusedMappingIsAnError(t *testing.T) {
	s := NewStore(Limits{}, nil)
	// Layers of 64 KiB and more are mapped; growth 16 makes the second one that large.
	f, _, err := s.Create("f", Options{Capacity: 10_000, FPP: 0.01, Scalable: true, Growth: 16, Tightening: 0.5}, false)
	if err != nil {
		t.Fatal(err)
	}
	used := s.UsedBytes()
	refuseMappings(t)

	batch := keys("key-", 20_000)
	present, err := f.CheckAndSetMany(batch)
	if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("a growth whose mapping is refused: %v, want ErrOutOfMemory wrapping ENOMEM", err)
	}
	if len(present) == 0 || len(present) == len(batch) {
		t.Fatalf("%d of %d keys applied; want those before the growth", len(present), len(batch))
	}
	if got := s.UsedBytes(); got != used {
		t.Errorf("budget holds %d bytes after the refused growth, want %d", got, used)
	}
	// The lock was released: reads and single writes still answer.
	if !f.Check(batch[0]) {
		t.Error("a key added before the refused growth is gone")
	}
	if _, err := f.CheckAndSet(batch[len(batch)-1]); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("the next write that needs the layer: %v, want ErrOutOfMemory", err)
	}

	if _, _, err := s.Create("big", Options{Capacity: 1_000_000, FPP: 0.01}, false); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("a create whose mapping is refused: %v, want ErrOutOfMemory", err)
	}
	if got := s.UsedBytes(); got != used {
		t.Errorf("budget holds %d bytes after the refused create, want %d", got, used)
	}
	if _, err := s.Get("big"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused create left a filter: %v", err)
	}
}

// A panic while a write holds the filter's lock leaves the filter unlocked: the HTTP layer
// recovers from panics, and the next request must not hang behind a lock nobody releases.
func TestPanicInAWriteReleasesTheLock(t *testing.T) {
	s := NewStore(Limits{}, nil)
	f, _, err := s.Create("f", Options{Capacity: 10_000, FPP: 0.01, Scalable: true, Growth: 16, Tightening: 0.5}, false)
	if err != nil {
		t.Fatal(err)
	}
	mmap = func(int, int64, int, int, int) ([]byte, error) { panic("mapping failed unexpectedly") }
	t.Cleanup(func() { mmap = syscall.Mmap })
	batch := keys("key-", 20_000)
	func() {
		defer func() { _ = recover() }()
		_, _ = f.CheckAndSetMany(batch)
		t.Error("the growth did not reach the panicking mapping")
	}()
	done := make(chan bool)
	go func() { done <- f.Check(batch[0]) }()
	select {
	case present := <-done:
		if !present {
			t.Error("a key added before the panic is gone")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Check still waits for the lock the panicking write held")
	}
}

// The bit arrays of a deleted filter go back to the system without waiting for a collection
// that the heap's growth would bring: they live outside the heap, and deleting them grows
// nothing the collector counts.
func TestDeletedBitsAreUnmappedWithoutWaitingForTheHeap(t *testing.T) {
	var unmapped atomic.Int64
	munmap = func(b []byte) error {
		unmapped.Add(int64(len(b)))
		return syscall.Munmap(b)
	}
	t.Cleanup(func() { munmap = syscall.Munmap })
	s := NewStore(Limits{}, nil)
	f, _, err := s.Create("f", Options{Capacity: 60_000_000, FPP: 0.01}, false) // about 69 MiB of bits
	if err != nil {
		t.Fatal(err)
	}
	size := int64(f.SizeBytes())
	if size < collectAfterBytes {
		t.Fatalf("the filter holds %d bytes of bits, fewer than the %d that bring a collection", size, collectAfterBytes)
	}
	if _, _, err := s.Delete("f"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the deleted filter's bits are unmapped", func() bool { return unmapped.Load() >= size-FilterOverhead })
}
