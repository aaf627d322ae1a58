package peer

import (
	"testing"
	"time"
)

// A batch takes what is queued at once; lingering, it also takes what comes until its wait ends,
// and leaves a write over the budget to open the next batch.
func TestFillTakesWhatComesWhileItLingers(t *testing.T) {
	s := &Sender{opts: SenderOptions{MaxBatchBytes: 4 << 10}, queue: make(chan pending, 16)}
	write := pending{op: Op{Kind: OpAdd, Name: "f", Generation: 1, Keys: []string{"k"}}}
	for range 5 {
		s.queue <- write
	}
	batch, size, carried := s.fill(nil, 0, nil)
	if len(batch) != 5 || carried != nil {
		t.Fatalf("without lingering: %d writes and carried %v, want the 5 queued", len(batch), carried)
	}

	wait := make(chan time.Time)
	go func() {
		s.queue <- write
		s.queue <- write
		for len(s.queue) > 0 {
			time.Sleep(time.Millisecond)
		}
		wait <- time.Now()
	}()
	batch, size, carried = s.fill(batch, size, wait)
	if len(batch) != 7 || carried != nil {
		t.Fatalf("lingering: %d writes and carried %v, want the 2 that came too", len(batch), carried)
	}

	big := pending{op: Op{Kind: OpAdd, Name: "f", Generation: 1, Keys: []string{string(make([]byte, 4<<10))}}}
	s.queue <- big
	batch, _, carried = s.fill(batch, size, nil)
	if len(batch) != 7 || carried == nil || carried.op.KeyCount() != 1 {
		t.Fatalf("over the budget: %d writes and carried %v, want the big write carried to the next batch", len(batch), carried)
	}
}
