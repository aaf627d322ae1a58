//go:build !linux

package persist

import (
	"errors"
	"os"
)

// asyncIO and direct segments are Linux's; elsewhere segments are buffered.
type asyncIO struct{}

func newAsyncIO() (*asyncIO, error) { return nil, errors.ErrUnsupported }

func (*asyncIO) close() error { return nil }

func openDirectSegment(*os.File, *asyncIO) (segmentFile, error) { return nil, errors.ErrUnsupported }

// diskFailure is never asked where there are no direct segments.
func diskFailure(error) bool { return false }
