package httpapi

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// encoding/json refuses NaN and infinities: one estimate of either made every GET of a filter
// answer 500 for good. Whatever the engine computes, the description encodes.
func TestDescribeClampsWhatJSONCannotEncode(t *testing.T) {
	s := &Server{}
	for _, tc := range []struct{ fill, fpp, wantFill, wantFPP float64 }{
		{math.NaN(), math.NaN(), 1, 1},
		{math.Inf(1), math.Inf(-1), 1, 0},
		{1.0000001, -0.5, 1, 0},
		{0.25, 1e-20, 0.25, 1e-20},
	} {
		out := s.describe(filter.Info{FillRatio: tc.fill, EstimatedFPP: tc.fpp})
		if _, err := json.Marshal(out); err != nil {
			t.Errorf("fill %v, fpp %v: %v", tc.fill, tc.fpp, err)
		}
		if out.FillRatio != tc.wantFill || out.EstimatedFPP != tc.wantFPP {
			t.Errorf("fill %v, fpp %v described as %v, %v; want %v, %v", tc.fill, tc.fpp, out.FillRatio, out.EstimatedFPP, tc.wantFill, tc.wantFPP)
		}
	}
}
